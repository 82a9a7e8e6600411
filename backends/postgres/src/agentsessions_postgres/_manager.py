"""`PostgresSessionManager`: sessions in PostgreSQL through an asyncpg pool.

Round trips: a load is one statement, a save is one statement (version check, record,
truncation and all new events in one batched insert), a create is one statement.
Deletes run two statements in a transaction (see `_delete`). The pool keeps no session
state on its connections, so it skips asyncpg's per-release reset query.

Deadlines: every wait is bounded by what is left of the call's deadline (pool wait,
connect, each statement), and a connection whose statement was cancelled or timed out
is terminated at once (its socket closed) rather than cancelled politely: asyncpg's
polite path sends a cancel request and waits for the server's reply, which a frozen
or silent server never sends. The server rolls back whatever the dropped connection
had open.

High availability: with several hosts and ``target_session_attrs=read-write`` in the
URL, asyncpg connects to whichever host is the primary. A server that refuses a write
as read-only (a standby, a demoted or fenced primary) makes the pool drop every
connection, so the next ones go through that choice again, and the write is sent
once more (it wrote nothing). Every new connection checks the schema version, so a
promoted standby that lacks a migration (lost with an asynchronous failover) is
migrated before it is used.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager, suppress
from datetime import datetime
from functools import wraps
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

import asyncpg
from agentsessions import (
    BackendAuthenticationError,
    BackendReadOnlyError,
    BackendTimeoutError,
    DatabaseNotFoundError,
    ForkOrigin,
    InvalidInputError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSummary,
)
from agentsessions.backend import (
    Capabilities,
    CompactRequest,
    ErrorRule,
    EventRecord,
    Finding,
    ForkRequest,
    LoadedSession,
    ManagerOptions,
    RewindRequest,
    SaveRequest,
    SessionManager,
    SessionRecord,
    decode_events,
    encode_record,
    fork_fields,
    fork_origin,
    parse_server_url,
    refused,
)

from . import _diagnosis
from ._options import DRIVER_QUERY_PARAMS, PostgresOptions, check_url
from ._schema import (
    LATEST_VERSION,
    OTHER_LIFE,
    SOUND_STATISTICS,
    compact_statement,
    list_forks_statement,
    list_statement,
    migrate,
    rewind_statement,
    save_statement,
    statements,
)

__all__ = ["PostgresSessionManager"]

#: What the driver raises when the server is gone, refuses us, times out, or fails a
#: statement: all of it reaches the caller as `BackendUnavailableError`, password masked.
#: ``asyncio.TimeoutError`` is ``TimeoutError`` (an ``OSError``) only from Python 3.11,
#: hence first.
_DRIVER_ERRORS = (
    ErrorRule((asyncio.TimeoutError,), BackendTimeoutError),
    ErrorRule(
        (asyncpg.InvalidPasswordError, asyncpg.InvalidAuthorizationSpecificationError),
        BackendAuthenticationError,
    ),
    ErrorRule((asyncpg.InvalidCatalogNameError,), DatabaseNotFoundError),
    # A write sent to a standby, or no host of the URL matching target_session_attrs.
    ErrorRule(
        (asyncpg.ReadOnlySQLTransactionError, asyncpg.exceptions.TargetServerAttributeNotMatched),
        BackendReadOnlyError,
    ),
    ErrorRule(
        (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
            OSError,
        )
    ),
)

if TYPE_CHECKING:
    from asyncpg.pool import PoolConnectionProxy

    _Connection = PoolConnectionProxy[Any] | asyncpg.Connection[Any]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: Errors meaning "this connection is dead" (the server restarted, a proxy dropped it),
#: as opposed to "this statement failed".
_CONNECTION_LOST = (
    asyncpg.PostgresConnectionError,
    asyncpg.AdminShutdownError,
    asyncpg.InterfaceError,
    ConnectionError,
)
#: What leaves a statement in flight on a connection: it is terminated, not reused.
_ABANDONED = (
    asyncio.CancelledError,
    asyncio.TimeoutError,
    OSError,
    asyncpg.exceptions.InternalClientError,
    *_CONNECTION_LOST,
)

# Expired sessions are deleted this many per transaction, so a purge holds few row
# locks at a time and never stalls normal traffic for long.
PURGE_BATCH = 500
# While the tables' statistics are too thin for plans kept per connection, the loads
# are sent in their plain form and the statistics read again after this many seconds.
_STATISTICS_RECHECK = 30.0
# A save statement that cannot tell whether it lost a race is run again (see
# `save_statement`); a race needs a concurrent commit, so a few runs settle it.
_SAVE_ATTEMPTS = 8


def _write(
    method: Callable[Concatenate[PostgresSessionManager, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[PostgresSessionManager, _P], Coroutine[Any, Any, _R]]:
    """A write sent once more when a read-only server refused it.

    A refusal means nothing was written, and `_connection` has made the pool drop its
    connections, so the second attempt connects afresh and lands on the primary if one
    of the URL's hosts is it now (a standby promoted in a failover). Once only: with no
    primary in reach, the caller gets `BackendReadOnlyError`.
    """

    @wraps(method)
    async def write(manager: PostgresSessionManager, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return await method(manager, *args, **kwargs)
        except asyncpg.ReadOnlySQLTransactionError:
            pass
        return await method(manager, *args, **kwargs)

    return write


async def _keep_session(connection: asyncpg.Connection[Any]) -> None:
    """Pool reset hook: nothing to reset.

    The manager never changes session state (no SET, LISTEN, cursors or session-level
    advisory locks), so asyncpg's default reset query would be a wasted round trip on
    every release. An open transaction is still rolled back by asyncpg before this runs.
    """


class PostgresSessionManager(SessionManager):
    """Sessions in PostgreSQL: ``connect("postgresql://user:pw@host:5432/db?schema=app")``."""

    Options: ClassVar[type[ManagerOptions]] = PostgresOptions
    driver_errors = _DRIVER_ERRORS
    driver_query_params: ClassVar[frozenset[str]] = DRIVER_QUERY_PARAMS
    capabilities = Capabilities(
        persistent=True, shared=True, ttl=True, namespaces=True, compaction=True, branching=True
    )
    db_system = "postgresql"
    default_port = 5432

    options: PostgresOptions

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        check_url(url)  # a malformed URL fails at connect(), not at first use
        self._ns = self.options.namespace
        self._sql = statements(self.options.schema)
        # Whether the loads go in their generic form (see `_generic_loads`).
        self._generic = False
        self._statistics_due = 0.0
        # asyncpg connections belong to the loop that opened them (using one from
        # another loop can crash the process), so each event loop gets its own pool.
        self._pools = self.per_loop(
            self._new_pool, asyncpg.Pool.close, asyncpg.Pool.terminate, prepare=self._prepare
        )

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def _pool(self) -> asyncpg.Pool[Any]:
        return self._pools.current()

    async def _new_pool(self) -> asyncpg.Pool[Any]:
        opts = self.options
        # command_timeout is the backstop for statements asyncpg sends on its own; ours
        # each get what is left of the call's deadline.
        connect_kwargs: dict[str, Any] = {
            "timeout": opts.bounded(opts.connect_timeout),
            "command_timeout": opts.timeout,
        }
        if opts.pgbouncer:
            # A transaction-pooling proxy hands each transaction to any server
            # connection: named prepared statements would be missing on the next one,
            # and startup parameters are refused, so the timeout is enforced here.
            connect_kwargs["statement_cache_size"] = 0
            if opts.statement_timeout is not None:
                connect_kwargs["command_timeout"] = opts.bounded(opts.statement_timeout)
        elif opts.statement_timeout is not None:
            millis = max(1, round(opts.statement_timeout * 1000))
            connect_kwargs["server_settings"] = {"statement_timeout": str(millis)}
        # asyncpg terminates whatever it had connected when this fails; the next call
        # opens afresh, so a server that was down at first use is no obstacle later.
        # Every new connection checks the schema (init): after a failover the new
        # primary may lack a migration that never reached it.
        pool: asyncpg.Pool[Any] = await asyncpg.create_pool(
            self._url,
            min_size=opts.min_pool_size,
            max_size=opts.max_pool_size,
            reset=_keep_session,
            init=self._migrate,
            **connect_kwargs,
        )
        return pool

    async def _prepare(self, pool: asyncpg.Pool[Any]) -> None:
        # The schema is checked by every connection as it opens (init=_migrate); this
        # makes one even with min_pool_size=0, so that open() fails on a schema it
        # cannot use. It also reads the tables' statistics once (see `_generic_loads`).
        async with self._connection(pool) as connection:
            if not self._generic:
                self._statistics_read(
                    await connection.fetchval(
                        self._sql.statistics_sound, SOUND_STATISTICS, timeout=self._remaining()
                    )
                )

    async def _migrate(self, connection: _Connection) -> None:
        """Pool init: bring the schema to `LATEST_VERSION` (see `migrate`)."""
        found = await migrate(connection, self.options.schema, self._transaction)
        self._migrations_applied(found, LATEST_VERSION)

    async def _diagnose(self, now: datetime) -> list[Finding]:
        parts = parse_server_url(self._url, multi_host=True)
        hosts = max(len(parts.hosts), len(parts.query.get("host", "").split(",")))
        opts = self.options

        def open_connection() -> Awaitable[asyncpg.Connection[Any]]:
            # Connections of its own, outside the pool, without named prepared
            # statements: the probe must work whatever the option says.
            return asyncpg.connect(
                self._url, statement_cache_size=0, timeout=opts.bounded(opts.connect_timeout)
            )

        async with self._connection() as connection:
            found = await _diagnosis.diagnose(
                connection,
                opts.schema,
                hosts,
                opts.max_pool_size,
                opts.pgbouncer,
                open_connection,
            )
        return [*found, _diagnosis.encryption(self.encryption is not None)]

    @asynccontextmanager
    async def _connection(
        self, pool: asyncpg.Pool[Any] | None = None
    ) -> AsyncIterator[_Connection]:
        """A pooled connection, waited for no longer than the call's deadline.

        A connection left with a statement in flight (cancelled, timed out, died) is
        terminated, never handed out again. The pool replaces a connection it finds
        closed. A dead connection it has not noticed yet (the server restarted while
        the connection sat idle) fails once; then every pooled connection is presumed
        as dead as that one and replaced on its next use, so the pool does not serve
        its stale connections one failure at a time. *pool*: the running loop's.
        """
        pool = self._pool if pool is None else pool
        # No timeout of asyncpg's own: the call's deadline cancels the wait anyway, and
        # with one asyncpg wraps every acquire in asyncio.wait_for (a task of its own
        # and an extra pass of the event loop, twice per agent turn).
        connection = await pool.acquire()
        try:
            yield connection
        except _ABANDONED as exc:
            with suppress(asyncpg.InterfaceError):  # asyncpg already released a dead one
                connection.terminate()
            if isinstance(exc, _CONNECTION_LOST):
                await pool.expire_connections()
            raise
        except asyncpg.ReadOnlySQLTransactionError:
            # Connected to a server that is (now) read-only: every pooled connection
            # is presumed to be, and replaced through target_session_attrs.
            await pool.expire_connections()
            raise
        finally:
            with suppress(Exception):  # a failed release has terminated the connection
                await pool.release(connection, timeout=self._remaining())

    @asynccontextmanager
    async def _transaction(self, connection: _Connection) -> AsyncIterator[None]:
        """BEGIN ... COMMIT, each statement under the deadline.

        Not asyncpg's ``connection.transaction()``: on a cancellation it sends a
        ROLLBACK with no time limit, which hangs on a frozen server. Here an abandoned
        transaction is left to `_connection`, which terminates the connection (the
        server rolls back); only an ordinary failure is rolled back politely.
        """
        await connection.execute("BEGIN", timeout=self._remaining())
        try:
            yield
        except _ABANDONED:
            raise
        except BaseException:
            await connection.execute("ROLLBACK", timeout=self._remaining())
            raise
        await connection.execute("COMMIT", timeout=self._remaining())

    async def _read(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        """Run a read-only statement, once more on a fresh connection if the first died.

        Only reads are retried, and only for a dead connection: a write whose
        connection died may have committed, and repeating it would report a conflict
        with itself; a statement that failed on a live connection would fail again.
        """
        try:
            async with self._connection() as connection:
                return await connection.fetch(sql, *args, timeout=self._remaining())
        except _CONNECTION_LOST:
            pass
        async with self._connection() as connection:
            return await connection.fetch(sql, *args, timeout=self._remaining())

    # -- the contract -------------------------------------------------------------------

    @_write
    async def _create(self, record: SessionRecord, now: datetime) -> None:
        sql, args = self._sql, (self._ns, *encode_record(record))
        async with self._connection() as connection:
            while True:
                if await connection.fetchval(sql.insert_session, *args, timeout=self._remaining()):
                    return
                # The id is taken. Replacing an expired session also drops its events,
                # in a second statement so that it sees every event ever committed.
                async with self._transaction(connection):
                    if await connection.fetchval(sql.replace_expired, *args):
                        await connection.execute(sql.delete_events, self._ns, record.session_id)
                        await connection.execute(sql.delete_archive, self._ns, record.session_id)
                        return
                    if await connection.fetchval(sql.session_exists, self._ns, record.session_id):
                        raise SessionExistsError(record.session_id)
                # Deleted between our two statements: try the insert again.

    @_write
    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        sql = self._sql
        session_id = record.session_id
        async with self._connection() as connection, self._transaction(connection):
            # An insert, or the replacement of an expired session; a live one makes the
            # upsert's WHERE false and returns no row. The row lock it takes keeps the
            # session invisible to others until the events are in too.
            replaced = await connection.fetchval(
                sql.restore_session, self._ns, *encode_record(record), now, *fork_fields(record)
            )
            if replaced is None:
                raise SessionExistsError(session_id)
            if replaced:
                await connection.execute(sql.delete_events, self._ns, session_id)
                await connection.execute(sql.delete_archive, self._ns, session_id)
            if events:
                await connection.execute(
                    sql.restore_events, self._ns, session_id, [event.data for event in events]
                )

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        sql = self._sql
        generic = await self._generic_loads()
        if last_events is None:
            statement = sql.generic_load_all if generic else sql.load_all
            rows = await self._read(statement, self._ns, session_id, now)
        elif last_events == 0:
            statement = sql.generic_load_record if generic else sql.load_record
            rows = await self._read(statement, self._ns, session_id, now)
        else:
            statement = sql.generic_load_last if generic else sql.load_last
            rows = await self._read(statement, self._ns, session_id, now, last_events)
        return _loaded(rows)

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        generic = await self._generic_loads()
        statement = self._sql.generic_load_since if generic else self._sql.load_since
        rows = await self._read(statement, self._ns, session_id, now, event_count, lineage)
        return _loaded(rows)

    async def _generic_loads(self) -> bool:
        """Whether to send the loads in the form planned once per connection.

        Only once both tables' statistics count `SOUND_STATISTICS` rows: a plan made on
        the statistics of a new, near-empty store would be kept by each connection and
        scan the grown table at every load. Until then the plain form is planned at
        every call, on the table as it is, and the statistics are read again every
        `_STATISTICS_RECHECK` seconds (autovacuum or an ANALYZE refreshes them), so at
        most one extra statement that often. Once past, for the manager's life: the
        tables of a store in use do not shrink back to a few rows (an emptied table that
        is analyzed again would have its loads planned on those statistics, as the saves
        always are).
        """
        if self._generic:
            return True
        if time.monotonic() < self._statistics_due:
            return False
        rows = await self._read(self._sql.statistics_sound, SOUND_STATISTICS)
        return self._statistics_read(bool(rows and rows[0][0]))

    def _statistics_read(self, sound: object) -> bool:
        """Record a reading of `Statements.statistics_sound`; the next one is due in
        `_STATISTICS_RECHECK` seconds (none once sound)."""
        self._generic = bool(sound)
        self._statistics_due = time.monotonic() + _STATISTICS_RECHECK
        return self._generic

    @_write
    async def _save(self, request: SaveRequest, now: datetime) -> None:
        record, new_events, truncate = request.record, request.new_events, request.truncates
        insert = bool(new_events)
        sql = save_statement(
            self.options.schema, truncate=truncate, insert=insert, upsert=truncate and insert
        )
        args: list[Any] = [
            self._ns,
            record.session_id,
            request.expected_version,
            now,
            record.state,
            record.version,
            record.expires_at,
            record.event_count,
            request.token,
            record.lineage,
            request.expected_lineage,
        ]
        if new_events:
            args += [request.keep, [event.data for event in new_events]]
        await self._checked_write(sql, args, request)

    @_write
    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        sql = compact_statement(self.options.schema, archive=request.archive)
        args: list[Any] = [
            self._ns,
            request.session_id,
            request.expected_version,
            now,
            request.version,
            request.updated_at,
            request.expires_at,
            request.event_count,
            request.token,
            request.replaced - len(request.new_events),
            [event.data for event in request.new_events],
            request.lineage,
            request.expected_lineage,
        ]
        if request.archive:
            args.append(request.replaced)
        await self._checked_write(sql, args, request)

    @_write
    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        sql, ns = self._sql, self._ns
        source_id, new_id = request.source_id, request.session_id
        async with self._connection() as connection, self._transaction(connection):
            # FOR SHARE: a save of the source waits until the copy is committed, so the
            # fork is the one version read here, whatever the isolation level.
            row = await connection.fetchrow(sql.fork_source, ns, source_id, now)
            if row is None:
                raise SessionNotFoundError(source_id)
            owner, state, version, count, first = row
            if request.user_id is not None and owner != request.user_id:
                raise SessionOwnershipError(source_id, request.user_id)
            if request.through_event_id is not None:
                position = await connection.fetchval(
                    sql.find_event, ns, source_id, request.through_event_id
                )
                if position is None:
                    raise InvalidInputError(
                        f"session {source_id!r} holds no event with id {request.through_event_id!r}"
                    )
                count = position - first + 1
            record = SessionRecord(
                session_id=new_id,
                user_id=owner,
                state=state if request.state is None else request.state,
                version=1,
                created_at=request.created_at,
                updated_at=request.created_at,
                expires_at=request.expires_at,
                event_count=count,
                lineage=request.lineage,
                forked_from=ForkOrigin(
                    session_id=source_id, version=version, event_id=request.through_event_id
                ),
            )
            replaced = await connection.fetchval(
                sql.restore_session, ns, *encode_record(record), now, *fork_fields(record)
            )
            if replaced is None:
                raise SessionExistsError(new_id)
            if replaced:
                await connection.execute(sql.delete_events, ns, new_id)
                await connection.execute(sql.delete_archive, ns, new_id)
            if count:
                await connection.execute(
                    sql.copy_events, ns, new_id, first, source_id, first + count
                )
        return record

    @_write
    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        sql = rewind_statement(self.options.schema, archive=request.archive)
        args: list[Any] = [
            self._ns,
            request.session_id,
            request.expected_version,
            now,
            request.version,
            request.updated_at,
            request.expires_at,
            request.event_count,
            request.token,
            request.lineage,
            request.expected_lineage,
        ]
        await self._checked_write(sql, args, request)

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        sql = list_forks_statement(
            self.options.schema, by_user=user_id is not None, paged=after is not None
        )
        args: list[Any] = [self._ns, now, limit, source_id]
        if user_id is not None:
            args.append(user_id)
        if after is not None:
            args.extend(after)
        return [_summary(row) for row in await self._read(sql, *args)]

    async def _checked_write(
        self, sql: str, args: list[Any], request: SaveRequest | CompactRequest | RewindRequest
    ) -> None:
        """Run a save or compaction statement; its outcome is `save_statement`'s."""
        async with self._connection() as connection:
            for _ in range(_SAVE_ATTEMPTS):
                outcome = await connection.fetchval(sql, *args, timeout=self._remaining())
                if outcome != request.expected_version:
                    break
                # Inconclusive (see save_statement): a fresh statement has a fresh snapshot.
        if outcome != 0:
            live, other_life = outcome != -1, outcome == OTHER_LIFE
            raise refused(request, live=live, stored_version=outcome, other_life=other_life)

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        rows = await self._read(self._sql.load_archive, self._ns, session_id, now)
        return list(rows[0][0]) if rows and rows[0][0] else []

    @_write
    async def _delete(self, session_id: str, now: datetime) -> bool:
        # Two statements in one transaction, not one: the events delete must run after
        # the session row is locked and gone, with a fresh snapshot, or a save that
        # committed meanwhile could leave events behind.
        sql = self._sql
        async with self._connection() as connection, self._transaction(connection):
            live = await connection.fetchval(sql.delete_session, self._ns, session_id, now)
            if live is None:
                return False
            await connection.execute(sql.delete_events, self._ns, session_id)
            await connection.execute(sql.delete_archive, self._ns, session_id)
        return bool(live)

    @_write
    async def _delete_user(self, user_id: str, now: datetime) -> int:
        sql = self._sql
        async with self._connection() as connection, self._transaction(connection):
            rows = await connection.fetch(sql.delete_user_sessions, self._ns, user_id, now)
            if not rows:
                return 0
            ids = [row["session_id"] for row in rows]
            await connection.execute(sql.delete_events_of, self._ns, ids)
            await connection.execute(sql.delete_archive_of, self._ns, ids)
        return sum(1 for row in rows if row["live"])

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        sql = list_statement(
            self.options.schema, by_user=user_id is not None, paged=after is not None
        )
        args: list[Any] = [self._ns, now, limit]
        if user_id is not None:
            args.append(user_id)
        if after is not None:
            args.extend(after)
        return [_summary(row) for row in await self._read(sql, *args)]

    @_write
    async def _purge_expired(self, now: datetime) -> int:
        sql = self._sql
        purged = 0
        while True:
            async with self._connection() as connection, self._transaction(connection):
                ids = [
                    row[0]
                    for row in await connection.fetch(sql.purge_batch, self._ns, now, PURGE_BATCH)
                ]
                if ids:
                    await connection.execute(sql.delete_events_of, self._ns, ids)
                    await connection.execute(sql.delete_archive_of, self._ns, ids)
            purged += len(ids)
            if len(ids) < PURGE_BATCH:
                return purged


def _loaded(rows: list[asyncpg.Record]) -> LoadedSession | None:
    """The session a load statement read (one row), or None when it found none."""
    if not rows:
        return None
    sid, user, state, version, created, updated, expires, count, lineage, *origin, texts = rows[0]
    # ARRAY(... ORDER BY position) keeps the index order without the sort that an
    # ordered aggregate such as string_agg costs (8 ms against 6 ms at 5,000 events);
    # the texts are then decoded in one batch.
    events = decode_events(texts) if texts else []
    record = SessionRecord(
        sid, user, state, version, created, updated, expires, count, lineage, fork_origin(*origin)
    )
    return LoadedSession(record, events)


def _summary(row: asyncpg.Record) -> SessionSummary:
    """A listing row: the summary's six fields, then the fork origin's three."""
    sid, user, created, updated, count, version, *origin = row
    return SessionSummary(sid, user, created, updated, count, version, fork_origin(*origin))
