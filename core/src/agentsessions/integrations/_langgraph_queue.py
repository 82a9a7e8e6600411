"""LangGraph checkpoint writes waiting for their thread's turn in the saver, and how the
ones its shared save could not carry are sent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from .._manager import SessionManager
from .._models import Session

__all__ = ["_Queued", "update_each"]


class _Queued:
    """One write waiting for its namespace session's turn, and how it ended."""

    __slots__ = ("done", "error", "fn")

    def __init__(self, fn: Callable[[Session], None]) -> None:
        self.fn = fn
        self.done = False
        self.error: BaseException | None = None

    def apply(self, session: Session) -> bool:
        """Apply the change to *session*; False (and failed) if it raised."""
        try:
            self.fn(session)
        except Exception as exc:
            self.fail(exc)
            return False
        return True

    def succeed(self) -> None:
        self.done = True

    def fail(self, error: BaseException) -> None:
        self.done = True
        self.error = error

    def outcome(self) -> None:
        """Return if the write landed; raise what stopped it otherwise."""
        if not self.done:
            raise RuntimeError("a queued checkpoint write was never sent")
        if self.error is not None:
            raise self.error


async def update_each(
    manager: SessionManager,
    session_id: str,
    user_id: str | None,
    retries: int,
    batch: Sequence[_Queued],
) -> Session | None:
    """Send the writes of *batch* not ended yet as `SessionManager.update` calls made
    together; the newest stored copy, or None if none landed.

    An append needs none of the history (``last_events=0``): its cost does not grow
    with the thread. Made together, the manager's group commit gives the writes one
    load and one save, and still ends each on its own terms.
    """
    waiting = [queued for queued in batch if not queued.done]
    outcomes = await asyncio.gather(
        *(
            manager.update(
                session_id,
                queued.fn,
                user_id=user_id,
                create=True,
                retries=retries,
                last_events=0,
            )
            for queued in waiting
        ),
        return_exceptions=True,
    )
    newest: Session | None = None
    for queued, outcome in zip(waiting, outcomes, strict=True):
        if isinstance(outcome, BaseException):
            queued.fail(outcome)
            continue
        queued.succeed()
        if newest is None or outcome.version > newest.version:
            newest = outcome  # a grouped save's copy holds the writes after it too
    return newest
