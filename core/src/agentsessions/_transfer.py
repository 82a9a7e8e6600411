"""Moving whole sessions between stores: export, import and resumable copy.

A session is written to its destination with `SessionManager.create` (never
overwrites) and then one `save` of its events. If a run stops between the two, the
destination holds a session at version 1 with the source's state and none of its
events: `transfer_session` recognises exactly that leftover and completes it on the
next run, so an interrupted copy is resumed rather than duplicated or skipped. A
failure or cancellation the process survives removes the half-written copy at once.
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import AsyncIterator

from ._errors import SessionExistsError
from ._manager import SessionManager
from ._models import Session

__all__ = ["Outcome", "iter_sessions", "same_content", "transfer_session"]


class Outcome(enum.Enum):
    """What `transfer_session` did with one session."""

    CREATED = "created"
    COMPLETED = "completed"  # a leftover of an interrupted transfer, finished now
    SKIPPED = "skipped"  # already there, identical
    DIFFERS = "differs"  # already there with other content: left untouched


async def iter_sessions(
    manager: SessionManager, *, user_id: str | None = None, page_size: int = 100
) -> AsyncIterator[Session]:
    """Every session (newest first), one at a time: memory stays flat however large the store."""
    cursor: str | None = None
    while True:
        page = await manager.list_sessions(user_id=user_id, limit=page_size, cursor=cursor)
        for summary in page.items:
            session = await manager.get(summary.session_id)
            if session is not None:  # deleted or expired since the listing
                yield session
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def same_content(a: Session, b: Session) -> bool:
    """Same id, owner, state and events: what a copy must preserve."""
    return (
        a.session_id == b.session_id
        and a.user_id == b.user_id
        and a.state == b.state
        and a.events == b.events
    )


async def transfer_session(destination: SessionManager, source: Session) -> Outcome:
    """Write *source* into *destination* unless it is there already."""
    existing = await destination.get(source.session_id)
    if existing is None:
        try:
            created = await destination.create(
                source.session_id, source.user_id, state=source.state
            )
        except SessionExistsError:
            return await transfer_session(destination, source)
        if source.events:
            created.events.extend(source.events)
            try:
                await destination.save(created)
            except BaseException:
                # Interrupted or failed between the two writes: take back the empty
                # session we created (a hard kill leaves it for the next run to complete).
                with contextlib.suppress(Exception):
                    await destination.delete(source.session_id)
                raise
        return Outcome.CREATED
    if same_content(existing, source):
        return Outcome.SKIPPED
    if (
        existing.version == 1
        and not existing.events
        and existing.user_id == source.user_id
        and existing.state == source.state
    ):
        existing.events.extend(source.events)
        await destination.save(existing)
        return Outcome.COMPLETED
    return Outcome.DIFFERS
