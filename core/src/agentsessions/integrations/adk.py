"""A Google ADK session service stored in any agentsessions backend.

::

    from agentsessions import connect
    from agentsessions.integrations.adk import AgentSessionsSessionService

    session_service = AgentSessionsSessionService(connect("redis://cache:6379/0"))
    runner = Runner(app_name="support", agent=agent, session_service=session_service)

How ADK's identities map onto ours
----------------------------------
ADK names a session by the triple (app_name, user_id, session_id), and the same
session_id may exist for two users or two applications. Each part is escaped
(``%`` -> ``%25``, ``/`` -> ``%2F``, ``~`` -> ``%7E``, NUL -> ``%00``) and the parts are
joined with ``/``, which makes every encoding unambiguous and keeps ids readable:

=========================  ==============================  ==================
what                       our session_id                  our user_id
=========================  ==============================  ==================
an ADK session             ``adk/s/{app}/{user}/{session}``  ``adk/{app}/{user}``
``user:`` state            ``adk/u/{app}/{user}``            ``adk/{app}/{user}``
``app:`` state             ``adk/a/{app}``                   none
=========================  ==============================  ==================

so `SessionManager.delete_user` of ``adk/{app}/{user}`` erases that user's sessions
and user state together. Core ids are at most 255 characters: a part whose escaped
form is longer than its budget (64 for app and user, 119 for the session id) is
replaced by ``~`` and the first 40 hex digits of its SHA-256 (``~`` never appears in an
escaped part, so a hashed part cannot equal a plain one). Every stored session also
records its ADK identity in its state, which is checked on every read: a hash
collision would read as "absent", never as another user's data.

What is stored
--------------
Our session's state is ``{"adk": <identity>, "state": <session-scoped state>,
"last_update_time": <the newest event's timestamp, or the creation time>}`` (ADK's
``last_update_time`` is the event's time in all of ADK's services, not the time of our
save, and the stale-session check compares it); each ADK event is one `Event` (same
id and author, ``content`` = the event as ADK's database service stores it,
``model_dump(mode="json", exclude_none=True)``).
``app:`` and ``user:`` keys live in the reserved sessions above, are merged into
every session read, and ``temp:`` keys are never stored, exactly as in ADK's own
services. State values are converted to JSON as ADK's database services convert
them (``to_jsonable_python``); a value with no JSON form raises
`SessionSerializationError` instead of being stored as its ``repr``.

Concurrency
-----------
A session returned by this service carries its stored version as ADK's storage
revision marker; `append_event` from a copy whose version is no longer the stored
one raises ADK's ``StaleSessionError`` (a copy without a marker is checked by its
``last_update_time``, like ADK's ``DatabaseSessionService``). The event and the
session-scoped state delta are saved in one atomic save; ``app:`` and ``user:``
deltas are then merged into their shared sessions, each atomically and retried on
conflict, so concurrent sessions never lose each other's keys. Those are separate
saves: if the process dies between them the event is stored (its ``state_delta``
still records the change) but the shared state misses it.

With a ``ttl`` on the manager, the reserved ``app:``/``user:`` sessions expire like
any other session when they are not written for ``ttl`` seconds.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
import weakref
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import (
    SessionNotFoundError as AdkSessionNotFoundError,
)
from google.adk.events.event import Event as AdkEvent
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session as AdkSession
from google.adk.sessions.state import State
from pydantic_core import PydanticSerializationError, to_jsonable_python
from typing_extensions import override

from .._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionSerializationError,
)
from .._loops import LoopLock
from .._manager import SessionManager
from .._models import Event, Session
from .._tracking import event_contents, newest_event_id
from ._held import HeldFor
from ._shared import finish_despite_cancellation

__all__ = ["AgentSessionsSessionService"]

T = TypeVar("T")

_STALE_MESSAGE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)
_APP_BUDGET = 64
_USER_BUDGET = 64
_SESSION_BUDGET = 119  # len("adk/s/") + 64 + 1 + 64 + 1 + 119 == 255
_HASH_DIGITS = 40
_LIST_PAGE = 1000
_LIST_CONCURRENCY = 16
_EVENT_AUTHOR_FALLBACK = "adk"


def _part(value: str, budget: int) -> str:
    escaped = (
        value.replace("%", "%25").replace("/", "%2F").replace("~", "%7E").replace("\x00", "%00")
    )
    if len(escaped) <= budget:
        return escaped
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()
    return "~" + digest[:_HASH_DIGITS]


@dataclass(frozen=True)
class _Keys:
    """Our ids for one ADK (app_name, user_id), and the identities stored with them."""

    app_name: str
    user_id: str

    @property
    def app(self) -> str:
        return _part(self.app_name, _APP_BUDGET)

    @property
    def user(self) -> str:
        return _part(self.user_id, _USER_BUDGET)

    @property
    def owner(self) -> str:
        return f"adk/{self.app}/{self.user}"

    @property
    def user_state(self) -> str:
        return f"adk/u/{self.app}/{self.user}"

    @property
    def app_state(self) -> str:
        return f"adk/a/{self.app}"

    def session(self, session_id: str) -> str:
        return f"adk/s/{self.app}/{self.user}/{_part(session_id, _SESSION_BUDGET)}"

    def session_identity(self, session_id: str) -> dict[str, str]:
        return {"app_name": self.app_name, "user_id": self.user_id, "session_id": session_id}

    @property
    def user_identity(self) -> dict[str, str]:
        return {"app_name": self.app_name, "user_id": self.user_id}

    @property
    def app_identity(self) -> dict[str, str]:
        return {"app_name": self.app_name}


def _check_names(app_name: object, user_id: object) -> None:
    for what, value in (("app_name", app_name), ("user_id", user_id)):
        if not isinstance(value, str):
            raise InvalidInputError(f"{what} must be a str, not {type(value).__name__}")


def _split_state(state: dict[str, Any], path: str) -> dict[str, dict[str, Any]]:
    """ADK's three stored scopes of a state (delta), prefixes removed, ``temp:`` dropped,
    values in the JSON form ADK's database services give them."""
    scopes: dict[str, dict[str, Any]] = {"app": {}, "user": {}, "session": {}}
    for key, value in state.items():
        if not isinstance(key, str):
            raise SessionSerializationError(f"{path}[{key!r}]", "state keys must be str")
        if key.startswith(State.TEMP_PREFIX):
            continue
        if key.startswith(State.APP_PREFIX):
            scope, name = "app", key.removeprefix(State.APP_PREFIX)
        elif key.startswith(State.USER_PREFIX):
            scope, name = "user", key.removeprefix(State.USER_PREFIX)
        else:
            scope, name = "session", key
        try:
            scopes[scope][name] = to_jsonable_python(value)
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            raise SessionSerializationError(f"{path}[{key!r}]", str(exc)) from None
    return scopes


