"""The backend's side of `SessionManager`: the hooks a backend implements and what it may use.

`BackendHooks` is the one place the surface is declared: the ``_``-prefixed hooks a
backend implements (`HOOKS`), and the attributes and helpers it may set or call
(`HELPERS`); docs/backend-reference.md renders exactly these (`_reference`), and a
test keeps the two in step. A new hook goes here and in `HOOKS`, then the reference is
regenerated; everything else a subclass inherits from `SessionManager` is the public
API or private to the core.
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from . import _deadline, _diagnosis, _instrumentation, _log
from ._clock import SYSTEM_CLOCK, Clock
from ._codec import PLAIN, Codec
from ._deadline import ErrorRule
from ._errors import (
    BackendLockedError,
    BackendTimeoutError,
    BackendUnavailableError,
    OperationNotSupportedError,
    SessionError,
)
from ._loops import PerLoop
from ._models import SessionSummary
from ._options import ManagerOptions, SchemaTooNewError
from ._records import (
    Capabilities,
    CompactRequest,
    EventRecord,
    ForkRequest,
    LoadedSession,
    RewindRequest,
    SaveRequest,
    SessionRecord,
)
from ._urls import mask_url, scrub_secret

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["HELPERS", "HOOKS", "BackendHooks"]

T = TypeVar("T")

#: The hooks a backend implements: the abstract ones, then those with a default.
HOOKS = (
    "_create",
    "_restore",
    "_load",
    "_save",
    "_delete",
    "_delete_user",
    "_list",
    "_open",
    "_close",
    "_load_since",
    "_compact",
    "_archived",
    "_purge_expired",
    "_diagnose",
    "_fork",
    "_rewind",
    "_list_forks",
)
#: What a backend may set, read or call (besides the hooks): class attributes first.
HELPERS = (
    "Options",
    "options",
    "driver_query_params",
    "driver_errors",
    "capabilities",
    "clock",
    "db_system",
    "default_port",
    "_url",
    "url",
    "per_loop",
    "_remaining",
    "_unavailable",
    "_timed_out",
    "_locked_out",
    "_translate",
    "_quietly",
    "_expiry",
    "_migrations_applied",
)


class BackendHooks(abc.ABC):
    """What a backend implements (the hooks) and what it may use (the helpers).

    `SessionManager` derives from it; a backend derives from `SessionManager`.
    """

    #: The options model; a backend subclasses `ManagerOptions` to add its own (and
    #: re-declares ``options`` with that type for the type checker).
    Options: ClassVar[type[ManagerOptions]] = ManagerOptions
    #: This manager's validated options, an instance of `Options` (set by ``__init__``).
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
    #: The engine's OpenTelemetry ``db.system.name`` ("" means the URL scheme).
    db_system: ClassVar[str] = ""
    #: A server backend's default port: set, it makes instrumentation report the
    #: URL's host, port and database (``server.address``, ...). None: an embedded engine.
    default_port: ClassVar[int | None] = None
    #: The URL as given (password included): for the driver only; show `url` instead.
    _url: str
    # The core's own state, set by `SessionManager.__init__` (not for backends).
    _opened: bool = False
    _per_loop: PerLoop[Any] | None = None
    _codec: Codec = PLAIN

    # -- helpers for backends ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The URL this manager connects to, password masked."""
        return mask_url(self._url)

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

    def _expiry(self, now: datetime) -> datetime | None:
        """The ``expires_at`` of a session written at *now*: ``now + ttl``, or None."""
        ttl = self.options.ttl
        return None if ttl is None else now + timedelta(seconds=ttl)

    def _unavailable(
        self,
        exc: BaseException,
        kind: type[BackendUnavailableError] = BackendUnavailableError,
    ) -> BackendUnavailableError:
        """A *kind* error for *exc*, with every trace of the password masked."""
        reason = scrub_secret(f"{type(exc).__name__}: {exc}", self._url)
        if issubclass(kind, BackendTimeoutError):
            error: BackendUnavailableError = self._timed_out(f"the driver gave up first: {reason}")
        else:
            error = kind(self.url, reason)
        if self._opened:
            _instrumentation.connection_lost(cast("SessionManager", self), error)
        return error

    def _timed_out(self, reason: str) -> BackendTimeoutError:
        """A `BackendTimeoutError` for the running call, saying why in *reason*."""
        operation, timeout = _deadline.current_operation(cast("SessionManager", self)) or (
            "call",
            self.options.timeout,
        )
        return BackendTimeoutError(self.url, operation, timeout, reason)

    def _locked_out(self, wait: float, reason: str) -> BackendLockedError:
        """A `BackendLockedError` for the running call: it waited *wait* seconds for a
        lock another connection or process held, and wrote nothing; *reason* says which."""
        operation, timeout = _deadline.current_operation(cast("SessionManager", self)) or (
            "call",
            self.options.timeout,
        )
        return BackendLockedError(self.url, operation, timeout, wait, reason)

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
        return _deadline.remaining(cast("SessionManager", self), cap)

    def _migrations_applied(self, from_version: int, to_version: int) -> None:
        """Log that `_open` migrated the schema (operators want to know when); nothing
        when *from_version* was already *to_version*, so call it after every check."""
        if from_version < to_version:
            _log.migrations_applied(cast("SessionManager", self), from_version, to_version)

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

    async def _diagnose(self, now: datetime) -> list[_diagnosis.Finding]:
        """The backend's own `agentsessions.backend.Finding`s about its server's settings.

        Read the settings that decide whether the engine keeps what it acknowledged
        (durability, eviction, replication, schema version, the clock: see
        `agentsessions.backend.clock_skew`; encryption at rest: see
        `agentsessions.backend.encryption_at_rest`) and return one finding per check,
        "ok" ones included. Read-only: change no setting; write at most one probe key or row in
        the manager's namespace and remove it. The default says the backend has none.

        Raises:
            BackendUnavailableError: the engine failed.
        """
        return [
            _diagnosis.finding(
                "backend.checks",
                "info",
                f"{type(self).__name__} has no checks of its own",
                "its server's durability settings were not checked",
                "ask the backend's authors for a _diagnose hook",
            )
        ]

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
