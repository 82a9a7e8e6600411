"""A LangGraph checkpoint write waiting for its thread's turn in the saver, and how it ended."""

from __future__ import annotations

from collections.abc import Callable

from .._models import Session

__all__ = ["_Queued"]


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
