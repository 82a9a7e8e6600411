"""Reads: a stored session as the `Session` a caller gets, whole, its tail, or what changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _deadline, _json
from ._building import loaded_session
from ._errors import SessionOwnershipError
from ._models import Session
from ._records import LoadedSession
from ._tracking import LoadedState

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["get", "reload"]


async def get(
    manager: SessionManager, session_id: str, user_id: str | None, last_events: int | None
) -> Session | None:
    """`SessionManager.get` once its input is checked (*last_events* capped)."""
    async with _deadline.call(manager, "get"):
        await manager._ready()
        loaded = await manager._load(session_id, last_events, manager.clock.now())
    if loaded is None:
        return None
    record = loaded.record
    if user_id is not None and record.user_id != user_id:
        raise SessionOwnershipError(session_id, user_id)
    offset = record.event_count - len(loaded.events)
    codec = manager._codec
    events, shift = codec.open_events(session_id, loaded.events, offset)
    return loaded_session(
        session_id=record.session_id,
        user_id=record.user_id,
        events=events,
        state=_json.loads(codec.open_state(session_id, record.state)),
        created_at=record.created_at,
        updated_at=record.updated_at,
        version=record.version,
        offset=offset,
        partial=last_events is not None,
        lineage=record.lineage,
        shift=shift,
        forked_from=record.forked_from,
    )


async def reload(
    manager: SessionManager,
    session_id: str,
    held: LoadedState | None,
    user_id: str | None = None,
    last_events: int | None = None,
) -> Session | None:
    """A fresh copy of the stored session, as `SessionManager.get` returns it, built from *held*.

    *held* is the tracking of a copy that lost a race (its events are the stored
    ones of its version, whatever the caller did to the copy since). While the
    stored lineage is still the one *held* has, only the events after it are read
    (`_load_since`); otherwise, or without a tracking, the whole history is.
    """
    if held is None or not held.lineage or held.session_id != session_id:
        return await manager.get(session_id, user_id=user_id, last_events=last_events)
    held_count = held.offset + len(held.events)
    async with _deadline.call(manager, "get"):
        await manager._ready()
        loaded: LoadedSession | None = await manager._load_since(
            session_id, held_count, held.lineage, manager.clock.now()
        )
    if loaded is None:
        return None
    record = loaded.record
    if user_id is not None and record.user_id != user_id:
        raise SessionOwnershipError(session_id, user_id)
    codec = manager._codec
    fetched = loaded.events
    if record.lineage == held.lineage and len(fetched) == record.event_count - held_count:
        opened, shift = codec.open_events(session_id, fetched, held_count)
        events = [*held.events, *opened]
        offset = held.offset
        if shift is None:  # nothing new: the held events' shift still holds
            shift = held.shift
    elif len(fetched) == record.event_count:
        events, shift = codec.open_events(session_id, fetched, 0)
        offset = 0
    else:  # neither what was asked nor the whole history: read it again, plainly
        return await manager.get(session_id, user_id=user_id, last_events=last_events)
    partial = held.partial and offset > 0
    if last_events is not None:
        cut = max(0, len(events) - last_events)
        if cut:
            events = events[cut:]
            offset += cut
        partial = True
    return loaded_session(
        session_id=record.session_id,
        user_id=record.user_id,
        events=events,
        state=_json.loads(codec.open_state(session_id, record.state)),
        created_at=record.created_at,
        updated_at=record.updated_at,
        version=record.version,
        offset=offset,
        partial=partial,
        lineage=record.lineage,
        shift=shift,
        forked_from=record.forked_from,
    )
