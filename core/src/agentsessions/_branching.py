"""Fork and rewind: the checks, requests and encrypted path behind `SessionManager.fork`,
`SessionManager.rewind` and ``list_sessions(forked_from=...)``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ._errors import (
    InvalidInputError,
    OperationNotSupportedError,
    SessionNotFoundError,
    SessionOwnershipError,
)
from ._ids import new_lineage, new_token
from ._input import encode_state
from ._models import ForkOrigin, Session
from ._records import ForkRequest, RewindRequest, SessionRecord, encode_event
from ._saving import tracking_of
from ._tracking import LoadedState, appended_in_flight, mark_loaded

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = [
    "ForkSpec",
    "RewindPlan",
    "check_fork",
    "check_rewind",
    "fork",
    "fork_by_copy",
    "require_branching",
    "rewound",
]


def require_branching(manager: SessionManager, operation: str) -> None:
    """`OperationNotSupportedError` unless the backend declares ``capabilities.branching``."""
    if not manager.capabilities.branching:
        raise OperationNotSupportedError(type(manager).__name__, operation, "branching")


@dataclass(frozen=True, slots=True)
class ForkSpec:
    """A fork's arguments, checked: what `fork` turns into a request once it knows "now"."""

    source_id: str
    session_id: str
    through_event_id: str | None
    user_id: str | None
    #: The state given, as JSON text (unsealed), or None to keep the source's.
    state: str | None


def check_fork(
    manager: SessionManager,
    source_id: str,
    session_id: str,
    through_event_id: str | None,
    user_id: str | None,
    state: object,
) -> ForkSpec:
    """What `SessionManager.fork` checks before any I/O once its ids are validated;
    raises what it would."""
    if session_id == source_id:
        raise InvalidInputError(f"a fork needs a new id, not the source's own ({source_id!r})")
    state_json = (
        None if state is None else encode_state(state, manager.capabilities.max_state_bytes)
    )
    require_branching(manager, "fork")
    return ForkSpec(source_id, session_id, through_event_id, user_id, state_json)


async def fork(
    manager: SessionManager, spec: ForkSpec, now: datetime, lineage: str
) -> SessionRecord:
    """Run a checked fork: the backend's `_fork`, or, when encrypting, `fork_by_copy`.

    Ciphertexts are bound to their session (the key is derived per session id), so an
    encrypted fork cannot copy them inside the engine: it reads the source once,
    decrypts, seals under the new id and stores the whole fork with one `_restore`.
    """
    request = ForkRequest(
        source_id=spec.source_id,
        session_id=spec.session_id,
        through_event_id=spec.through_event_id,
        state=spec.state,
        user_id=spec.user_id,
        created_at=now,
        expires_at=manager._expiry(now),
        lineage=lineage,
    )
    if manager._codec.portable:
        return await manager._fork(request, now)
    return await fork_by_copy(manager, request, now)


async def fork_by_copy(
    manager: SessionManager, request: ForkRequest, now: datetime
) -> SessionRecord:
    """A fork made of the mandatory hooks: one `_load` of the source, one `_restore`.

    For a backend whose engine cannot copy between the two sessions (keys in two Redis
    Cluster slots) and for encrypted managers. The events travel through the client,
    but the fork is still one consistent snapshot (the load's) stored whole or not at
    all, and it never overwrites. With encryption the events and the state are opened
    as the source's and sealed again as the fork's (``request.state`` is then plain
    JSON text).
    """
    source_id, new_id = request.source_id, request.session_id
    loaded = await manager._load(source_id, None, now)
    if loaded is None:
        raise SessionNotFoundError(source_id)
    source = loaded.record
    if request.user_id is not None and source.user_id != request.user_id:
        raise SessionOwnershipError(source_id, request.user_id)
    events, _ = manager._codec.open_events(source_id, loaded.events, 0)
    count = len(events)
    if request.through_event_id is not None:
        count = 1 + _index_of(events, request.through_event_id, source_id)
    kept = list(events[:count])
    plain = [encode_event(event, index, f"events[{index}]") for index, event in enumerate(kept)]
    stored = manager._codec.seal_events(new_id, kept, 0, plain)
    state = request.state
    if state is None:
        state = manager._codec.open_state(source_id, source.state)
    record = SessionRecord(
        session_id=new_id,
        user_id=source.user_id,
        state=manager._codec.seal_state(new_id, state),
        version=1,
        created_at=request.created_at,
        updated_at=request.created_at,
        expires_at=request.expires_at,
        event_count=count,
        lineage=request.lineage,
        forked_from=ForkOrigin(
            session_id=source_id, version=source.version, event_id=request.through_event_id
        ),
    )
    await manager._restore(record, stored, now)
    return record


