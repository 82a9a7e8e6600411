"""Moving whole sessions between stores: export, import and resumable copy.

A session is written to its destination with `SessionManager.restore`: one atomic
write of the record (owner, state, timestamps, version) and every event, never over
an existing session. An interrupted copy therefore leaves each session either whole
or absent, and running it again writes exactly the ones still missing.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Awaitable, Iterable
from typing import Any, TypeVar, cast

from agentsessions import Session, SessionExistsError, SessionManager

__all__ = [
    "PRESERVED_FIELDS",
    "Outcome",
    "differences",
    "iter_batches",
    "iter_sessions",
    "transfer_many",
    "transfer_session",
]

#: Every field of a session that a transfer keeps exactly, and verification compares.
PRESERVED_FIELDS = (
    "session_id",
    "user_id",
    "state",
    "events",
    "created_at",
    "updated_at",
    "version",
    "forked_from",
)


T = TypeVar("T")

_ATTEMPTS = 4


class Outcome(enum.Enum):
    """What `transfer_session` did with one session."""

    CREATED = "created"
    SKIPPED = "skipped"  # already there, identical
    DIFFERS = "differs"  # already there with other content: left untouched


async def iter_batches(
    manager: SessionManager, *, user_id: str | None = None, page_size: int = 100
) -> AsyncIterator[list[Session]]:
    """Every session, one listing page at a time (newest first), each page read
    concurrently: memory stays flat however large the store, and a slow server costs
    one round trip per page rather than per session."""
    cursor: str | None = None
    while True:
        page = await manager.list_sessions(user_id=user_id, limit=page_size, cursor=cursor)
        loaded = await _all(manager.get(item.session_id) for item in page.items)
        # None: deleted or expired since the listing.
        yield [session for session in loaded if session is not None]
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def iter_sessions(
    manager: SessionManager, *, user_id: str | None = None, page_size: int = 100
) -> AsyncIterator[Session]:
    """Every session (newest first), one at a time."""
    async for batch in iter_batches(manager, user_id=user_id, page_size=page_size):
        for session in batch:
            yield session


def _comparable(session: Session, name: str) -> Any:
    value = getattr(session, name)
    if name == "events":
        return [event.model_dump() for event in value]
    return value


def differences(a: Session, b: Session) -> list[str]:
    """The names of the preserved fields in which *a* and *b* differ (empty: identical)."""
    return [name for name in PRESERVED_FIELDS if _comparable(a, name) != _comparable(b, name)]


async def transfer_session(destination: SessionManager, source: Session) -> Outcome:
    """Write *source* into *destination* exactly, unless a session has its id there."""
    for _ in range(_ATTEMPTS):
        try:
            await destination.restore(source)
        except SessionExistsError:
            existing = await destination.get(source.session_id)
            if existing is None:
                continue  # deleted or expired since: absent now, so write it after all
            return Outcome.DIFFERS if differences(existing, source) else Outcome.SKIPPED
        return Outcome.CREATED
    await destination.restore(source)  # the id keeps coming and going: let its error show
    return Outcome.CREATED


async def transfer_many(destination: SessionManager, sessions: list[Session]) -> list[Outcome]:
    """`transfer_session` for each of *sessions*, concurrently; outcomes in order."""
    return await _all(transfer_session(destination, s) for s in sessions)


async def _all(calls: Iterable[Awaitable[T]]) -> list[T]:
    """Await every call concurrently; if any failed, raise the first failure once all
    have finished, so that none is still writing (or failing unseen) afterwards."""
    results = await asyncio.gather(*calls, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return cast("list[T]", results)
