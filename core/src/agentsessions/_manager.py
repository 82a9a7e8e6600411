"""`SessionManager`: the contract every backend honours, and the logic they all share.

The public methods validate input, check JSON, work out what a save changed and
enforce ownership, once, here. A backend implements the small ``_``-prefixed hooks
that move records in and out of its engine (see `agentsessions.backend`).
"""

from __future__ import annotations

import abc
import asyncio
import inspect
import os
import random
import secrets
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from types import TracebackType
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from . import _branching, _deadline, _grouping, _instrumentation, _json, _log
from ._clock import SYSTEM_CLOCK, Clock
from ._deadline import ErrorRule
from ._errors import (
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidInputError,
    InvalidOptionError,
    InvalidSessionIdError,
    ManagerClosedError,
    OperationNotSupportedError,
    PartialSessionError,
    SessionConflictError,
    SessionDecryptionError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSerializationError,
    SessionTooLargeError,
)
from ._loops import LoopLock, PerLoop
from ._models import Event, ForkOrigin, Session, SessionPage, SessionSummary, all_unsent, mark_sent
from ._records import (
    Capabilities,
    CompactRequest,
    EventRecord,
    ForkRequest,
    LoadedSession,
    RewindRequest,
    SaveRequest,
    SessionRecord,
    decode_cursor,
    decode_events,
    encode_cursor,
    encode_event,
)
from ._sealed import envelope_of_text, sealed_capabilities
from ._tracking import LoadedState, loaded_session, mark_loaded, stamp_saved
from ._urls import mask_url, scrub_secret, split_url

if TYPE_CHECKING:
    from .encryption import Keyring

__all__ = [
    "DEFAULT_TIMEOUT",
    "MAX_ID_LENGTH",
    "MAX_LAST_EVENTS",
    "MAX_POOL_SIZE",
    "MAX_TIMEOUT",
    "MAX_TTL",
    "ManagerOptions",
    "SchemaTooNewError",
    "PoolSize",
    "Restorable",
    "SessionManager",
    "Timeout",
    "backoff",
    "backoff_delay",
    "check_restorable",
    "validate_id",
]

MAX_ID_LENGTH = 255
#: ``get(last_events=N)`` with a larger N loads the whole history, like N = this.
MAX_LAST_EVENTS = 2**31 - 1
MAX_PAGE_SIZE = 1000
DEFAULT_UPDATE_RETRIES = 64
#: Seconds every call may take end to end, unless the ``timeout`` option says otherwise.
DEFAULT_TIMEOUT = 10.0

ManagerT = TypeVar("ManagerT", bound="SessionManager")
T = TypeVar("T")


