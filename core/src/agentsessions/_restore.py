"""Writing a whole session at once: `create` of an empty one, `restore` of one as it is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from . import _deadline, _json
from ._errors import InvalidInputError, PartialSessionError
from ._ids import new_lineage, optional_id, validate_id
from ._input import aware, check_event_sizes, encode_events
from ._models import ForkOrigin, Session, mark_sent
from ._records import EventRecord, SessionRecord
from ._tracking import mark_loaded

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["Restorable", "check_restorable", "create", "restore"]


@dataclass(frozen=True, slots=True)
class Restorable:
    """A session checked and encoded for `SessionManager.restore` (``expires_at`` unset)."""

    record: SessionRecord
    events: list[EventRecord]


def check_restorable(session: object) -> Restorable:
    """Everything `SessionManager.restore` checks before any I/O; raises what it would.

    For callers that must know a whole batch is valid before writing any of it.
    """
    if not isinstance(session, Session):
        raise InvalidInputError(f"restore() takes a Session, not {type(session).__name__}")
    session_id = validate_id(session.session_id)
    user_id = optional_id(session.user_id, "user_id")
    if session.is_partial:
        raise PartialSessionError(
            f"session {session_id!r} was loaded with last_events: it holds only its "
            "newest events; load it whole to restore it"
        )
    state = session.state
    if type(state) is not dict:
        raise InvalidInputError(f"state must be a dict, not {type(state).__name__}")
    _json.check_json(state, "state")
    version = session.version
    if type(version) is not int or version < 1:
        raise InvalidInputError(
            f"session {session_id!r}: version must be an int >= 1 (the version of a "
            f"stored session), not {version!r}"
        )
    created_at = aware("created_at", session.created_at)
    updated_at = aware("updated_at", session.updated_at)
    events = list(session.events)
    encoded = encode_events(events, 0, 0, set())
    mark_sent(events)
    return Restorable(
        SessionRecord(
            session_id=session_id,
            user_id=user_id,
            state=_json.dumps(state),
            version=version,
            created_at=created_at,
            updated_at=updated_at,
            expires_at=None,
            event_count=len(encoded),
            forked_from=_fork_origin(session.forked_from),
        ),
        encoded,
    )


def _fork_origin(value: object) -> ForkOrigin | None:
    """A restored session's ``forked_from``, checked (it is stored as given)."""
    if value is None:
        return None
    if not isinstance(value, ForkOrigin):
        raise InvalidInputError(f"forked_from must be a ForkOrigin or None, not {value!r}")
    validate_id(value.session_id, "forked_from.session_id")
    optional_id(value.event_id, "forked_from.event_id")
    if type(value.version) is not int or value.version < 1:
        raise InvalidInputError(f"forked_from.version must be an int >= 1, not {value.version!r}")
    return value


async def create(
    manager: SessionManager, session_id: str, user_id: str | None, state_json: str
) -> Session:
    """`SessionManager.create` once its input is checked, inside its deadline."""
    await manager._ready()
    now = manager.clock.now()
    record = SessionRecord(
        session_id=session_id,
        user_id=user_id,
        state=manager._codec.seal_state(session_id, state_json),
        version=1,
        created_at=now,
        updated_at=now,
        expires_at=manager._expiry(now),
        event_count=0,
        lineage=new_lineage(),
    )
    await manager._create(record, now)
    session = Session.model_construct(
        session_id=session_id,
        user_id=user_id,
        events=[],
        state=_json.loads(state_json),
        created_at=now,
        updated_at=now,
        version=1,
    )
    mark_loaded(session, lineage=record.lineage)
    return session


async def restore(manager: SessionManager, session: Session) -> Session:
    """`SessionManager.restore`: check, encode and seal before any I/O, then one insert."""
    checked = check_restorable(session)
    session_id = checked.record.session_id
    codec = manager._codec
    check_event_sizes(checked.events, 0, manager.capabilities.max_event_bytes)
    events = codec.seal_events(session_id, list(session.events), 0, checked.events)
    state_json = codec.seal_state(session_id, checked.record.state)
    async with _deadline.call(manager, "restore"):
        await manager._ready()
        now = manager.clock.now()
        record = replace(
            checked.record,
            state=state_json,
            expires_at=manager._expiry(now),
            lineage=new_lineage(),
        )
        await manager._restore(record, events, now)
    restored = Session.model_construct(
        session_id=record.session_id,
        user_id=record.user_id,
        events=list(session.events),
        state=_json.loads(checked.record.state),
        created_at=record.created_at,
        updated_at=record.updated_at,
        version=record.version,
        forked_from=record.forked_from,
    )
    mark_loaded(restored, lineage=record.lineage)
    return restored
