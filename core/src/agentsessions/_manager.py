"""`SessionManager`: the public API every backend shares, a façade over one module per concern.

Its public methods validate their arguments, take the call's deadline and delegate:
writing whole sessions (`_restore`), reads (`_reading`), the save planner (`_saving`),
`update` (`_updating`, `_grouping`), compaction (`_compaction`) and rekeying
(`_rekey`), each going through the codec chosen for the manager (`_codec`). What a
backend implements and may use is declared in `_hooks` (`BackendHooks`); a new public
operation gets a module of its own and a thin method here, a new hook goes in `_hooks`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from . import (
    _branching,
    _codec,
    _compaction,
    _deadline,
    _diagnosis,
    _grouping,
    _instrumentation,
    _reading,
    _restore,
)
from ._errors import (
    BackendUnavailableError,
    InvalidInputError,
    InvalidOptionError,
    ManagerClosedError,
    SessionError,
    SessionExistsError,
    SessionOwnershipError,
)
from ._hooks import BackendHooks
from ._ids import MAX_ID_LENGTH, new_lineage, new_token, optional_id, validate_id
from ._input import MAX_LAST_EVENTS, MAX_PAGE_SIZE, check_last_events, check_size, encode_state
from ._loops import LoopLock
from ._models import Event, Session, SessionPage, SessionSummary
from ._options import (
    DEFAULT_TIMEOUT,
    MAX_POOL_SIZE,
    MAX_TIMEOUT,
    MAX_TTL,
    ManagerOptions,
    OptionConflict,
    PoolSize,
    SchemaTooNewError,
    Timeout,
    validate_options,
)
from ._records import decode_cursor, encode_cursor
from ._restore import Restorable, check_restorable
from ._retry import DEFAULT_UPDATE_RETRIES, backoff, backoff_delay
from ._saving import save_tracked, tracking_of
from ._updating import update_alone
from ._urls import split_url

if TYPE_CHECKING:
    from ._codec import Keyring

__all__ = [
    "DEFAULT_TIMEOUT",
    "DEFAULT_UPDATE_RETRIES",
    "MAX_ID_LENGTH",
    "MAX_LAST_EVENTS",
    "MAX_PAGE_SIZE",
    "MAX_POOL_SIZE",
    "MAX_TIMEOUT",
    "MAX_TTL",
    "ManagerOptions",
    "OptionConflict",
    "PoolSize",
    "Restorable",
    "SchemaTooNewError",
    "SessionManager",
    "Timeout",
    "backoff",
    "backoff_delay",
    "check_restorable",
    "check_size",
    "new_lineage",
    "new_token",
    "validate_id",
]

ManagerT = TypeVar("ManagerT", bound="SessionManager")


class SessionManager(BackendHooks):
    """Creates, fetches and saves sessions by id. Every method is a coroutine.

    Get one with `agentsessions.connect`; use it with ``async with`` or call
    `close` when done. A manager is safe to share between tasks, event loops and
    threads: a backend whose driver binds connections to an event loop keeps one set
    per loop (see `per_loop`), opened on that loop's first call and released when the
    loop shuts down.

    Every call ends within the ``timeout`` option (seconds, default 10), end to end:
    connecting, waiting for a pooled connection and retries included. Past it the call
    raises `BackendTimeoutError` (a `BackendUnavailableError`) naming the operation; its
    connection is discarded and the manager keeps working once the server is back.

    After an error a caller may assume:

    * input errors (`InvalidInputError`, `SessionSerializationError`,
      `PartialSessionError`): nothing reached the server;
    * `SessionExistsError`, `SessionNotFoundError`, `SessionOwnershipError`,
      `SessionConflictError`: a definite answer, nothing was written;
    * `BackendUnavailableError` / `BackendTimeoutError` (or a cancellation) from a
      read: nothing changed; from ``save``: the save may or may not have landed (whole,
      never half), and ``save(session)`` again with the session unchanged re-sends it
      with the same token, so it lands at most once; from ``update``: it has re-sent
      its save until its deadline, so *fn*'s change is stored once or not at all;
      from ``create`` or ``delete``: it may or may not have happened.
    """

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        """Set up a manager for *url*, without any I/O: connecting waits for first use.

        `from_url` (so `connect`) calls it with *url* stripped of the query parameters
        that are options (the driver's own, `driver_query_params`, stay, and so does
        the password) and *options* already validated as an `Options` instance. None: the
        defaults; another class's options are validated again against `Options`. A
        backend's ``__init__`` calls this first, then parses its URL (e.g. with
        `parse_server_url`) and checks what the options alone cannot, raising
        `InvalidOptionError`, and registers its `per_loop` resources: still no I/O.
        """
        self._url = url
        if options is None:
            options = self.Options()
        elif not isinstance(options, self.Options):
            options = self.parse_options(options.model_dump(exclude_unset=True))
        self.options = options
        self._open_lock = LoopLock()
        self._opened = False
        self._closed = False
        self._per_loop = None
        # update() calls in flight or waiting, per session (see `_grouping`).
        self._lanes: dict[Hashable, _grouping.Lane] = {}
        _instrumentation.track(self)

    # -- construction -----------------------------------------------------------------

    @classmethod
    def from_url(cls: type[ManagerT], url: str, **options: Any) -> ManagerT:
        """Build a manager from *url*; query parameters and keyword options are validated."""
        base, from_query = split_url(url, cls.driver_query_params)
        for name in from_query.keys() & options.keys():
            raise InvalidOptionError(f"option {name!r} is given both in the URL and as an argument")
        return cls(base, cls.parse_options({**from_query, **options}))

    @classmethod
    def parse_options(cls, raw: Mapping[str, Any]) -> ManagerOptions:
        """Validate *raw* against `Options`, with an error naming each bad option."""
        return validate_options(cls.Options, raw)

    def with_options(self: ManagerT, **changes: Any) -> ManagerT:
        """A new, unopened manager on the same URL with some options changed.

        ``manager.with_options(namespace="tenant_b")`` isolates another application;
        the conformance kit uses it to check namespaces, time to live and what a fresh
        connection really reads back.
        """
        merged = {**self.options.model_dump(exclude_unset=True), **changes}
        other = type(self)(self._url, self.parse_options(merged))
        other.clock = self.clock
        other._codec = _codec.select(other, self._codec.keyring)
        _instrumentation.inherit(self, other)
        return other

    @property
    def encryption(self) -> Keyring | None:
        """Encrypts event content and metadata and the state before the backend sees
        them, and decrypts after every read (`agentsessions.encryption`); None: stored
        as they are. Set by ``connect(url, encryption=...)`` (or assigned before use);
        `with_options` keeps it. While set, ``capabilities.max_event_bytes`` and
        ``max_state_bytes`` are those of the plaintext whose encrypted form fits."""
        return self._codec.keyring

    @encryption.setter
    def encryption(self, keyring: Keyring | None) -> None:
        self._codec = _codec.select(self, keyring)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- lifecycle ----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect now instead of on first use. Safe to call more than once, from any
        event loop: each loop that uses the manager gets its connections on first use."""
        if self._closed:
            raise ManagerClosedError(f"{self!r} is closed")
        async with _deadline.call(self, "open"):
            if not self._opened:
                async with self._open_lock:
                    if self._closed:
                        raise ManagerClosedError(f"{self!r} is closed")
                    if not self._opened:
                        try:
                            await self._open()
                            if self._per_loop is not None:
                                await self._per_loop.get()
                        except BaseException as exc:
                            error = exc if isinstance(exc, SessionError) else self._translate(exc)
                            if isinstance(error, BackendUnavailableError):
                                _instrumentation.connection_failed(self, error)
                            raise
                        self._opened = True
                        _instrumentation.connection_opened(self)
            if self._per_loop is not None:
                try:
                    await self._per_loop.get()
                except RuntimeError:
                    if self._closed:
                        raise ManagerClosedError(f"{self!r} is closed") from None
                    raise

    async def close(self) -> None:
        """Release connections, those of every event loop. Idempotent; the manager
        cannot be used afterwards."""
        if self._closed:
            return
        self._closed = True
        async with self._open_lock:
            try:
                if self._opened:
                    self._opened = False
                    async with _deadline.call(self, "close"):
                        await self._close()
            finally:
                if self._per_loop is not None:
                    await self._per_loop.aclose()

    async def __aenter__(self: ManagerT) -> ManagerT:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def _ready(self) -> None:
        per_loop = self._per_loop
        if not self._opened or (per_loop is not None and not per_loop.ready_here()):
            await self.open()

    # -- the public operations: validate, take the deadline, delegate ----------------

    async def create(
        self, session_id: str, user_id: str | None = None, *, state: dict[str, Any] | None = None
    ) -> Session:
        """Store a new, empty session. Raises `SessionExistsError` if the id is taken."""
        validate_id(session_id)
        optional_id(user_id, "user_id")
        state_json = encode_state({} if state is None else state, self.capabilities.max_state_bytes)
        async with _deadline.call(self, "create"):
            return await _restore.create(self, session_id, user_id, state_json)

    async def restore(self, session: Session) -> Session:
        """Store *session* exactly as it is: how a session moves from one store to another.

        One atomic write of the whole session: its id, owner, state, ``created_at``,
        ``updated_at`` and ``version``, and its events with their ids, timestamps and
        order. Never overwrites: if a live session has the id, `SessionExistsError` is
        raised and nothing is written (an expired one is replaced, as by `create`).

        ``version`` is kept, so a copy that was saved 7 times reads back at version 7 and
        the next save makes it 8 (it must be at least 1, the version of any stored
        session). ``expires_at`` is not part of a session: it is this manager's ``ttl``
        counted from now, as for any write, so a restored session never arrives
        expired; without a ``ttl`` it never expires. Returns the stored copy, ready to
        be saved.
        """
        return await _restore.restore(self, session)

    async def get(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> Session | None:
        """The stored session, or None if absent or expired.

        ``last_events=N`` loads only the newest N events (the backend limits its query,
        so the cost does not grow with the history). The result is a detached copy.
        """
        validate_id(session_id)
        optional_id(user_id, "user_id")
        return await _reading.get(self, session_id, user_id, check_last_events(last_events))

    async def get_or_create(
        self, session_id: str, user_id: str | None = None, *, last_events: int | None = None
    ) -> Session:
        """Get the session, creating it if absent. Concurrent callers share one creation.

        ``last_events=N`` loads only the newest N events of a stored session, as `get`.
        """
        async with _deadline.call(self, "get_or_create"):
            while True:
                session = await self.get(session_id, user_id=user_id, last_events=last_events)
                if session is not None:
                    return session
                try:
                    return await self.create(session_id, user_id)
                except SessionExistsError:
                    continue  # created by someone else between our get and create: read it

    async def save(self, session: Session) -> None:
        """Persist what changed since *session* was loaded: all of it, or nothing.

        Raises `SessionConflictError` if another save landed since the load, and
        `SessionNotFoundError` if the session was deleted, expired or never created.

        Each save carries a unique token, stored atomically with the version it
        creates. If a save raises `BackendUnavailableError` (or `BackendTimeoutError`,
        or is cancelled), it may or may not have landed; calling ``save(session)``
        again with the session unchanged re-sends the same save with the same token,
        which the backend recognises: if the first one landed, nothing is written again
        and the retry simply succeeds. Change the session in between and the retry is
        a new save (a `SessionConflictError` then means the first one landed).
        """
        if not isinstance(session, Session):
            raise InvalidInputError(f"save() takes a Session, not {type(session).__name__}")
        session_id = validate_id(session.session_id)
        optional_id(session.user_id, "user_id")
        state_json = encode_state(session.state, self.capabilities.max_state_bytes)
        if not isinstance(session.events, list):
            raise InvalidInputError(
                f"session {session_id!r}: events must be a list of Event, "
                f"not {type(session.events).__name__}"
            )
        loaded = tracking_of(session)
        async with _deadline.call(self, "save"):
            await save_tracked(self, session, state_json, loaded)

    async def compact(
        self,
        session: Session,
        through_event_id: str,
        replacement: Sequence[Event],
        *,
        archive: bool = False,
    ) -> None:
        """Replace the events up to and including *through_event_id* with *replacement*.

        The store deletes that prefix of the history and puts *replacement* (typically
        one summary event) in its place, atomically and version-checked like a save:
        `SessionConflictError` if another write landed since *session* was loaded, and
        nothing is written. It costs what is replaced plus what is written, never what
        stays, and the replaced events are never read: *session* may be loaded with
        ``last_events`` as long as its events include *through_event_id* (the events
        after it are what the store keeps, so duplicate ids are caught before any I/O).

        ``archive=True`` keeps the replaced events in the backend's archive of the
        session (a separate table, key or collection, erased with the session), read
        back with `archived_events`. State is not written: changes to ``session.state``
        stay pending for the next `save`. Events added to *session* since its load must
        be saved first (`InvalidInputError`). On success *session* holds the whole
        compacted history (``replacement`` then the kept events), at the new version.

        Raises `NotImplementedError` on a backend without compaction
        (``capabilities.compaction``).
        """
        await _compaction.compact(self, session, through_event_id, replacement, archive)

    async def archived_events(self, session_id: str, *, user_id: str | None = None) -> list[Event]:
        """The events that `compact` with ``archive=True`` removed from *session_id*,
        oldest compaction first, each in its original order; empty if none were archived.
        """
        validate_id(session_id)
        optional_id(user_id, "user_id")
        return await _compaction.archived_events(self, session_id, user_id)

    async def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        through_event_id: str | None = None,
        user_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> SessionSummary:
        """Create *new_id* holding *source_id*'s events up to and including
        *through_event_id* (default: all) and its state (or *state*), in one atomic step
        copying one consistent snapshot of the source, which is never modified.

        Never overwrites (`SessionExistsError`, nothing written); *user_id*, when given,
        must own the source. The fork starts at version 1 and records ``forked_from``;
        returns its summary. Needs ``capabilities.branching`` (docs/concepts.md, "Branches").
        """
        source = validate_id(source_id, "source_id")
        new = validate_id(new_id, "new_id")
        through = optional_id(through_event_id, "through_event_id")
        owner = optional_id(user_id, "user_id")
        spec = _branching.check_fork(self, source, new, through, owner, state)
        async with _deadline.call(self, "fork"):
            await self._ready()
            record = await _branching.fork(self, spec, self.clock.now(), new_lineage())
        return record.summary()

    async def rewind(
        self, session: Session, through_event_id: str, *, archive: bool = False
    ) -> None:
        """Keep the events up to and including *through_event_id*, drop the rest.

        Atomic and version-checked like a save; costs what it drops; *session* may be
        partial if its events include the cut. ``archive=True`` keeps the dropped events
        in the archive. On success *session* holds the kept events at the new version.
        """
        if not isinstance(session, Session):
            raise InvalidInputError(f"rewind() takes a Session, not {type(session).__name__}")
        validate_id(session.session_id)
        through = validate_id(through_event_id, "through_event_id")
        plan = _branching.check_rewind(self, session, through, archive)
        async with _deadline.call(self, "rewind"):
            await self._ready()
            await _branching.rewind(self, plan)

    async def update(
        self,
        session_id: str,
        fn: Callable[[Session], Awaitable[object] | object],
        *,
        user_id: str | None = None,
        create: bool = False,
        retries: int = DEFAULT_UPDATE_RETRIES,
        last_events: int | None = None,
        group: bool = True,
    ) -> Session:
        """Load, apply *fn*, save; on `SessionConflictError` reload and apply again.

        *fn* may be sync or async and must be safe to run more than once. With
        ``create=True`` an absent session is created first; otherwise absent raises
        `SessionNotFoundError`. After *retries* lost races the last
        `SessionConflictError` is raised.

        Concurrent calls of this manager on one session share saves (group commit):
        while one is in flight, later ones (same ``user_id``, ``create`` and
        ``last_events``) wait; then the first of them loads a fresh copy once, applies
        all their functions to it in call order (each sees what the earlier ones did,
        as if they ran one after the other) and saves them in one save. Each call's
        outcome is still its own: a *fn* that raises fails only its call (the others
        are applied again without it), each call counts its own *retries*, and a
        race lost to another process retries the group on fresh data. The session
        returned is the one stored by the save that carried *fn*'s change, so it may
        hold changes of calls grouped after it. A call made from inside *fn* on the
        same session runs on its own (it does not wait for the group it is part of).
        ``group=False`` opts out: the call loads and saves on its own and races the
        others like a separate process would.

        The whole call, waiting and retries included, is bounded by the ``timeout``
        option. A save that fails with `BackendUnavailableError` may have landed, so it
        is re-sent with its token (see `save`) until it gets a definite answer: *fn*'s
        change is never applied twice; `BackendReadOnlyError` and `BackendLockedError`
        are (nothing was written) and are raised at once. If the deadline passes first (or, for a
        grouped call, the deadline of the call whose save carries its change),
        `BackendTimeoutError` is raised and the change may or may not be stored
        (`get` tells).
        ``last_events=N`` loads only the newest N events on each attempt (``0`` for an
        append that needs no history); *fn* may then append events or remove them from
        the end, not both (`PartialSessionError`).
        """
        validate_id(session_id)
        optional_id(user_id, "user_id")
        if type(retries) is not int or retries < 0:
            raise InvalidInputError(f"retries must be an int >= 0, not {retries!r}")
        async with _deadline.call(self, "update"):
            if group and type(last_events) in (int, type(None)) and type(create) is bool:
                return await _grouping.grouped_update(
                    self, session_id, fn, user_id, create, retries, last_events
                )
            return await update_alone(self, session_id, fn, user_id, create, retries, last_events)

    @asynccontextmanager
    async def session(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> AsyncIterator[Session]:
        """``async with manager.session(id) as s:`` gets or creates, and saves on normal exit.

        ``last_events=N`` loads only the newest N events, as `get`.
        """
        session = await self.get_or_create(session_id, user_id, last_events=last_events)
        yield session
        await self.save(session)

    async def delete(self, session_id: str, *, user_id: str | None = None) -> bool:
        """Delete a session and its events; False if it was not stored."""
        validate_id(session_id)
        optional_id(user_id, "user_id")
        async with _deadline.call(self, "delete"):
            await self._ready()
            now = self.clock.now()
            if user_id is not None:
                loaded = await self._load(session_id, 0, now)
                if loaded is None:
                    return False
                if loaded.record.user_id != user_id:
                    raise SessionOwnershipError(session_id, user_id)
            return await self._delete(session_id, now)

    async def delete_user(self, user_id: str) -> int:
        """Erase every session of *user_id*; returns how many were deleted."""
        validate_id(user_id, "user_id")
        async with _deadline.call(self, "delete_user"):
            await self._ready()
            return await self._delete_user(user_id, self.clock.now())

    async def list_sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        forked_from: str | None = None,
    ) -> SessionPage:
        """A page of summaries, newest created first (ties by id, descending).

        The order never changes for a stored session, so paging with ``next_cursor``
        visits each session once even while others are saved. ``forked_from=ID``
        lists only the forks made from session ID (`fork`; needs
        ``capabilities.branching``).
        """
        optional_id(user_id, "user_id")
        if optional_id(forked_from, "forked_from") is not None:
            _branching.require_branching(self, "list_sessions(forked_from=...)")
        if type(limit) is not int or not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidInputError(
                f"limit must be an int from 1 to {MAX_PAGE_SIZE}, not {limit!r}"
            )
        after = None if cursor is None else decode_cursor(cursor)
        if after is not None:
            validate_id(after[1], "cursor")  # hooks may take it for a stored id
        async with _deadline.call(self, "list_sessions"):
            await self._ready()
            now = self.clock.now()
            if forked_from is None:
                items = await self._list(user_id, limit + 1, after, now)
            else:
                items = await self._list_forks(forked_from, user_id, limit + 1, after, now)
        if len(items) <= limit:
            return SessionPage(items=items, next_cursor=None)
        last = items[limit - 1]
        return SessionPage(
            items=items[:limit], next_cursor=encode_cursor(last.created_at, last.session_id)
        )

    async def purge_expired(self) -> int:
        """Remove expired sessions now; returns how many. Expired ones are already invisible."""
        async with _deadline.call(self, "purge_expired"):
            await self._ready()
            return await self._purge_expired(self.clock.now())

    async def diagnose(self) -> _diagnosis.Diagnosis:
        """Read the deployment's settings and report each one that could lose, expose or
        wrongly expire sessions, with its consequence and its fix (docs/doctor.md).
        Changes no setting and writes no session (opening, as for any first call, creates
        or migrates the schema)."""
        async with _deadline.call(self, "diagnose"):
            await self._ready()
            now = self.clock.now()
            found = _diagnosis.common_findings(self) + await self._diagnose(now)
            return _diagnosis.build_report(self, now, found)