def _index_of(events: Any, event_id: str, session_id: str) -> int:
    for index, event in enumerate(events):
        if event.id == event_id:
            return index
    raise InvalidInputError(f"session {session_id!r} holds no event with id {event_id!r}")


@dataclass(frozen=True, slots=True)
class RewindPlan:
    """A rewind's arguments, checked against the session's tracking."""

    session: Session
    loaded: LoadedState
    #: How many of the loaded events stay.
    kept_in_window: int
    archive: bool

    @property
    def keep(self) -> int:
        """How many events of the whole history stay."""
        return self.loaded.offset + self.kept_in_window

    def request(
        self, now: datetime, expires_at: datetime | None, token: str, lineage: str
    ) -> RewindRequest:
        loaded = self.loaded
        return RewindRequest(
            session_id=self.session.session_id,
            expected_version=loaded.version,
            version=loaded.version + 1,
            updated_at=now,
            expires_at=expires_at,
            stored_event_count=loaded.offset + len(loaded.events),
            keep=self.keep,
            archive=self.archive,
            token=token,
            lineage=lineage,
            expected_lineage=loaded.lineage,
        )


def check_rewind(
    manager: SessionManager, session: Session, through: str, archive: object
) -> RewindPlan:
    """What `SessionManager.rewind` checks before any I/O once its ids are validated;
    raises what it would."""
    session_id = session.session_id
    if type(archive) is not bool:
        raise InvalidInputError(f"archive must be a bool, not {archive!r}")
    require_branching(manager, "rewind")
    loaded = tracking_of(session)
    if loaded is None:
        raise InvalidInputError(
            f"session {session_id!r} was not loaded by a manager: rewind() needs the "
            "version and position of its events; get() it first"
        )
    window = session.events
    if (
        not isinstance(window, list)
        or loaded.unchanged_prefix(window) != len(loaded.events)
        or len(window) != len(loaded.events)
    ):
        raise InvalidInputError(
            f"session {session_id!r} has unsaved changes to its events: save() it before rewinding"
        )
    cut = next((i for i, event in enumerate(loaded.events) if event.id == through), None)
    if cut is None:
        where = "the events loaded" if loaded.partial else "the session"
        raise InvalidInputError(
            f"session {session_id!r}: no event with id {through!r} in {where} "
            "(load it with enough last_events to include the cut)"
        )
    return RewindPlan(session, loaded, cut + 1, archive)


def rewound(plan: RewindPlan, request: RewindRequest) -> None:
    """Bring the caller's session in step with a rewind that landed."""
    loaded, session = plan.loaded, plan.session
    shift = loaded.shift
    late = appended_in_flight(session, loaded)
    session.events = list(loaded.events[: plan.kept_in_window])
    session.version = request.version
    session.updated_at = request.updated_at
    mark_loaded(session, offset=loaded.offset, partial=loaded.partial, lineage=request.lineage)
    if session._loaded is not None:
        session._loaded.shift = shift
    session.events.extend(late)


async def rewind(manager: SessionManager, plan: RewindPlan) -> None:
    """Run a checked rewind through the backend's `_rewind`, then bring the caller's
    session in step with it."""
    now = manager.clock.now()
    request = plan.request(now, manager._expiry(now), new_token(), new_lineage())
    await manager._rewind(request, now)
    rewound(plan, request)