def _merged_state(
    app_state: dict[str, Any], user_state: dict[str, Any], session_state: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(session_state)
    for key, value in app_state.items():
        merged[State.APP_PREFIX + key] = value
    for key, value in user_state.items():
        merged[State.USER_PREFIX + key] = value
    return merged


def _scope_of(stored: Session | None, identity: dict[str, str]) -> dict[str, Any] | None:
    """The ADK state kept in *stored*, or None if it is absent or not the one asked for."""
    if stored is None or stored.state.get("adk") != identity:
        return None
    scope = stored.state.get("state")
    return scope if isinstance(scope, dict) else {}


def _to_event(event: AdkEvent) -> Event:
    event_id = event.id if 0 < len(event.id) <= 255 else None
    author = event.author if 0 < len(event.author) <= 255 else _EVENT_AUTHOR_FALLBACK
    fields: dict[str, Any] = {
        "author": author,
        "content": event.model_dump(mode="json", exclude_none=True),
        "timestamp": datetime.fromtimestamp(event.timestamp, timezone.utc),
    }
    if event_id is not None:
        fields["id"] = event_id
    return Event(**fields)


def _marker(stored: Session) -> str:
    return str(stored.version)


def _last_update(stored: Session) -> float:
    """ADK's ``last_update_time``: when the newest event was appended (the event's own
    timestamp, as all of ADK's services report it), or when the session was created."""
    value = stored.state.get("last_update_time")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return stored.updated_at.timestamp()  # stored before the time was kept


def _clean_id(session_id: str) -> str:
    """As ADK's services: surrounding whitespace is not part of a session id."""
    return session_id.strip() if isinstance(session_id, str) else session_id


#: How often `AgentSessionsSessionService.fork_session` forks again when a save of the
#: source lands between its state read and the fork.
_FORK_ATTEMPTS = 8


class AgentSessionsSessionService(BaseSessionService):
    """An ADK `BaseSessionService` over any `SessionManager` (see the module docstring).

    The manager is not opened or closed here: the application owns it, and may share
    it with other code (one connection pool). `close` is a no-op for that reason.
    """

    def __init__(self, manager: SessionManager) -> None:
        if not isinstance(manager, SessionManager):
            raise InvalidInputError(
                f"manager must be a SessionManager, not {type(manager).__name__}"
            )
        self.manager = manager
        # One lock per session key serializes appends from tasks of this process that
        # share one Session object (parallel agents), as ADK's DatabaseSessionService
        # does; without it the second would see its own first append as "stale".
        # LoopLocks, because one service may serve several event loops (threads).
        self._locks: weakref.WeakValueDictionary[str, LoopLock] = weakref.WeakValueDictionary()
        self._locks_mutex = threading.Lock()
        # The stored copy (ours, tracked) behind each ADK session this service returned or
        # appended to, keyed by the ADK object's id and dropped with it: an append to a
        # session still at that copy's version saves the copy without loading it again.
        self._copies: HeldFor[AdkSession, Session] = HeldFor()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} on {self.manager!r}>"

    async def close(self) -> None:
        """Nothing to release: the manager belongs to the caller."""

    # -- sessions ---------------------------------------------------------------------

    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> AdkSession:
        _check_names(app_name, user_id)
        keys = _Keys(app_name, user_id)
        session_id = (session_id and _clean_id(session_id)) or str(uuid.uuid4())
        scopes = _split_state(state or {}, "state")
        try:
            stored = await self.manager.create(
                keys.session(session_id),
                keys.owner,
                state={
                    "adk": keys.session_identity(session_id),
                    "state": scopes["session"],
                    "last_update_time": time.time(),
                },
            )
        except SessionExistsError:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from None
        if scopes["app"]:
            app_state = await self._merge_scope(
                keys.app_state, None, keys.app_identity, scopes["app"]
            )
        else:
            app_state = await self._read_scope(keys.app_state, keys.app_identity)
        if scopes["user"]:
            user_state = await self._merge_scope(
                keys.user_state, keys.owner, keys.user_identity, scopes["user"]
            )
        else:
            user_state = await self._read_scope(keys.user_state, keys.user_identity)
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged_state(app_state, user_state, scopes["session"]),
            events=[],
            last_update_time=_last_update(stored),
        )
        session._storage_update_marker = _marker(stored)
        self._copies.put(session, stored)
        return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> AdkSession | None:
        _check_names(app_name, user_id)
        session_id = _clean_id(session_id)
        keys = _Keys(app_name, user_id)
        last_events = None if config is None else config.num_recent_events
        stored, app_state, user_state = await self._read_all(
            self.manager.get(keys.session(session_id), last_events=last_events),
            self._read_scope(keys.app_state, keys.app_identity),
            self._read_scope(keys.user_state, keys.user_identity),
        )
        session_state = _scope_of(stored, keys.session_identity(session_id))
        if stored is None or session_state is None:
            return None
        # From the stored contents, without building our Event objects on the way.
        events = [AdkEvent.model_validate(content) for content in event_contents(stored.events)]
        if config is not None and config.after_timestamp is not None:
            # As ADK's InMemorySessionService: keep the newest events from the last
            # one older than the cut-off on.
            index = len(events) - 1
            while index >= 0 and events[index].timestamp >= config.after_timestamp:
                index -= 1
            events = events[index + 1 :]
        session = AdkSession(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=_merged_state(app_state, user_state, session_state),
            events=events,
            last_update_time=_last_update(stored),
        )
        session._storage_update_marker = _marker(stored)
        if stored.events or last_events is None:
            # A copy that holds the newest stored event (or all of none): it can tell
            # a re-delivered event, as the load of one event in `_store_event` does.
            self._copies.put(session, stored)
        return session

    async def fork_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        new_session_id: str | None = None,
        through_event_id: str | None = None,
    ) -> AdkSession:
        """A new session of the same app and user holding *session_id*'s events up to and
        including the one with id *through_event_id* (None: all of them) and its
        session-scoped state as it is now (state keeps no history), made by
        `SessionManager.fork` (the engine copies the
        events); the source is unchanged. ADK's ``AlreadyExistsError`` if
        *new_session_id* is taken, its ``SessionNotFoundError`` if the source is absent.
        """
        _check_names(app_name, user_id)
        keys = _Keys(app_name, user_id)
        session_id = _clean_id(session_id)
        new_id = (new_session_id and _clean_id(new_session_id)) or str(uuid.uuid4())
        source_key, new_key = keys.session(session_id), keys.session(new_id)
        for _ in range(_FORK_ATTEMPTS):
            # The fork's state names its own identity, so it is given, not copied; the
            # fork must then be of the version that state was read at.
            source = await self.manager.get(source_key, last_events=0)
            if source is None or _scope_of(source, keys.session_identity(session_id)) is None:
                raise AdkSessionNotFoundError(f"Session {session_id} not found.")
            state = {**source.state, "adk": keys.session_identity(new_id)}
            try:
                summary = await self.manager.fork(
                    source_key,
                    new_key,
                    through_event_id=through_event_id,
                    user_id=keys.owner,
                    state=state,
                )
            except SessionExistsError:
                raise AlreadyExistsError(f"Session with id {new_id} already exists.") from None
            except SessionNotFoundError:
                raise AdkSessionNotFoundError(f"Session {session_id} not found.") from None
            if summary.forked_from is not None and summary.forked_from.version == source.version:
                break
            await self.manager.delete(new_key)  # a save landed in between: fork again
        else:
            raise SessionConflictError(source_key, 0, "the session kept changing while forked")
        forked = await self.get_session(app_name=app_name, user_id=user_id, session_id=new_id)
        assert forked is not None  # just created; only a concurrent delete removes it
        return forked

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Sessions without events, oldest update first, as ADK's services list them.

        With *user_id* this reads that user's sessions only; without it, it pages
        through every session of the manager's namespace to find the application's
        (give each large application its own ``namespace`` to keep that cheap).
        """
        _check_names(app_name, "" if user_id is None else user_id)
        app_prefix = f"adk/s/{_part(app_name, _APP_BUDGET)}/"
        owner = None if user_id is None else _Keys(app_name, user_id).owner
        session_keys: list[str] = []
        cursor: str | None = None
        while True:
            page = await self.manager.list_sessions(user_id=owner, limit=_LIST_PAGE, cursor=cursor)
            session_keys += [
                summary.session_id
                for summary in page.items
                if summary.session_id.startswith(app_prefix)
            ]
            cursor = page.next_cursor
            if cursor is None:
                break
        loaded = await self._gather([self.manager.get(key, last_events=0) for key in session_keys])
        found: list[tuple[Session, dict[str, str], dict[str, Any]]] = []
        for stored in loaded:
            identity = stored.state.get("adk") if stored is not None else None
            if (
                stored is None
                or not isinstance(identity, dict)
                or identity.get("app_name") != app_name
                or (user_id is not None and identity.get("user_id") != user_id)
                or not isinstance(identity.get("user_id"), str)
                or not isinstance(identity.get("session_id"), str)
            ):
                continue  # deleted meanwhile, or not this application's
            scope = _scope_of(stored, identity)
            if scope is not None:
                found.append((stored, identity, scope))
        users = sorted({identity["user_id"] for _, identity, _ in found})
        app_keys = _Keys(app_name, "")
        app_state, *user_states = await self._gather(
            [
                self._read_scope(app_keys.app_state, app_keys.app_identity),
                *(
                    self._read_scope(
                        _Keys(app_name, user).user_state, _Keys(app_name, user).user_identity
                    )
                    for user in users
                ),
            ]
        )
        state_of_user = dict(zip(users, user_states, strict=True))
        sessions = []
        for stored, identity, scope in found:
            session = AdkSession(
                id=identity["session_id"],
                app_name=app_name,
                user_id=identity["user_id"],
                state=_merged_state(app_state, state_of_user[identity["user_id"]], scope),
                events=[],
                last_update_time=_last_update(stored),
            )
            session._storage_update_marker = _marker(stored)
            sessions.append(session)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        _check_names(app_name, user_id)
        session_id = _clean_id(session_id)
        await self.manager.delete(_Keys(app_name, user_id).session(session_id))

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        _check_names(app_name, user_id)
        keys = _Keys(app_name, user_id)
        return await self._read_scope(keys.user_state, keys.user_identity)

    # -- events -----------------------------------------------------------------------

    @override
    async def append_event(self, session: AdkSession, event: AdkEvent) -> AdkEvent:
        if event.partial:
            return event
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        # Checked first, so that a refused delta leaves the live session untouched.
        scopes = _split_state(delta, "event.actions.state_delta")
        # As ADK's services: temp: values reach the in-memory session (later agents of
        # this invocation read them) but are cut from the delta before anything is stored.
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        keys = _Keys(session.app_name, session.user_id)
        key = keys.session(session.id)
        async with self._lock(key):
            # Shielded together with the update of the live session, so that a
            # cancelled append still leaves the session object matching storage.
            return await finish_despite_cancellation(self._append(session, event, scopes, keys))

    async def _append(
        self,
        session: AdkSession,
        event: AdkEvent,
        scopes: dict[str, dict[str, Any]],
        keys: _Keys,
    ) -> AdkEvent:
        stored = await self._store_event(session, event, scopes, keys)
        if stored is None:
            return event  # the same event again: already stored, nothing to apply
        session._storage_update_marker = _marker(stored)
        session.last_update_time = _last_update(stored)
        return self._commit_event_to_session(session, event)

    async def _store_event(
        self,
        session: AdkSession,
        event: AdkEvent,
        scopes: dict[str, dict[str, Any]],
        keys: _Keys,
    ) -> Session | None:
        record = _to_event(event)
        held = self._copies.get(session)
        if held is not None and (
            session._storage_update_marker == _marker(held)
            and newest_event_id(held.events) != record.id
            and _scope_of(held, keys.session_identity(session.id)) is not None
        ):
            # The session is at the version of the copy held for it, so that copy is
            # what a load would return now unless a save landed since; the save's own
            # version check tells, and then the long way below decides (a stale
            # session, or an event already stored).
            self._copies.drop(session)  # changed below: never held half-saved
            try:
                return await self._save_event(session, held, record, event, scopes, keys)
            except SessionConflictError:
                pass
        # One event is loaded: enough to know the version and to recognise a
        # re-delivery of the newest event, without reading the history.
        stored = await self.manager.get(keys.session(session.id), last_events=1)
        if stored is None or _scope_of(stored, keys.session_identity(session.id)) is None:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.")
        newest = stored.events[-1] if stored.events else None
        if newest is not None and newest.id == record.id and newest.content == record.content:
            return None
        self._check_fresh(session, stored, newest)
        try:
            return await self._save_event(session, stored, record, event, scopes, keys)
        except SessionConflictError:
            raise StaleSessionError(_STALE_MESSAGE) from None

    async def _save_event(
        self,
        session: AdkSession,
        stored: Session,
        record: Event,
        event: AdkEvent,
        scopes: dict[str, dict[str, Any]],
        keys: _Keys,
    ) -> Session:
        """Append *record* to *stored* (current for *session*) and save it, then merge the
        ``app:`` and ``user:`` deltas; `SessionConflictError` if a save landed meanwhile."""
        stored.events.append(record)
        stored.state["last_update_time"] = event.timestamp
        if scopes["session"]:
            session_state = _scope_of(stored, keys.session_identity(session.id))
            stored.state["state"] = {**(session_state or {}), **scopes["session"]}
        try:
            await self.manager.save(stored)
        except SessionNotFoundError:
            raise AdkSessionNotFoundError(f"Session {session.id} not found.") from None
        self._copies.put(session, stored)
        if scopes["app"]:
            await self._merge_scope(keys.app_state, None, keys.app_identity, scopes["app"])
        if scopes["user"]:
            await self._merge_scope(keys.user_state, keys.owner, keys.user_identity, scopes["user"])
        return stored

    @staticmethod
    def _check_fresh(session: AdkSession, stored: Session, newest: Event | None) -> None:
        marker = session._storage_update_marker
        if marker is not None:
            if marker != _marker(stored):
                raise StaleSessionError(_STALE_MESSAGE)
            return
        # A copy without a marker (built by hand, or by another service): as ADK's
        # DatabaseSessionService, stale only if storage moved on past the events it holds.
        if _last_update(stored) <= session.last_update_time:
            return
        if session.events:
            if newest is not None and newest.id == session.events[-1].id:
                return
        elif newest is None:
            return
        raise StaleSessionError(_STALE_MESSAGE)

    # -- app: and user: state ---------------------------------------------------------

    async def _read_scope(self, key: str, identity: dict[str, str]) -> dict[str, Any]:
        scope = _scope_of(await self.manager.get(key, last_events=0), identity)
        return {} if scope is None else scope

    async def _merge_scope(
        self, key: str, owner: str | None, identity: dict[str, str], delta: dict[str, Any]
    ) -> dict[str, Any]:
        def merge(stored: Session) -> None:
            if stored.state.get("adk") != identity:
                # Created just now by update(create=True), or (a SHA-256 collision)
                # someone else's: never merge into another application's state.
                if stored.state:
                    raise InvalidInputError(
                        f"session {key!r} holds another ADK identity than {identity!r}"
                    )
                stored.state["adk"] = identity
            scope = stored.state.get("state")
            stored.state["state"] = {**(scope if isinstance(scope, dict) else {}), **delta}

        saved = await self.manager.update(key, merge, user_id=owner, create=True)
        return dict(saved.state["state"])

    async def _read_all(self, *reads: Coroutine[Any, Any, Any]) -> list[Any]:
        """*reads*' results: concurrently where each waits on I/O; one after another on
        an in-process store (``persistent=False``), where a task per read would cost
        more than the read itself."""
        if self.manager.capabilities.persistent:
            return list(await asyncio.gather(*reads))
        results: list[Any] = []
        try:
            for read in reads:
                results.append(await read)
        finally:
            for unstarted in reads[len(results) + 1 :]:
                unstarted.close()  # a read failed: the ones after it never run
        return results

    @staticmethod
    async def _gather(reads: list[Coroutine[Any, Any, T]]) -> list[T]:
        """Run *reads* concurrently, a bounded number at a time, so that listing many
        sessions neither runs them one by one nor floods the backend's pool."""
        limit = asyncio.Semaphore(_LIST_CONCURRENCY)

        async def bounded(read: Coroutine[Any, Any, T]) -> T:
            async with limit:
                return await read

        return list(await asyncio.gather(*(bounded(read) for read in reads)))

    def _lock(self, key: str) -> LoopLock:
        """The lock of session *key*, for ``async with``: the statement holds the lock
        object (and so keeps it in the weak table) until it is released."""
        with self._locks_mutex:
            lock = self._locks.get(key)
            if lock is None:
                lock = LoopLock()
                self._locks[key] = lock
        return lock
