"""Compaction: a prefix of the history replaced in one `CompactRequest`, and its archive."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from . import _deadline
from ._errors import InvalidInputError, SessionOwnershipError
from ._ids import new_lineage, new_token, validate_id
from ._input import check_event_sizes, encode_events
from ._models import Event, Session, mark_sent
from ._records import CompactRequest, decode_events
from ._saving import tracking_of
from ._tracking import appended_in_flight, mark_loaded

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["archived_events", "compact"]


def _refuse_without_compaction(manager: SessionManager) -> None:
    if not manager.capabilities.compaction:
        raise NotImplementedError(f"{type(manager).__name__} does not implement compaction")


async def compact(
    manager: SessionManager,
    session: Session,
    through_event_id: str,
    replacement: Sequence[Event],
    archive: bool,
) -> None:
    """`SessionManager.compact`: every check before any I/O, then one `_compact`."""
    if not isinstance(session, Session):
        raise InvalidInputError(f"compact() takes a Session, not {type(session).__name__}")
    session_id = validate_id(session.session_id)
    validate_id(through_event_id, "through_event_id")
    if type(archive) is not bool:
        raise InvalidInputError(f"archive must be a bool, not {archive!r}")
    given: object = replacement  # checked: callers without a type checker pass anything
    if isinstance(given, (str, bytes, Event)) or not isinstance(given, Sequence):
        raise InvalidInputError(
            f"replacement must be a sequence of Event, not {type(given).__name__}"
        )
    _refuse_without_compaction(manager)
    loaded = tracking_of(session)
    if loaded is None:
        raise InvalidInputError(
            f"session {session_id!r} was not loaded by a manager: compact() needs the "
            "version and position of its events; get() it first"
        )
    window = session.events
    if (
        not isinstance(window, list)
        or loaded.unchanged_prefix(window) != len(loaded.events)
        or len(window) != len(loaded.events)
    ):
        raise InvalidInputError(
            f"session {session_id!r} has unsaved changes to its events: save() it before compacting"
        )
    cut = next(
        (index for index, event in enumerate(loaded.events) if event.id == through_event_id),
        None,
    )
    if cut is None:
        where = "the events loaded" if loaded.partial else "the session"
        raise InvalidInputError(
            f"session {session_id!r}: no event with id {through_event_id!r} in {where} "
            "(load it with enough last_events to include the cut)"
        )
    kept = loaded.events[cut + 1 :]
    replacing = list(replacement)
    new_events = encode_events(replacing, 0, 0, {event.id for event in kept})
    mark_sent(replacing)
    replaced = loaded.offset + cut + 1
    # Sealed kept events stay where they were: their positions move by
    # len(replacing) - replaced, and the session's shift the other way.
    shift = (loaded.shift or 0) + replaced - len(replacing)
    check_event_sizes(new_events, 0, manager.capabilities.max_event_bytes)
    new_events = manager._codec.seal_events(session_id, replacing, 0, new_events, shift)
    async with _deadline.call(manager, "compact"):
        await manager._ready()
        now = manager.clock.now()
        request = CompactRequest(
            session_id=session_id,
            expected_version=loaded.version,
            version=loaded.version + 1,
            updated_at=now,
            expires_at=manager._expiry(now),
            stored_event_count=loaded.offset + len(loaded.events),
            replaced=replaced,
            new_events=new_events,
            archive=archive,
            token=new_token(),
            lineage=new_lineage(),
            expected_lineage=loaded.lineage,
        )
        await manager._compact(request, now)
    late = appended_in_flight(session, loaded)
    session.events = [*replacing, *kept]
    session.version = request.version
    session.updated_at = now
    mark_loaded(session, lineage=request.lineage)
    if session._loaded is not None:
        session._loaded.shift = shift
    session.events.extend(late)


async def archived_events(
    manager: SessionManager, session_id: str, user_id: str | None
) -> list[Event]:
    """`SessionManager.archived_events` once the ids are checked."""
    _refuse_without_compaction(manager)
    async with _deadline.call(manager, "archived_events"):
        await manager._ready()
        now = manager.clock.now()
        if user_id is not None:
            loaded = await manager._load(session_id, 0, now)
            if loaded is not None and loaded.record.user_id != user_id:
                raise SessionOwnershipError(session_id, user_id)
        texts = await manager._archived(session_id, now)
    return manager._codec.open_archived(session_id, decode_events(texts))
