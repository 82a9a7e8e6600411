"""The save planner: what a save changed since the load, its `SaveRequest`, and its retries.

It reads the tracking a load left on the session (`agentsessions._tracking`): the
events loaded, where they sit in the history, the version and lineage they were read
at, and the request of a save that failed ambiguously, which a retry re-sends whole.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from ._building import stamp_saved
from ._errors import (
    BackendLockedError,
    BackendReadOnlyError,
    BackendUnavailableError,
    InvalidInputError,
    PartialSessionError,
    SessionConflictError,
    SessionError,
    SessionNotFoundError,
)
from ._ids import new_lineage, new_token
from ._input import NO_IDS, check_event_sizes, encode_events
from ._models import Event, Session, all_unsent, mark_sent
from ._records import SaveRequest, SessionRecord
from ._retry import backoff
from ._tracking import LoadedState

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["adopt", "save_tracked", "save_until_answered", "tracking_of"]


def tracking_of(session: Session) -> LoadedState | None:
    """*session*'s own tracking, or None when it was built by hand.

    The tracking is tied to the id the session was loaded as and to the object
    loaded: a copy (``model_copy``, ``copy.deepcopy``) gets its own from the
    version it was copied at, so one object's saves never move another's baseline.
    """
    # Read from pydantic's private storage directly: ``session._loaded`` goes
    # through BaseModel.__getattr__, a Python call on every save.
    private = session.__pydantic_private__
    loaded: LoadedState | None = None if private is None else private.get("_loaded")
    if loaded is None:
        return None
    if loaded.session_id != session.session_id:
        raise InvalidInputError(
            f"session was loaded as {loaded.session_id!r} and cannot be saved as "
            f"{session.session_id!r}: a session's id is fixed at load; create the "
            "other session with manager.create() and copy events and state into it"
        )
    if loaded.owned_by(session):
        return loaded
    if session.version != loaded.version:
        # Copied before the original's last save: the copy is a stale one.
        raise SessionConflictError(session.session_id, session.version)
    session._loaded = fork = loaded.fork(session)
    return fork


async def adopt(manager: SessionManager, session: Session) -> LoadedState:
    """A Session built by hand: save it as a full rewrite of the stored one."""
    stored = await manager._load(session.session_id, 0, manager.clock.now())
    if stored is None:
        raise SessionNotFoundError(session.session_id)
    if stored.record.version != session.version:
        raise SessionConflictError(session.session_id, session.version)
    if stored.record.user_id != session.user_id:
        raise InvalidInputError(
            f"session {session.session_id!r}: user_id cannot be changed by a save"
        )
    # Stand-in events: nothing in the new list is identical to them, so all is rewritten.
    placeholder = Event(author="-")
    return LoadedState(
        version=stored.record.version,
        events=[placeholder] * stored.record.event_count,
        offset=0,
        partial=False,
        tracked=None,
        session_id=session.session_id,
        owner=weakref.ref(session),
        lineage="",
    )


async def save_tracked(
    manager: SessionManager, session: Session, state_json: str, loaded: LoadedState | None
) -> None:
    """`SessionManager.save` once its input is checked, inside its deadline."""
    await manager._ready()
    if loaded is None:
        loaded = await adopt(manager, session)
        session._loaded = loaded
    events = session.events
    base = loaded.events
    keep_in_window = loaded.unchanged_prefix(events)
    removed = len(base) - keep_in_window
    added = events[keep_in_window:]
    if loaded.partial and removed and added:
        raise PartialSessionError(
            f"session {session.session_id!r} was loaded with last_events, so a save may "
            f"append events or remove events from the end, not both ({removed} loaded "
            "events were replaced); load it without last_events to rewrite its history"
        )
    keep = loaded.offset + keep_in_window
    # Ids are checked against the loaded events (a partial load sees only its
    # window); the set is kept on the load so repeated appends stay O(new events).
    # Events add_event just made carry fresh random ids: nothing to check them against.
    known = NO_IDS if all_unsent(added) else loaded.ids_of_prefix(keep_in_window)
    new_events = encode_events(events, keep_in_window, keep, known)
    mark_sent(added)
    now = manager.clock.now()
    new_version = loaded.version + 1
    stored_count = loaded.offset + len(base)
    record = SessionRecord(
        session_id=session.session_id,
        user_id=session.user_id,
        state=state_json,
        version=new_version,
        created_at=session.created_at,
        updated_at=now,
        expires_at=manager._expiry(now),
        event_count=keep + len(new_events),
        # Kept only while the stored events stay a prefix of the new history.
        lineage=loaded.lineage if keep == stored_count else new_lineage(),
    )
    request = SaveRequest(
        record=record,
        expected_version=loaded.version,
        stored_event_count=stored_count,
        keep=keep,
        new_events=new_events,
        token=new_token(),
        expected_lineage=loaded.lineage,
    )
    pending = loaded.pending
    if pending is not None and pending.same_change(request) and loaded.sent is not None:
        # A retry of a save that failed ambiguously: the very same request, token,
        # timestamps and ciphertexts included, so a copy that landed is recognised.
        # (Compared before sealing, whose random nonces differ on every call.)
        request = pending
        now = request.record.updated_at
        sent = loaded.sent
    else:
        codec = manager._codec
        shift = codec.kept_shift(loaded.shift, keep)
        if shift is None:  # sealed events this copy did not load: their last one tells
            shift = loaded.shift = await codec.stored_shift(manager, session.session_id)
        check_event_sizes(new_events, keep_in_window, manager.capabilities.max_event_bytes)
        sent = codec.seal_save(request, events, keep_in_window, shift)
    loaded.pending = request
    loaded.sent = sent
    # What is sent is the caller's new baseline now: anything changed in the list while
    # the save is in flight (another task appending to this Session) stays a change.
    before = loaded.baseline(events)
    try:
        await manager._save(sent, now)
    except BaseException as exc:
        loaded.restore_baseline(events, before)
        if isinstance(exc, SessionError) and not isinstance(exc, BackendUnavailableError):
            loaded.pending = loaded.sent = None  # a definite answer: it did not land
        raise
    loaded.pending = loaded.sent = None
    if not keep:
        loaded.shift = 0
    stamp_saved(session, new_version, now)
    loaded.saved(session, new_version, keep_in_window, request.record.lineage, added)


async def save_until_answered(manager: SessionManager, session: Session) -> None:
    """Save; re-send while the outcome is unknown (bounded by the call's deadline)."""
    attempt = 0
    while True:
        try:
            await manager.save(session)
            return
        except (BackendReadOnlyError, BackendLockedError):
            raise  # refused, so not stored: no outcome to wait for
        except BackendUnavailableError:
            attempt += 1
            await backoff(attempt, cap=0.5)