def validate_id(value: object, what: str = "session_id") -> str:
    """Return *value* if it is a usable id, else raise `InvalidSessionIdError`.

    Any non-empty, non-blank string of at most 255 characters is an id, however many
    quote, brace, dollar or slash characters it holds: backends store ids as data,
    never splice them into queries. NUL and unpaired surrogates are refused because
    no engine stores them faithfully.
    """
    if type(value) is not str:
        raise InvalidSessionIdError(f"{what} must be a str, not {type(value).__name__}")
    if not value or value.isspace():
        raise InvalidSessionIdError(f"{what} must not be empty or blank")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidSessionIdError(
            f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if "\x00" in value:
        raise InvalidSessionIdError(f"{what} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidSessionIdError(f"{what} holds an unpaired surrogate") from None
    return value


def check_size(text: str, limit: int | None, path: str) -> None:
    """Raise `SessionTooLargeError` if *text* encodes to more than *limit* UTF-8 bytes."""
    # A character is at most 4 bytes: most texts are settled without encoding them.
    if limit is None or len(text) * 4 <= limit:
        return
    size = len(text.encode("utf-8"))
    if size > limit:
        raise SessionTooLargeError(path, size, limit)


def _optional_id(value: object, what: str) -> str | None:
    return None if value is None else validate_id(value, what)


#: The longest ``ttl``: a century (``None`` means sessions never expire).
MAX_TTL = 100 * 365 * 24 * 3600
#: The longest timeout option (one day), far below what any driver's milliseconds take.
MAX_TIMEOUT = 24 * 3600
#: The largest connection pool option.
MAX_POOL_SIZE = 10_000


class SchemaTooNewError(Exception):
    """Raised by a backend's migration: the store holds a schema from a newer release.

    The base class turns it into a `BackendUnavailableError` telling the user to upgrade
    the backend's distribution (older code could corrupt such a store). *where* names
    the store ("the database", "schema 'app'").
    """

    def __init__(self, found: int, known: int, where: str = "the database") -> None:
        super().__init__(found, known, where)
        self.found, self.known, self.where = found, known, where


#: A timeout option: finite seconds, more than 0, at most `MAX_TIMEOUT`.
Timeout = Annotated[float, Field(gt=0, le=MAX_TIMEOUT, allow_inf_nan=False)]
#: A connection pool size option: 1 to `MAX_POOL_SIZE`.
PoolSize = Annotated[int, Field(ge=1, le=MAX_POOL_SIZE)]


class ManagerOptions(BaseModel):
    """Options every backend accepts; a backend extends this with its own fields.

    Every field is range-checked (finite, positive where it must be, bounded), so a
    value that would fail at first use fails at `connect()`, naming the option.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    ttl: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TTL,
        allow_inf_nan=False,
        description="seconds of inactivity after which a session expires",
    )
    namespace: str = Field(
        default="",
        max_length=48,
        pattern=r"^[A-Za-z0-9_]*$",
        description="isolates applications that share one server",
    )
    timeout: float = Field(
        default=DEFAULT_TIMEOUT,
        gt=0,
        le=3600,
        description="seconds any one call may take end to end (connecting, waiting for a "
        "pooled connection and retries included) before it raises BackendTimeoutError",
    )

    def bounded(self, seconds: float | None) -> float:
        """*seconds* for one driver wait (connect, reply), or the ``timeout`` when None;
        never longer than the ``timeout``, which bounds the whole call anyway."""
        return self.timeout if seconds is None else min(seconds, self.timeout)


class SessionManager(abc.ABC):
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

    #: The options model; a backend subclasses `ManagerOptions` to add its own (and
    #: re-declares ``options`` with that type for the type checker).
    Options: ClassVar[type[ManagerOptions]] = ManagerOptions
    options: ManagerOptions
    #: Query parameters that belong to the driver and stay in the URL.
    driver_query_params: ClassVar[frozenset[str]] = frozenset()
    #: The driver exceptions that mean "the server cannot serve this call", and the
    #: error each becomes (first matching rule wins). The base class applies them to
    #: every call, so a backend's hooks let driver exceptions propagate.
    driver_errors: ClassVar[tuple[ErrorRule, ...]] = ()
    #: What this backend supports beyond the mandatory operations. A backend whose
    #: capabilities depend on its URL (SQLite's ``:memory:``) sets it per instance.
    capabilities: Capabilities = Capabilities()
    #: Where "now" comes from for every timestamp and expiry check: the system clock
    #: unless set (``connect(url, clock=...)`` or assignment); `with_options` keeps it.
    clock: Clock = SYSTEM_CLOCK
    _encryption: Keyring | None = None
    #: The backend's own capabilities while encrypting (`capabilities` then states the
    #: size limits of the plaintext whose encrypted form fits them).
    _unsealed_capabilities: Capabilities | None = None
    #: The engine's OpenTelemetry ``db.system.name`` ("" means the URL scheme).
    db_system: ClassVar[str] = ""
    #: A server backend's default port: set, it makes instrumentation report the
    #: URL's host, port and database (``server.address``, ...). None: an embedded engine.
    default_port: ClassVar[int | None] = None

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        self._url = url
        if options is None:
            options = self.Options()
        elif not isinstance(options, self.Options):
            options = self.parse_options(options.model_dump(exclude_unset=True))
        self.options = options
        self._open_lock = LoopLock()
        self._opened = False
        self._closed = False
        self._per_loop: PerLoop[Any] | None = None
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
        try:
            return cls.Options.model_validate(dict(raw))
        except ValidationError as exc:
            problems = []
            for error in exc.errors():
                name = ".".join(str(part) for part in error["loc"]) or "options"
                if error["type"] == "extra_forbidden":
                    known = ", ".join(sorted(cls.Options.model_fields))
                    problems.append(f"unknown option {name!r} (known: {known})")
                else:
                    problems.append(f"option {name!r}: {error['msg']} (got {error['input']!r})")
            raise InvalidOptionError("; ".join(problems)) from None

    def with_options(self: ManagerT, **changes: Any) -> ManagerT:
        """A new, unopened manager on the same URL with some options changed.

        ``manager.with_options(namespace="tenant_b")`` isolates another application;
        the conformance kit uses it to check namespaces, time to live and what a fresh
        connection really reads back.
        """
        merged = {**self.options.model_dump(exclude_unset=True), **changes}
        other = type(self)(self._url, self.parse_options(merged))
        other.clock = self.clock
        other.encryption = self.encryption
        _instrumentation.inherit(self, other)
        return other

    @property
    def encryption(self) -> Keyring | None:
        """Encrypts event content and metadata and the state before the backend sees
        them, and decrypts after every read (`agentsessions.encryption`); None: stored
        as they are. Set by ``connect(url, encryption=...)`` (or assigned before use);
        `with_options` keeps it. While set, ``capabilities.max_event_bytes`` and
        ``max_state_bytes`` are those of the plaintext whose encrypted form fits."""
        return self._encryption

    @encryption.setter
    def encryption(self, keyring: Keyring | None) -> None:
        own = self._unsealed_capabilities or self.capabilities
        self._encryption = keyring
        if keyring is None:
            self._unsealed_capabilities = None
            self.capabilities = own
        else:
            self._unsealed_capabilities = own
            self.capabilities = sealed_capabilities(own)

    @property
    def url(self) -> str:
        """The URL this manager connects to, password masked."""
        return mask_url(self._url)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    # -- lifecycle ----------------------------------------------------------------------

    def per_loop(
        self,
        open: Callable[[], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
        drop: Callable[[T], None] | None = None,
        *,
        prepare: Callable[[T], Awaitable[None]] | None = None,
    ) -> PerLoop[T]:
        """For a backend's ``__init__``: connection resources kept one per event loop.

        *open* makes the running loop's resource on its first call in that loop, *close*
        releases it in that loop when the loop shuts down or the manager closes, *drop*
        abandons one whose loop can no longer run or whose *close* outlasts half the
        ``timeout`` option (so that a silent server never holds up closing; see
        `PerLoop`). *prepare* runs on the first resource opened, until it succeeds once
        (create or migrate the schema, build indexes); a resource whose *prepare* fails
        is dropped (closed without *drop*). The manager opens the running loop's
        resource before any hook runs, so hooks may use ``resources.current()``, and
        such a backend needs no `_open` or `_close` of its own.
        """
        if self._per_loop is not None:
            raise RuntimeError("a manager keeps one set of per-loop resources")
        if prepare is not None:
            open = self._prepared(open, prepare, close, drop)
        self._per_loop = PerLoop(open, close, drop, close_timeout=self.options.timeout / 2)
        return self._per_loop

    @staticmethod
    def _prepared(
        open: Callable[[], Awaitable[T]],
        prepare: Callable[[T], Awaitable[None]],
        close: Callable[[T], Awaitable[None]],
        drop: Callable[[T], None] | None,
    ) -> Callable[[], Awaitable[T]]:
        done = False

        async def opened() -> T:
            nonlocal done
            resource = await open()
            if not done:
                try:
                    await prepare(resource)
                except BaseException:
                    if drop is not None:
                        drop(resource)
                    else:
                        await close(resource)
                    raise
                done = True
            return resource

        return opened

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

    # -- the contract -------------------------------------------------------------------

    async def create(
        self, session_id: str, user_id: str | None = None, *, state: dict[str, Any] | None = None
    ) -> Session:
        """Store a new, empty session. Raises `SessionExistsError` if the id is taken."""
        validate_id(session_id)
        _optional_id(user_id, "user_id")
        state_json = self._encode_state({} if state is None else state)
        async with _deadline.call(self, "create"):
            return await self._create_checked(session_id, user_id, state_json)

    async def _create_checked(
        self, session_id: str, user_id: str | None, state_json: str
    ) -> Session:
        await self._ready()
        now = self.clock.now()
        record = SessionRecord(
            session_id=session_id,
            user_id=user_id,
            state=self._seal_state(session_id, state_json),
            version=1,
            created_at=now,
            updated_at=now,
            expires_at=self._expiry(now),
            event_count=0,
            lineage=new_lineage(),
        )
        await self._create(record, now)
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
        checked = check_restorable(session)
        session_id = checked.record.session_id
        self._check_event_sizes(checked.events, 0)
        events = self._seal_events(session_id, list(session.events), 0, checked.events)
        state_json = self._seal_state(session_id, checked.record.state)
        async with _deadline.call(self, "restore"):
            await self._ready()
            now = self.clock.now()
            record = replace(
                checked.record,
                state=state_json,
                expires_at=self._expiry(now),
                lineage=new_lineage(),
            )
            await self._restore(record, events, now)
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

    async def get(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> Session | None:
        """The stored session, or None if absent or expired.

        ``last_events=N`` loads only the newest N events (the backend limits its query,
        so the cost does not grow with the history). The result is a detached copy.
        """
        validate_id(session_id)
        _optional_id(user_id, "user_id")
        if last_events is not None:
            if type(last_events) is not int or last_events < 0:
                raise InvalidInputError(
                    f"last_events must be None or an int >= 0, not {last_events!r}"
                )
            # More than any session holds means "all of them", and keeps the number
            # inside what every engine's LIMIT / Lua number / index arithmetic takes.
            last_events = min(last_events, MAX_LAST_EVENTS)
        async with _deadline.call(self, "get"):
            await self._ready()
            loaded = await self._load(session_id, last_events, self.clock.now())
        if loaded is None:
            return None
        record = loaded.record
        if user_id is not None and record.user_id != user_id:
            raise SessionOwnershipError(session_id, user_id)
        offset = record.event_count - len(loaded.events)
        events, shift = self._open_events(session_id, loaded.events, offset)
        return loaded_session(
            session_id=record.session_id,
            user_id=record.user_id,
            events=events,
            state=_json.loads(self._open_state(session_id, record.state)),
            created_at=record.created_at,
            updated_at=record.updated_at,
            version=record.version,
            offset=offset,
            partial=last_events is not None,
            lineage=record.lineage,
            shift=shift,
            forked_from=record.forked_from,
        )

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
        _optional_id(session.user_id, "user_id")
        state_json = self._encode_state(session.state)
        if not isinstance(session.events, list):
            raise InvalidInputError(
                f"session {session_id!r}: events must be a list of Event, "
                f"not {type(session.events).__name__}"
            )
        loaded = self._tracking_of(session)
        async with _deadline.call(self, "save"):
            await self._save_checked(session, state_json, loaded)

    async def _save_checked(
        self, session: Session, state_json: str, loaded: LoadedState | None
    ) -> None:
        await self._ready()
        if loaded is None:
            loaded = await self._adopt(session)
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
        known = _NO_IDS if all_unsent(added) else loaded.ids_of_prefix(keep_in_window)
        new_events = _encode_events(events, keep_in_window, keep, known)
        mark_sent(added)
        now = self.clock.now()
        new_version = loaded.version + 1
        stored_count = loaded.offset + len(base)
        record = SessionRecord(
            session_id=session.session_id,
            user_id=session.user_id,
            state=state_json,
            version=new_version,
            created_at=session.created_at,
            updated_at=now,
            expires_at=self._expiry(now),
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
            # (Compared before encryption, whose random nonces differ on every call.)
            request = pending
            now = request.record.updated_at
            sent = loaded.sent
        else:
            shift = 0
            if self.encryption is not None and keep:
                # The kept events' shift, which the new ones must be sealed with.
                if loaded.shift is None:
                    loaded.shift = await self._stored_shift(session.session_id)
                shift = loaded.shift
            self._check_event_sizes(new_events, keep_in_window)
            sent = self._sealed_request(request, events, keep_in_window, shift)
        loaded.pending = request
        loaded.sent = sent
        try:
            await self._save(sent, now)
        except SessionError as exc:
            if not isinstance(exc, BackendUnavailableError):
                loaded.pending = loaded.sent = None  # a definite answer: it did not land
            raise
        loaded.pending = loaded.sent = None
        if not keep:
            loaded.shift = 0
        stamp_saved(session, new_version, now)
        loaded.saved(session, new_version, keep_in_window, request.record.lineage)

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
        if not self.capabilities.compaction:
            raise NotImplementedError(f"{type(self).__name__} does not implement compaction")
        loaded = self._tracking_of(session)
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
                f"session {session_id!r} has unsaved changes to its events: save() it "
                "before compacting"
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
        new_events = _encode_events(replacing, 0, 0, {event.id for event in kept})
        mark_sent(replacing)
        replaced = loaded.offset + cut + 1
        # With encryption the kept events stay sealed where they were: their positions
        # move by len(replacing) - replaced, and the session's shift the other way.
        shift = (loaded.shift or 0) + replaced - len(replacing)
        self._check_event_sizes(new_events, 0)
        new_events = self._seal_events(session_id, replacing, 0, new_events, shift)
        async with _deadline.call(self, "compact"):
            await self._ready()
            now = self.clock.now()
            request = CompactRequest(
                session_id=session_id,
                expected_version=loaded.version,
                version=loaded.version + 1,
                updated_at=now,
                expires_at=self._expiry(now),
                stored_event_count=loaded.offset + len(loaded.events),
                replaced=replaced,
                new_events=new_events,
                archive=archive,
                token=new_token(),
                lineage=new_lineage(),
                expected_lineage=loaded.lineage,
            )
            await self._compact(request, now)
        session.events = [*replacing, *kept]
        session.version = request.version
        session.updated_at = now
        mark_loaded(session, lineage=request.lineage)
        if session._loaded is not None:
            session._loaded.shift = shift

    async def archived_events(self, session_id: str, *, user_id: str | None = None) -> list[Event]:
        """The events that `compact` with ``archive=True`` removed from *session_id*,
        oldest compaction first, each in its original order; empty if none were archived.
        """
        validate_id(session_id)
        _optional_id(user_id, "user_id")
        if not self.capabilities.compaction:
            raise NotImplementedError(f"{type(self).__name__} does not implement compaction")
        async with _deadline.call(self, "archived_events"):
            await self._ready()
            now = self.clock.now()
            if user_id is not None:
                loaded = await self._load(session_id, 0, now)
                if loaded is not None and loaded.record.user_id != user_id:
                    raise SessionOwnershipError(session_id, user_id)
            texts = await self._archived(session_id, now)
        events = decode_events(texts)
        if self.encryption is None:
            return events
        return self.encryption.open_archived(self.options.namespace, session_id, events)

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
        *through_event_id* (default: all) and its state (or *state*), in one atomic step.

        The engine copies the events (they never travel through the client, except
        when encrypting: ciphertexts are bound to their session, so they are read,
        decrypted and sealed again under *new_id*); the copy is one consistent
        snapshot of one version of the source, which is never modified. Never
        overwrites: `SessionExistsError` if *new_id* is live, and nothing is written.
        *user_id*, when given, must own the source (`SessionOwnershipError`); the fork
        is owned by the source's owner. The fork starts at version 1 with a lineage of
        its own and records ``forked_from`` (source id, source version, cut event id).
        Returns the fork's summary. `OperationNotSupportedError` on a backend without
        ``capabilities.branching``.
        """
        source = validate_id(source_id, "source_id")
        new = validate_id(new_id, "new_id")
        through = _optional_id(through_event_id, "through_event_id")
        owner = _optional_id(user_id, "user_id")
        spec = _branching.check_fork(self, source, new, through, owner, state)
        async with _deadline.call(self, "fork"):
            await self._ready()
            record = await _branching.fork(self, spec, self.clock.now(), new_lineage())
        return record.summary()

    async def rewind(
        self, session: Session, through_event_id: str, *, archive: bool = False
    ) -> None:
        """Keep the events up to and including *through_event_id*, drop the rest.

        Atomic and version-checked like a save (`SessionConflictError` if another write
        landed since *session* was loaded; nothing is written); it costs what it drops,
        and *session* may be loaded with ``last_events`` as long as its events include
        *through_event_id*. ``archive=True`` keeps the dropped events in the session's
        archive (`archived_events`). State is not written. On success *session* holds
        the kept events at the new version. `OperationNotSupportedError` on a backend
        without ``capabilities.branching``.
        """
        if not isinstance(session, Session):
            raise InvalidInputError(f"rewind() takes a Session, not {type(session).__name__}")
        validate_id(session.session_id)
        through = validate_id(through_event_id, "through_event_id")
        plan = _branching.check_rewind(self, session, through, archive)
        async with _deadline.call(self, "rewind"):
            await self._ready()
            now = self.clock.now()
            request = plan.request(now, self._expiry(now), new_token(), new_lineage())
            await self._rewind(request, now)
        _branching.rewound(plan, request)

    def _encode_state(self, state: object) -> str:
        """The state as stored JSON text, after every check; raises before any I/O."""
        if type(state) is not dict:
            raise SessionSerializationError(
                "state", f"must be a dict (a JSON object), not {type(state).__name__}"
            )
        if not state:
            return "{}"  # most turns carry no state: nothing to check or encode
        _json.check_json(state, "state")
        text = _json.dumps(state)
        check_size(text, self.capabilities.max_state_bytes, "state")
        return text

    # -- encryption (see agentsessions.encryption) -------------------------------------

    def _seal_state(self, session_id: str, state_json: str) -> str:
        """The state as stored: *state_json* itself, or sealed when encrypting."""
        keyring = self.encryption
        if keyring is None:
            return state_json
        sealed = keyring.seal_state(self.options.namespace, session_id, state_json)
        own = self._unsealed_capabilities or self.capabilities
        check_size(sealed, own.max_state_bytes, "state (encrypted)")
        return sealed

    def _open_state(self, session_id: str, stored: str) -> str:
        """The state JSON text of a stored state; raises `SessionDecryptionError`."""
        keyring = self.encryption
        if keyring is None:
            if envelope_of_text(stored) is not None:
                raise SessionDecryptionError(
                    session_id,
                    "state",
                    "is encrypted, and this manager has no keyring: connect(url, "
                    "encryption=Keyring(...)) with the keys it was written with",
                )
            return stored
        return keyring.open_state(self.options.namespace, session_id, stored)

    def _seal_events(
        self,
        session_id: str,
        events: list[Event],
        start: int,
        records: list[EventRecord],
        shift: int = 0,
    ) -> list[EventRecord]:
        """*records* (encoded from ``events[start:]``) as stored: sealed when encrypting,
        each at its position plus *shift* (the session's: see `Keyring.open_events`)."""
        keyring = self.encryption
        if keyring is None:
            return records
        namespace = self.options.namespace
        limit = (self._unsealed_capabilities or self.capabilities).max_event_bytes
        sealed = []
        for index, record in enumerate(records):
            data = keyring.seal_event(
                namespace, session_id, events[start + index], record.position + shift, record.data
            )
            # Cannot fail when the plaintext was checked against `capabilities`: a guard.
            check_size(data, limit, f"events[{start + index}] (encrypted)")
            sealed.append(EventRecord(record.position, data))
        return sealed

    def _open_events(
        self, session_id: str, events: list[Event], first: int
    ) -> tuple[list[Event], int | None]:
        """Loaded events (``events[0]`` at position *first*), decrypted when encrypting,
        and the shift they were sealed with (None: not known from these events)."""
        keyring = self.encryption
        if keyring is None:
            return events, None
        return keyring.open_events(self.options.namespace, session_id, events, first)

    async def _stored_shift(self, session_id: str) -> int:
        """The shift of a session's stored events, read from its last one: for a save
        that keeps events it did not load (``last_events=0``)."""
        tail = await self._load(session_id, 1, self.clock.now())
        if tail is None or not tail.events:
            return 0  # the save that follows finds it gone, or conflicts
        _, shift = self._open_events(session_id, tail.events, tail.record.event_count - 1)
        return 0 if shift is None else shift

    def _sealed_request(
        self, request: SaveRequest, events: list[Event], start: int, shift: int = 0
    ) -> SaveRequest:
        """*request* as sent to the backend: sealed (new events at their position plus
        *shift*) when encrypting."""
        if self.encryption is None:
            return request
        session_id = request.record.session_id
        state = self._seal_state(session_id, request.record.state)
        return replace(
            request,
            record=replace(request.record, state=state),
            new_events=self._seal_events(session_id, events, start, request.new_events, shift),
        )

    async def _rekey_session(
        self, session_id: str, retries: int
    ) -> Literal["rekeyed", "current", "vanished"]:
        """Rewrite one session under the keyring's current key (see `encryption.rekey`).

        An ordinary conditional save of the whole session that keeps its ``updated_at``
        (and so its expiry): a save racing it wins and this one reads again.
        """
        keyring = self.encryption
        if keyring is None:
            raise InvalidOptionError("rekey needs a manager with encryption")
        for attempt in range(retries + 1):
            async with _deadline.call(self, "rekey"):
                await self._ready()
                loaded = await self._load(session_id, None, self.clock.now())
                if loaded is None:
                    return "vanished"
                record = loaded.record
                if not keyring.stale_parts(record.state, loaded.events):
                    return "current"
                first = record.event_count - len(loaded.events)
                events, _ = self._open_events(session_id, loaded.events, first)
                plain = [
                    encode_event(event, position, f"events[{position}]")
                    for position, event in enumerate(events)
                ]
                self._check_event_sizes(plain, 0)
                sealed = self._seal_events(session_id, events, 0, plain)
                state = self._seal_state(session_id, self._open_state(session_id, record.state))
                request = SaveRequest(
                    record=replace(
                        record,
                        state=state,
                        version=record.version + 1,
                        expires_at=self._expiry(record.updated_at),
                        event_count=len(sealed),
                    ),
                    expected_version=record.version,
                    stored_event_count=record.event_count,
                    keep=0,
                    new_events=sealed,
                    token=new_token(),
                    expected_lineage=record.lineage,
                )
                try:
                    await self._save(request, self.clock.now())
                except SessionNotFoundError:
                    return "vanished"
                except SessionConflictError:
                    if attempt >= retries:
                        raise
                else:
                    return "rekeyed"
            await backoff(attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _tracking_of(session: Session) -> LoadedState | None:
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

    async def _adopt(self, session: Session) -> LoadedState:
        """A Session built by hand: save it as a full rewrite of the stored one."""
        stored = await self._load(session.session_id, 0, self.clock.now())
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

    def _check_event_sizes(self, events: list[EventRecord], first_index: int) -> None:
        """`SessionTooLargeError` for an encoded event larger than this backend stores."""
        limit = self.capabilities.max_event_bytes
        for offset, record in enumerate(events):
            check_size(record.data, limit, f"events[{first_index + offset}]")

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
        change is never applied twice; `BackendReadOnlyError` is one (nothing was
        written) and is raised at once. If the deadline passes first (or, for a
        grouped call, the deadline of the call whose save carries its change),
        `BackendTimeoutError` is raised and the change may or may not be stored
        (`get` tells).
        ``last_events=N`` loads only the newest N events on each attempt (``0`` for an
        append that needs no history); *fn* may then append events or remove them from
        the end, not both (`PartialSessionError`).
        """
        validate_id(session_id)
        _optional_id(user_id, "user_id")
        if type(retries) is not int or retries < 0:
            raise InvalidInputError(f"retries must be an int >= 0, not {retries!r}")
        async with _deadline.call(self, "update"):
            if group and type(last_events) in (int, type(None)) and type(create) is bool:
                return await _grouping.grouped_update(
                    self, session_id, fn, user_id, create, retries, last_events
                )
            return await self._update_alone(session_id, fn, user_id, create, retries, last_events)

    async def _update_alone(
        self,
        session_id: str,
        fn: Callable[[Session], Awaitable[object] | object],
        user_id: str | None,
        create: bool,
        retries: int,
        last_events: int | None,
    ) -> Session:
        """`update` without group commit: its own loads and saves (inside its deadline)."""
        held: LoadedState | None = None
        for attempt in range(retries + 1):
            session = await self._copy_to_update(session_id, held, user_id, create, last_events)
            held = session._loaded
            result = fn(session)
            if inspect.isawaitable(result):
                await result
            try:
                await self._save_until_answered(session)
            except SessionConflictError:
                if attempt >= retries:
                    _log.retries_exhausted(self, retries)
                    raise
                await backoff(attempt)
                continue
            return session
        raise AssertionError("unreachable")  # pragma: no cover

    async def _copy_to_update(
        self,
        session_id: str,
        held: LoadedState | None,
        user_id: str | None,
        create: bool,
        last_events: int | None,
    ) -> Session:
        """The copy an `update` attempt applies its change to: *held* (the tracking of
        the copy that lost a race, if any) extended with what changed since, or a fresh
        load (created first with *create*). `SessionNotFoundError` if there is none."""
        session: Session | None = None
        if held is not None:
            session = await self._reload(session_id, held, user_id, last_events)
        if session is None and create:
            session = await self.get_or_create(session_id, user_id, last_events=last_events)
        elif session is None and held is None:
            session = await self.get(session_id, user_id=user_id, last_events=last_events)
        if session is None:
            raise SessionNotFoundError(session_id)
        return session

    async def _reload(
        self,
        session_id: str,
        held: LoadedState | None,
        user_id: str | None = None,
        last_events: int | None = None,
    ) -> Session | None:
        """A fresh copy of the stored session, as `get` returns it, built from *held*.

        *held* is the tracking of a copy that lost a race (its events are the stored
        ones of its version, whatever the caller did to the copy since). While the
        stored lineage is still the one *held* has, only the events after it are read
        (`_load_since`); otherwise, or without a tracking, the whole history is.
        """
        if held is None or not held.lineage or held.session_id != session_id:
            return await self.get(session_id, user_id=user_id, last_events=last_events)
        held_count = held.offset + len(held.events)
        async with _deadline.call(self, "get"):
            await self._ready()
            loaded = await self._load_since(session_id, held_count, held.lineage, self.clock.now())
        if loaded is None:
            return None
        record = loaded.record
        if user_id is not None and record.user_id != user_id:
            raise SessionOwnershipError(session_id, user_id)
        fetched = loaded.events
        if record.lineage == held.lineage and len(fetched) == record.event_count - held_count:
            opened, shift = self._open_events(session_id, fetched, held_count)
            events = [*held.events, *opened]
            offset = held.offset
            if shift is None:  # nothing new: the held events' shift still holds
                shift = held.shift
        elif len(fetched) == record.event_count:
            events, shift = self._open_events(session_id, fetched, 0)
            offset = 0
        else:  # neither what was asked nor the whole history: read it again, plainly
            return await self.get(session_id, user_id=user_id, last_events=last_events)
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
            state=_json.loads(self._open_state(session_id, record.state)),
            created_at=record.created_at,
            updated_at=record.updated_at,
            version=record.version,
            offset=offset,
            partial=partial,
            lineage=record.lineage,
            shift=shift,
            forked_from=record.forked_from,
        )

    async def _save_until_answered(self, session: Session) -> None:
        """Save; re-send while the outcome is unknown (bounded by the call's deadline)."""
        attempt = 0
        while True:
            try:
                await self.save(session)
                return
            except BackendReadOnlyError:
                raise  # refused, so not stored: no outcome to wait for
            except BackendUnavailableError:
                attempt += 1
                await backoff(attempt, cap=0.5)

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
        _optional_id(user_id, "user_id")
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
        _optional_id(user_id, "user_id")
        _optional_id(forked_from, "forked_from")
        if forked_from is not None:
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

    # -- helpers for backends ---------------------------------------------------------

    def _expiry(self, now: datetime) -> datetime | None:
        """The ``expires_at`` of a session written at *now*: ``now + ttl``, or None."""
        ttl = self.options.ttl
        return None if ttl is None else now + timedelta(seconds=ttl)

    def _unavailable(
        self, exc: BaseException, kind: type[BackendUnavailableError] = BackendUnavailableError
    ) -> BackendUnavailableError:
        """A *kind* error for *exc*, with every trace of the password masked."""
        reason = scrub_secret(f"{type(exc).__name__}: {exc}", self._url)
        if issubclass(kind, BackendTimeoutError):
            error: BackendUnavailableError = self._timed_out(f"the driver gave up first: {reason}")
        else:
            error = kind(self.url, reason)
        if self._opened:
            _instrumentation.connection_lost(self, error)
        return error

    def _timed_out(self, reason: str) -> BackendTimeoutError:
        """A `BackendTimeoutError` for the running call, saying why in *reason*."""
        operation, timeout = _deadline.current_operation(self) or ("call", self.options.timeout)
        return BackendTimeoutError(self.url, operation, timeout, reason)

    def _translate(self, exc: BaseException) -> SessionError | None:
        """The error *exc* stands for under `driver_errors`; None if it is not a driver's.

        A backend may extend it for driver errors that are not about availability."""
        if isinstance(exc, SchemaTooNewError):
            dist = type(self).__module__.partition(".")[0].replace("_", "-")
            return BackendUnavailableError(
                self.url,
                f"{exc.where} has agentsessions schema version {exc.found}, newer than the "
                f"{exc.known} this {dist} understands; upgrade {dist} (opening it with older "
                "code could corrupt it)",
            )
        for rule in self.driver_errors:
            if rule.matches(exc):
                return (
                    self._unavailable(exc, rule.kind)
                    if rule.build is None
                    else rule.build(self, exc)
                )
        return None

    async def _quietly(self, cleanup: Awaitable[object]) -> None:
        """Await a cleanup whose failure loses nothing (what it removes is invisible).

        For cleanup after a write's outcome is decided: a lost connection then must not
        turn a save that landed (or one refused with a definite answer) into an error
        the caller would act on. Swallows the exceptions of the types `driver_errors`
        declares, whatever their ``when`` conditions; anything else (a bug, a
        cancellation) propagates.
        """
        try:
            await cleanup
        except Exception as exc:
            if not any(
                isinstance(exc, rule.types) and rule.raised_here(exc) for rule in self.driver_errors
            ):
                raise

    def _remaining(self, cap: float | None = None) -> float:
        """Seconds left before the running call's deadline, at most *cap*: for driver timeouts."""
        return _deadline.remaining(self, cap)

    def _migrations_applied(self, from_version: int, to_version: int) -> None:
        """Log that `_open` migrated the schema (operators want to know when); nothing
        when *from_version* was already *to_version*, so call it after every check."""
        if from_version < to_version:
            _log.migrations_applied(self, from_version, to_version)

    # -- what a backend implements ------------------------------------------------------
    # The terms used below ("now", expiry, atomic) are defined once, in the docstring of
    # agentsessions.backend, where the backend author's guide renders them.

    async def _open(self) -> None:
        """Connect: create pools and clients, create or migrate the schema.

        Called once, lazily, by `open` (explicitly, by ``async with``, or by the first
        call), under a lock, so it never runs twice concurrently; if it raises, the
        manager stays unopened and the next call tries again. The default does
        nothing: a backend whose connections are `per_loop` has them opened for it.

        Raises:
            BackendUnavailableError: the engine cannot be reached or the store cannot be
                used (a missing directory, a schema from a newer release); the message
                names the reason with the password masked.
        """
        return None

    async def _close(self) -> None:
        """Release what `_open` acquired (connections, pools, threads).

        Called at most once, by `close`, and only if `_open` succeeded. It should not
        raise for an engine that has gone away: closing must always release. The
        default does nothing: `per_loop` resources are released by the manager.
        """
        return None

    @abc.abstractmethod
    async def _create(self, record: SessionRecord, now: datetime) -> None:
        """Insert a new session atomically.

        Args:
            record: the new session: ``version`` 1, ``event_count`` 0, ``state`` as JSON
                text, ``created_at == updated_at == now`` and ``expires_at`` computed
                from the ``ttl`` option (None without one).
            now: the clock reading of this call; an expired stored session with the
                same id counts as absent and is replaced (with its events removed).

        Of several concurrent creates of one id (in any process), exactly one succeeds.

        Raises:
            SessionExistsError: a live session with ``record.session_id`` is stored;
                it is left untouched.
            BackendUnavailableError: the engine failed; nothing was written.
        """

    @abc.abstractmethod
    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        """Insert a whole session, record and events, as one atomic write.

        Args:
            record: the session exactly as it is to be stored: its own ``version``,
                ``created_at``, ``updated_at`` and ``event_count`` (== ``len(events)``),
                ``state`` as JSON text, ``expires_at`` computed from the ``ttl`` option.
            events: the events at positions 0..n-1, already checked and encoded.
            now: the clock reading of this call; an expired stored session with the
                same id counts as absent and is replaced (with its events removed).

        Readers see the whole session or nothing, and a failure or a crash at any point
        leaves nothing a reader can see. Of several concurrent restores or creates of
        one id, exactly one succeeds.

        Raises:
            SessionExistsError: a live session with ``record.session_id`` is stored;
                it is left untouched and nothing is written.
            BackendUnavailableError: the engine failed; nothing was written.
        """

    @abc.abstractmethod
    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        """Read one session and its newest events, as of one consistent snapshot.

        Args:
            session_id: a validated id.
            last_events: how many of the newest events to read: None for all of them,
                0 for none (the record alone). Push the limit into the engine's query,
                so that the cost does not grow with the history.
            now: the clock reading of this call, for expiry.

        Returns:
            The stored record and its newest ``min(last_events, event_count)`` events
            in position order (decode them with `decode_events`), read atomically with
            the record so that ``record.event_count`` and the events agree; or None if
            no live session has this id. Ownership is checked by the caller.

        Raises:
            BackendUnavailableError: the engine failed.
        """

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        """Read one session for a caller whose copy lost a race: only what changed, if it can.

        The caller holds the session's first *event_count* events (or the newest of
        them), loaded or saved with *lineage* (a `SessionRecord.lineage`, never "").
        Read the record and events as of one consistent snapshot, as `_load` does:

        - if the stored lineage is *lineage* and the stored ``event_count`` is at least
          *event_count*, return the events at positions ``>= event_count`` only (none
          when nothing was appended): the caller's events are still the stored ones;
        - otherwise (the history was rewritten, or the session deleted and created or
          restored again), return every event, exactly as ``_load(session_id, None, now)``.

        The default does the latter always: correct for any backend, only slower.

        Returns:
            The stored record and those events in position order, or None if no live
            session has this id. Ownership is checked by the caller.

        Raises:
            BackendUnavailableError: the engine failed.
        """
        return await self._load(session_id, None, now)

    @abc.abstractmethod
    async def _save(self, request: SaveRequest, now: datetime) -> None:
        """Apply one save atomically: all of it, or nothing (see `SaveRequest`).

        Only if the stored version is still ``request.expected_version`` and (unless
        ``request.expected_lineage`` is "") the stored lineage is still
        ``request.expected_lineage``: delete the events at positions ``>= request.keep``
        (skip this when nothing is truncated, the common append), insert
        ``request.new_events`` at positions from ``request.keep`` on, then write
        ``request.record`` (new version, state, ``updated_at``, ``expires_at``,
        ``event_count``) keeping the stored
        ``user_id`` and ``created_at``. A concurrent reader sees the session before or
        after the save, never in between.

        Args:
            request: what to write, already encoded and checked by `save`.
            now: the clock reading of this call; an expired session counts as absent.

        Raises:
            SessionConflictError: the stored version differs from
                ``request.expected_version`` (another save landed first), or the stored
                lineage from a non-empty ``request.expected_lineage`` (the copy is of an
                earlier life of the id); nothing was written.
            SessionNotFoundError: no live session has the id (deleted, expired or never
                created); nothing was written.
            InvalidInputError: the engine cannot hold a value (an event over the
                backend's size limit); nothing was written.
            BackendUnavailableError: the engine failed. Raise it only if the save did
                not land, or say in the message that its outcome is unknown.
        """

    @abc.abstractmethod
    async def _delete(self, session_id: str, now: datetime) -> bool:
        """Delete the session and all its events, atomically.

        Args:
            session_id: a validated id (ownership, when asked for, was checked first).
            now: the clock reading of this call, for expiry.

        Returns:
            Whether a live session was stored: one expired at *now* is removed too but
            reported as False.

        Raises:
            BackendUnavailableError: the engine failed.
        """

    @abc.abstractmethod
    async def _delete_user(self, user_id: str, now: datetime) -> int:
        """Delete every session (and its events) owned by *user_id*, in this namespace.

        Args:
            user_id: a validated user id.
            now: the clock reading of this call, for expiry.

        Returns:
            How many live sessions were deleted (ones expired at *now* may be removed
            too but are not counted).

        Raises:
            BackendUnavailableError: the engine failed; some sessions may be deleted,
                and a retry deletes the rest.
        """

    @abc.abstractmethod
    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        """One page of live session summaries, newest created first.

        Args:
            user_id: only sessions owned by this user, or all sessions of the namespace
                when None.
            limit: the most summaries to return (the caller asks for one more than the
                page size, to know whether there is a next page).
            after: a position ``(created_at, session_id)`` from a previous page: return
                only sessions strictly before it in the order; None for the first page.
            now: the clock reading of this call; expired sessions are left out.

        Returns:
            At most *limit* summaries (`SessionRecord.summary`) ordered by
            ``(created_at, session_id)`` descending. ``created_at`` never changes, so
            paging visits each stored session once even while others are saved.

        Raises:
            BackendUnavailableError: the engine failed.
        """

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        """Apply one compaction atomically: all of it, or nothing (see `CompactRequest`).

        Only if the stored version is still ``request.expected_version`` (and the
        lineage ``request.expected_lineage``, as `_save`'s): optionally
        archive, then delete, the oldest ``request.replaced`` events, put
        ``request.new_events`` before the rest, and write the new version, timestamps
        and event count, keeping the stored state, ``user_id`` and ``created_at``. It
        must cost O(replaced + new events) whatever the history's length (a range
        delete plus inserts; no rewrite of the events that stay), and later saves,
        ``last_events`` loads and listings must see the compacted history as if it had
        been saved that way. A concurrent reader sees it before or after, never between.

        Backends that implement it set ``capabilities.compaction``; the default raises
        `NotImplementedError` (`compact` checks the capability first).

        Args:
            request: what to write, already encoded and checked by `compact`.
            now: the clock reading of this call; an expired session counts as absent.

        Raises:
            SessionConflictError: the stored version differs from
                ``request.expected_version``, or the stored lineage from a non-empty
                ``request.expected_lineage``; nothing was written.
            SessionNotFoundError: no live session has the id; nothing was written.
            BackendUnavailableError: the engine failed. Raise it only if the compaction
                did not land, or say in the message that its outcome is unknown.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement compaction")

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        """The archived event texts of *session_id* (see `CompactRequest`), oldest first.

        Args:
            session_id: a validated id (ownership, when asked for, was checked first).
            now: the clock reading of this call; an expired session's archive is empty.

        Returns:
            The JSON texts of every event archived by a compaction of the session, in
            the order of the compactions and, within one, of the events' positions.

        Raises:
            BackendUnavailableError: the engine failed.
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement compaction")

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        """Apply one fork atomically, the engine copying the events (see `ForkRequest`).

        Backends that implement it (with `_rewind` and `_list_forks`) set
        ``capabilities.branching``; the default raises `OperationNotSupportedError`.

        Returns:
            The new session's record as stored (``forked_from`` set).

        Raises:
            SessionNotFoundError: the source is not live; nothing was written.
            SessionOwnershipError: ``request.user_id`` does not own the source.
            SessionExistsError: ``request.session_id`` is live; nothing was written.
            InvalidInputError: the source holds no event ``request.through_event_id``.
            BackendUnavailableError: the engine failed; nothing was written.
        """
        raise OperationNotSupportedError(type(self).__name__, "fork", "branching")

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        """Apply one rewind atomically: drop the events from ``request.keep`` on (see
        `RewindRequest`), O(dropped) whatever the history's length.

        Raises:
            SessionConflictError: the stored version or lineage is not the expected one.
            SessionNotFoundError: no live session has the id; nothing was written.
            BackendUnavailableError: the engine failed. Raise it only if the rewind did
                not land, or say in the message that its outcome is unknown.
        """
        raise OperationNotSupportedError(type(self).__name__, "rewind", "branching")

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        """One page of the live sessions forked from *source_id* (``forked_from``'s
        session id), and owned by *user_id* unless it is None; ordered and paged
        exactly as `_list`.

        Raises:
            BackendUnavailableError: the engine failed.
        """
        raise OperationNotSupportedError(type(self).__name__, "list_sessions", "branching")

    async def _purge_expired(self, now: datetime) -> int:
        """Delete the sessions (and their events) that expired at *now*.

        Expired sessions are already invisible to every other hook; this reclaims their
        space. The default does nothing and returns 0, for engines that expire data
        themselves (Redis key expiry, a MongoDB TTL index).

        Args:
            now: the clock reading of this call: delete the sessions whose
                ``expires_at <= now``.

        Returns:
            How many sessions were deleted.

        Raises:
            BackendUnavailableError: the engine failed.
        """
        return 0


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
    user_id = _optional_id(session.user_id, "user_id")
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
    created_at = _aware("created_at", session.created_at)
    updated_at = _aware("updated_at", session.updated_at)
    events = list(session.events)
    encoded = _encode_events(events, 0, 0, set())
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
    _optional_id(value.event_id, "forked_from.event_id")
    if type(value.version) is not int or value.version < 1:
        raise InvalidInputError(f"forked_from.version must be an int >= 1, not {value.version!r}")
    return value


_NO_IDS: frozenset[str] = frozenset()


def _encode_events(
    events: list[Event], start: int, keep: int, known: set[str] | frozenset[str]
) -> list[EventRecord]:
    """Check and encode ``events[start:]``, stored from position *keep* on.

    *known* holds the ids of the events kept before them; it is not modified.
    """
    added: set[str] = set()
    encoded = []
    for index in range(start, len(events)):
        event = events[index]
        if not isinstance(event, Event):
            raise InvalidInputError(f"events[{index}] is a {type(event).__name__}, not an Event")
        # An unvalidated id may be unhashable; encode_event names what is wrong with it.
        if type(event.id) is str and (event.id in known or event.id in added):
            raise InvalidInputError(f"events[{index}]: duplicate event id {event.id!r}")
        added.add(event.id)
        encoded.append(encode_event(event, keep + index - start, f"events[{index}]"))
    return encoded


def _aware(what: str, value: object) -> datetime:
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInputError(f"{what} must be a timezone-aware datetime, not {value!r}")
    return value.astimezone(timezone.utc) if value.utcoffset() else value


def backoff_delay(attempt: int, cap: float = 0.05) -> float:
    """A jittered, growing moment (at most *cap* seconds) to wait before retry
    *attempt*, so that contending writers spread out instead of colliding again."""
    return random.uniform(0, min(cap, 0.001 * 2 ** min(attempt, 20)))


async def backoff(attempt: int, cap: float = 0.05) -> None:
    """Sleep `backoff_delay` (used by every retry loop)."""
    await asyncio.sleep(backoff_delay(attempt, cap))


def new_token() -> str:
    """A save's unique token: 128 random bits as 32 hex characters."""
    return os.urandom(16).hex()  # secrets.token_hex(16), minus two calls on every save


def new_lineage() -> str:
    """A new `SessionRecord.lineage`: 64 random bits as 16 hex characters."""
    return secrets.token_hex(8)
