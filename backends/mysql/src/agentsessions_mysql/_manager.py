"""`MySQLSessionManager`: sessions in MySQL 8 or MariaDB 10.6+ through asyncmy.

Round trips: a load is one packet (a read-only transaction with one consistent
snapshot holding the record's select and the events' select); a create is one
insert. A save, a compaction, a rewind, a restore and the deletes are one transaction
each: the session row is read ``FOR UPDATE`` (the optimistic lock: the version, lineage
and save token are checked in Python while the row is locked), then the row is updated
and the events written, then COMMIT. A fork is one transaction too: the source row read
``LOCK IN SHARE MODE``, the new row inserted, the events copied by ``INSERT ... SELECT``.
MySQL has no data-modifying CTE, so a conditional write in one statement is not
available.

Deadlines: every call runs under the manager's deadline, which cancels it. A
connection left with a statement in flight is closed at once, and the statement is
killed on the server from a side connection (`Pool.abandon`): MySQL would otherwise
go on running it, holding its locks. Deadlocks and lock wait timeouts roll the
transaction back before anything commits, so a write that meets one is run again.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial, wraps
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

import asyncmy
from agentsessions import (
    BackendAuthenticationError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
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
    SchemaTooNewError,
    SessionManager,
    SessionRecord,
    decode_events,
    decode_record,
    decode_summary,
    fork_fields,
    refused,
    to_micros,
)
from asyncmy import Connection
from asyncmy.errors import Error as DriverError
from asyncmy.errors import IntegrityError, InterfaceError, OperationalError

from . import _diagnosis
from ._options import DEFAULT_PORT, MySQLOptions, connect_arguments
from ._pool import Pool
from ._schema import (
    LATEST_VERSION,
    MIGRATIONS,
    STATEMENTS,
    TOKEN_BYTES,
    VERSION_TABLE,
    Guarded,
    in_list,
    insert_events,
    list_statement,
    migration_lock_name,
    snapshot_read,
    unpack_record,
)
from ._wire import INSERT_BUDGET, Batch, code, execute, fetch, lost, snapshot_sets

_LOAD_ALL = snapshot_read(STATEMENTS.load_record, STATEMENTS.events_all)
_LOAD_LAST = snapshot_read(STATEMENTS.load_record, STATEMENTS.events_last)
_LOAD_SINCE = snapshot_read(STATEMENTS.load_record, STATEMENTS.events_since)

__all__ = ["MAX_VALUE_BYTES", "MIN_PACKET", "MySQLSessionManager"]

#: The largest encoded state or event: quoted for the text protocol it may double,
#: and it must fit in one packet with room to spare (see `MIN_PACKET`).
MAX_VALUE_BYTES = 4 * 1024 * 1024
#: The smallest ``max_allowed_packet`` the backend works with: a statement carrying
#: one value of `MAX_VALUE_BYTES`, every byte escaped, and its other parameters.
MIN_PACKET = 2 * MAX_VALUE_BYTES + 1024 * 1024

# Server error codes.
_ACCESS_DENIED = frozenset({1045, 1698})  # wrong password / unknown user, auth plugin refused
_UNKNOWN_DATABASE = frozenset({1049, 1044})  # no such database, or none we may use
_READ_ONLY = frozenset({1290, 1792, 1836})  # --read-only, read-only transaction, replica
_RETRIED = frozenset({1205, 1213})  # lock wait timeout, deadlock: rolled back, retried
_STATEMENT_TIMEOUT = frozenset({1969, 3024})  # MariaDB max_statement_time, MySQL's
_CANNOT_CONNECT = 2003  # the client's CR_CONN_HOST_ERROR

_P = ParamSpec("_P")
_R = TypeVar("_R")
# Generous: a retry is always safe here, and on a loaded server many contenders for one key
# (creates of one id) can deadlock again and again; the call's deadline still bounds it.
_WRITE_ATTEMPTS = 32
_BACKOFF_CAP = 0.1
# Expired sessions are deleted this many per transaction (few row locks at a time).
PURGE_BATCH = 500


def _coded(codes: frozenset[int]) -> Callable[[Any], bool]:
    return lambda exc: code(exc) in codes


_DRIVER_ERRORS = (
    ErrorRule((asyncio.TimeoutError,), BackendTimeoutError),
    ErrorRule((DriverError,), BackendAuthenticationError, when=_coded(_ACCESS_DENIED)),
    ErrorRule((DriverError,), DatabaseNotFoundError, when=_coded(_UNKNOWN_DATABASE)),
    ErrorRule((DriverError,), BackendReadOnlyError, when=_coded(_READ_ONLY)),
    ErrorRule((DriverError,), BackendTimeoutError, when=_coded(_STATEMENT_TIMEOUT)),
    ErrorRule((DriverError, OSError)),
)

#: What leaves a statement in flight, or the connection unusable: it is abandoned.
_ABANDONED = (asyncio.CancelledError, asyncio.TimeoutError, OSError, InterfaceError)


def _write(
    method: Callable[Concatenate[MySQLSessionManager, _P], Coroutine[Any, Any, _R]],
) -> Callable[Concatenate[MySQLSessionManager, _P], Coroutine[Any, Any, _R]]:
    """A write run again when the server rolled it back for a deadlock or a lock wait.

    Both errors come before COMMIT, and `_transaction` rolls back what the statement
    did not, so nothing was written and the retry starts from a fresh read.
    """

    @wraps(method)
    async def write(manager: MySQLSessionManager, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        for attempt in range(_WRITE_ATTEMPTS - 1):
            try:
                return await method(manager, *args, **kwargs)
            except OperationalError as exc:
                if code(exc) not in _RETRIED:
                    raise
            # Apart, so that the writers that deadlocked do not meet again at once.
            await asyncio.sleep(random.uniform(0, min(_BACKOFF_CAP, 0.002 * 2**attempt)))
        return await method(manager, *args, **kwargs)

    return write


class MySQLSessionManager(SessionManager):
    """Sessions in MySQL or MariaDB: ``connect("mysql://user:pw@host:3306/db")``."""

    Options: ClassVar[type[ManagerOptions]] = MySQLOptions
    driver_errors = _DRIVER_ERRORS
    capabilities = Capabilities(
        persistent=True,
        shared=True,
        ttl=True,
        namespaces=True,
        compaction=True,
        branching=True,
        max_event_bytes=MAX_VALUE_BYTES,
        max_state_bytes=MAX_VALUE_BYTES,
    )
    db_system = "mysql"
    default_port = DEFAULT_PORT

    options: MySQLOptions

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        self._connect_args = connect_arguments(url)  # a bad URL fails at connect()
        self._ns = self.options.namespace.encode()
        # asyncmy connections belong to the loop that opened them: one pool per loop.
        self._pools = self.per_loop(
            self._new_pool, Pool.close, Pool.terminate, prepare=self._migrate
        )

    # -- connections --------------------------------------------------------------------

    async def _new_pool(self) -> Pool:
        opts = self.options
        pool = Pool(
            self._new_connection,
            min_size=opts.min_pool_size,
            max_size=opts.max_pool_size,
            kill_timeout=opts.bounded(opts.connect_timeout),
        )
        try:
            await pool.fill()
        except BaseException:
            pool.terminate()
            raise
        return pool

    async def _new_connection(self) -> Connection:
        opts = self.options
        init = (
            "SET SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ENGINE_SUBSTITUTION', "
            f"innodb_lock_wait_timeout = {int(opts.lock_wait_timeout)}"
        )
        kwargs: dict[str, Any] = {
            **self._connect_args,
            "charset": "utf8mb4",
            "autocommit": True,
            "init_command": init,
            "connect_timeout": max(0.001, self._remaining(opts.connect_timeout)),
            "max_allowed_packet": 1024 * 1024 * 1024,
        }
        if opts.uses_tls:
            kwargs["ssl"] = self._ssl_context()
        # asyncmy's connect_timeout bounds only the TCP connect: a server that accepts
        # and never sends its handshake would hold the call to its whole deadline. The
        # handshake, authentication and init command are bounded by it too (a cancelled
        # connect closes its socket).
        try:
            connection: Connection = await asyncio.wait_for(
                asyncmy.connect(**kwargs), kwargs["connect_timeout"]
            )
        except asyncio.TimeoutError:
            raise OperationalError(
                _CANNOT_CONNECT,
                f"Can't connect to MySQL server on {kwargs.get('host')!r} (no handshake "
                f"within connect_timeout={opts.connect_timeout:g} s)",
            ) from None
        try:
            # A load's snapshot spans its two selects only under REPEATABLE READ (the
            # default, unless the server was configured otherwise).
            await execute(connection, "SET SESSION TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        except BaseException:
            connection.close()
            raise
        return connection

    def _ssl_context(self) -> Any:
        import ssl

        opts = self.options
        context = ssl.create_default_context(cafile=opts.ssl_ca)
        if not opts.ssl_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if opts.ssl_cert is not None:
            context.load_cert_chain(opts.ssl_cert, opts.ssl_key)
        return context

    @asynccontextmanager
    async def _connection(self, pool: Pool | None = None) -> AsyncIterator[Connection]:
        """A pooled connection; abandoned (closed, its statement killed) if a statement
        may still be in flight, and every pooled one expired when it was found dead."""
        pool = self._pools.current() if pool is None else pool
        generation, connection = await pool.acquire()
        try:
            yield connection
        except BaseException as exc:
            if isinstance(exc, _ABANDONED) or lost(exc):
                pool.abandon(connection)
                if lost(exc):
                    pool.expire()
            else:
                pool.release(generation, connection)
            raise
        pool.release(generation, connection)

    @asynccontextmanager
    async def _transaction(self, connection: Connection) -> AsyncIterator[None]:
        """START TRANSACTION ... COMMIT; an ordinary failure is rolled back, an abandoned
        transaction is left to `_connection` (the server rolls back a closed one)."""
        await execute(connection, "START TRANSACTION")
        try:
            yield
        except BaseException as exc:
            if not (isinstance(exc, _ABANDONED) or lost(exc)):
                await execute(connection, "ROLLBACK")
            raise
        await execute(connection, "COMMIT")

    @asynccontextmanager
    async def _batched(self, connection: Connection) -> AsyncIterator[Batch]:
        """A `Batch`, committed on normal exit; rolled back as `_transaction` does."""
        tx = Batch(connection)
        try:
            yield tx
        except BaseException as exc:
            if not (isinstance(exc, _ABANDONED) or lost(exc)):
                await execute(connection, "ROLLBACK")
            raise
        await tx.commit()

    async def _read(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """A read-only statement, once more on a fresh connection if the first was dead."""
        try:
            async with self._connection() as connection:
                return await fetch(connection, sql, args)
        except (OSError, InterfaceError, OperationalError) as exc:
            if not lost(exc):
                raise
        async with self._connection() as connection:
            return await fetch(connection, sql, args)

    async def _diagnose(self, now: datetime) -> list[Finding]:
        async with self._connection() as connection:
            read = partial(fetch, connection, args=())
            return await _diagnosis.diagnose(
                read, MIN_PACKET, self.options.max_pool_size, self.encryption is not None
            )

    # -- schema -------------------------------------------------------------------------

    async def _migrate(self, pool: Pool) -> None:
        """Bring the database to `LATEST_VERSION`, exactly once across racing managers.

        Already migrated (the common case): two reads, no lock. Otherwise ``GET_LOCK``
        serialises the managers starting at once: the first applies the migrations,
        the others wait, then find them applied. Also checks ``max_allowed_packet``.
        """
        async with self._connection(pool) as connection:
            packet = (await fetch(connection, "SELECT @@max_allowed_packet", ()))[0][0]
            if int(packet) < MIN_PACKET:
                raise BackendUnavailableError(
                    self.url,
                    f"the server's max_allowed_packet is {int(packet)} bytes; this backend "
                    f"needs at least {MIN_PACKET} (SET GLOBAL max_allowed_packet = 16777216)",
                )
            found = await self._schema_version(connection)
            if found == LATEST_VERSION:
                self._migrations_applied(found, LATEST_VERSION)
                return
            lock = migration_lock_name(self._connect_args["db"])
            wait = max(1, int(self._remaining()))
            got = (await fetch(connection, "SELECT GET_LOCK(%s, %s)", (lock, wait)))[0][0]
            if got != 1:
                raise asyncio.TimeoutError("waited too long for the migration lock")
            # No notes while migrating: asyncmy logs every note of a statement at WARNING
            # ("Table ... already exists" from an IF NOT EXISTS another manager made
            # true), which reaches an application's stderr when it configured no logging.
            # The connection goes back to the pool, so its own setting is restored.
            notes = (await fetch(connection, "SELECT @@session.sql_notes", ()))[0][0]
            await execute(connection, "SET SESSION sql_notes = 0")
            try:
                await execute(connection, VERSION_TABLE)
                found = await self._schema_version(connection)
                for version in sorted(MIGRATIONS):
                    if version <= found:
                        continue
                    for step in MIGRATIONS[version]:
                        if isinstance(step, Guarded):
                            if (await fetch(connection, step.probe, ()))[0][0]:
                                continue  # applied before its version was recorded
                            step = step.ddl
                        await execute(connection, step)
                    await execute(
                        connection,
                        STATEMENTS.record_version,
                        (version, to_micros(self.clock.now())),
                    )
            finally:
                await execute(connection, "DO RELEASE_LOCK(%s)", (lock,))
                await execute(connection, "SET SESSION sql_notes = %s", (int(notes),))
        self._migrations_applied(found, LATEST_VERSION)

    async def _schema_version(self, connection: Connection) -> int:
        if not (await fetch(connection, STATEMENTS.schema_exists, ()))[0][0]:
            return 0
        found = int((await fetch(connection, STATEMENTS.current_version, ()))[0][0] or 0)
        if found > LATEST_VERSION:
            raise SchemaTooNewError(found, LATEST_VERSION, f"database {self._connect_args['db']!r}")
        return found

    # -- the contract -------------------------------------------------------------------

    def _row(self, record: SessionRecord) -> tuple[Any, ...]:
        fork_source, fork_version, fork_event = fork_fields(record)
        return (
            self._ns,
            record.session_id.encode(),
            _bytes(record.user_id),
            record.state,
            record.version,
            to_micros(record.created_at),
            to_micros(record.updated_at),
            _micros(record.expires_at),
            record.event_count,
            record.lineage,
            _bytes(fork_source),
            fork_version,
            _bytes(fork_event),
        )

    async def _replace(
        self, connection: Connection, row: tuple[Any, ...], key: tuple[bytes, bytes]
    ) -> None:
        """Overwrite a locked expired session with *row* and drop its events and archive."""
        await execute(connection, STATEMENTS.replace_session, (*row[2:], *key))
        await execute(connection, STATEMENTS.delete_events, key)
        await execute(connection, STATEMENTS.delete_archive, key)

    @_write
    async def _create(self, record: SessionRecord, now: datetime) -> None:
        row = self._row(record)
        key = (self._ns, row[1])
        async with self._connection() as connection:
            try:  # the common case: one statement, autocommitted
                await execute(connection, STATEMENTS.insert_session, row)
                return
            except IntegrityError as exc:
                if code(exc) != 1062:  # duplicate key: the id is taken
                    raise
            while True:
                async with self._transaction(connection):
                    if await self._insert_or_replace(connection, row, key, now):
                        return

    @_write
    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        row = self._row(record)
        key = (self._ns, row[1])
        async with self._connection() as connection:
            while True:
                async with self._transaction(connection):
                    # The insert first: a locking read of an absent row would take a
                    # gap lock, and concurrent restores of neighbouring ids deadlock
                    # on those; inserts of distinct keys never wait for each other.
                    if not await self._insert_or_replace(connection, row, key, now):
                        continue  # deleted between our two statements: again
                    await self._insert(
                        partial(execute, connection), key, 0, [e.data for e in events]
                    )
                    return

    async def _insert_or_replace(
        self, connection: Connection, row: tuple[Any, ...], key: tuple[bytes, bytes], now: datetime
    ) -> bool:
        """Insert the session row, or replace an expired one (`SessionExistsError` for a
        live one); False when the row that blocked the insert is gone (try again)."""
        try:
            await execute(connection, STATEMENTS.insert_session, row)
            return True
        except IntegrityError as exc:
            if code(exc) != 1062:  # duplicate key: the id is taken
                raise
        found = await fetch(connection, STATEMENTS.lock_session, key)
        if not found:
            return False
        if not _expired(found[0][2], now):
            raise SessionExistsError(_text(key[1]))
        await self._replace(connection, row, key)
        return True

    async def _insert(
        self,
        run: Callable[[str, Sequence[Any]], Awaitable[Any]],
        key: tuple[bytes, bytes],
        first: int,
        texts: list[str],
    ) -> None:
        """Insert *texts* at positions from *first*, in statements of bounded size."""
        start = 0
        while start < len(texts):
            end, size = start, 0
            while end < len(texts) and (end == start or size + len(texts[end]) <= INSERT_BUDGET):
                size += len(texts[end])
                end += 1
            args: list[Any] = []
            for offset, text in enumerate(texts[start:end]):
                args += (*key, first + start + offset, text)
            await run(insert_events(end - start), args)
            start = end

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        key = (self._ns, session_id.encode())
        live = (*key, to_micros(now))
        if last_events == 0:
            return _loaded(await self._read(STATEMENTS.load_record, live), [])
        # One statement first; no rows (absent, expired, or no events) or a record not
        # on the first row (never, unless the stored positions have a gap) take the
        # two-select load, which tells those apart.
        if last_events is None:
            rows = await self._read(STATEMENTS.joined_all, live)
        else:
            rows = await self._read(STATEMENTS.joined_last, (*live, last_events))
        if rows and rows[0][0] is not None:
            record = decode_record(unpack_record(key[1], rows[0][0]))
            ordered = rows if last_events is None else reversed(rows)
            return LoadedSession(record, decode_events([bytes(row[1]) for row in ordered]))
        if last_events is None:
            record_rows, events = await self._snapshot(_LOAD_ALL, (*live, *key))
        else:
            record_rows, events = await self._snapshot(_LOAD_LAST, (*live, *key, last_events))
            events.reverse()
        return _loaded(record_rows, events)

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        key = (self._ns, session_id.encode())
        args = (*key, to_micros(now), lineage, event_count, event_count, *key)
        return _loaded(*await self._snapshot(_LOAD_SINCE, args))

    async def _snapshot(
        self, sql: str, args: Sequence[Any]
    ) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        """The record rows and event rows of a `snapshot_read` load (one round trip)."""
        try:
            async with self._connection() as connection:
                return await snapshot_sets(connection, sql, args)
        except (OSError, InterfaceError, OperationalError) as exc:
            if not lost(exc):
                raise
        async with self._connection() as connection:
            return await snapshot_sets(connection, sql, args)

    async def _rewrite(
        self,
        request: SaveRequest | CompactRequest | RewindRequest,
        now: datetime,
        write: Callable[[Batch, tuple[bytes, bytes], int, bytes], Awaitable[None]],
    ) -> None:
        """Run *write* (batch, key, first position, token) in one batched transaction
        holding the session row's lock, unless the token shows the write landed before."""
        key = (self._ns, request.session_id.encode())
        async with self._connection() as connection, self._batched(connection) as tx:
            locked = await self._locked(tx, key, request, now)
            if locked is not None:
                await write(tx, key, *locked)

    async def _locked(
        self,
        tx: Batch,
        key: tuple[bytes, bytes],
        request: SaveRequest | CompactRequest | RewindRequest,
        now: datetime,
    ) -> tuple[int, bytes] | None:
        """Lock the session row and check *request* against it: its first position and
        the token to store, or None when the token is stored (the save landed before)."""
        token = request.token.encode()
        found = await tx.fetch(STATEMENTS.lock_for_write, (token, token, *key))
        if found:
            version, lineage, expires, first, tokens = found[0]
            if tokens is not None and token in _tokens(bytes(tokens)):
                return None
            if not _expired(expires, now):
                if request.expects(int(version), _text(lineage)):
                    return int(first), token
                raise refused(
                    request,
                    live=True,
                    stored_version=int(version),
                    other_life=int(version) == request.expected_version,
                )
        raise refused(request, live=False)

    @_write
    async def _save(self, request: SaveRequest, now: datetime) -> None:
        record = request.record

        async def write(tx: Batch, key: tuple[bytes, bytes], first: int, token: bytes) -> None:
            await tx.execute(
                STATEMENTS.update_saved,
                (
                    record.state,
                    record.version,
                    to_micros(record.updated_at),
                    _micros(record.expires_at),
                    record.event_count,
                    token,
                    record.lineage,
                    *key,
                ),
            )
            if request.truncates:
                await tx.execute(STATEMENTS.delete_events_from, (*key, first + request.keep))
            if request.new_events:
                texts = [event.data for event in request.new_events]
                await self._insert(tx.execute, key, first + request.keep, texts)

        await self._rewrite(request, now, write)

    @_write
    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        async def write(tx: Batch, key: tuple[bytes, bytes], first: int, token: bytes) -> None:
            cut = first + request.replaced  # the first stored position that stays
            new_first = cut - len(request.new_events)
            if request.archive:
                await tx.execute(
                    STATEMENTS.archive_events,
                    (request.expected_version, first, *key, cut),
                )
            await tx.execute(STATEMENTS.delete_events_below, (*key, cut))
            await self._insert(
                tx.execute, key, new_first, [event.data for event in request.new_events]
            )
            await tx.execute(
                STATEMENTS.update_compacted,
                (
                    request.version,
                    to_micros(request.updated_at),
                    _micros(request.expires_at),
                    request.event_count,
                    token,
                    new_first,
                    request.lineage,
                    *key,
                ),
            )

        await self._rewrite(request, now, write)

    @_write
    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        source_id, new_id = request.source_id, request.session_id
        source = (self._ns, source_id.encode())
        async with self._connection() as connection:
            while True:
                async with self._transaction(connection):
                    # Share-locked: a save of the source waits until the copy commits,
                    # so the fork is the one version read here.
                    found = await fetch(
                        connection, STATEMENTS.fork_source, (*source, to_micros(now))
                    )
                    if not found:
                        raise SessionNotFoundError(source_id)
                    owner, state, version, count, first = found[0]
                    owner = None if owner is None else _text(owner)
                    if request.user_id is not None and owner != request.user_id:
                        raise SessionOwnershipError(source_id, request.user_id)
                    count, first = int(count), int(first)
                    cut = request.through_event_id
                    if cut is not None:
                        at = await fetch(connection, STATEMENTS.find_event, (*source, cut.encode()))
                        if not at:
                            raise InvalidInputError(
                                f"session {source_id!r} holds no event with id {cut!r}"
                            )
                        count = int(at[0][0]) - first + 1
                    record = SessionRecord(
                        session_id=new_id,
                        user_id=owner,
                        state=_text(state) if request.state is None else request.state,
                        version=1,
                        created_at=request.created_at,
                        updated_at=request.created_at,
                        expires_at=request.expires_at,
                        event_count=count,
                        lineage=request.lineage,
                        forked_from=ForkOrigin(
                            session_id=source_id, version=int(version), event_id=cut
                        ),
                    )
                    key = (self._ns, new_id.encode())
                    if not await self._insert_or_replace(connection, self._row(record), key, now):
                        continue  # deleted between our two statements: again
                    if count:
                        await execute(
                            connection,
                            STATEMENTS.copy_events,
                            (key[1], first, *source, first + count),
                        )
                    return record

    @_write
    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        async def write(tx: Batch, key: tuple[bytes, bytes], first: int, token: bytes) -> None:
            cut = first + request.keep  # the first stored position dropped
            if request.archive:
                await tx.execute(
                    STATEMENTS.archive_tail, (request.expected_version, first, *key, cut)
                )
            await tx.execute(STATEMENTS.delete_events_from, (*key, cut))
            await tx.execute(
                STATEMENTS.update_rewound,
                (
                    request.version,
                    to_micros(request.updated_at),
                    _micros(request.expires_at),
                    request.event_count,
                    token,
                    request.lineage,
                    *key,
                ),
            )

        await self._rewrite(request, now, write)

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        return await self._page(user_id, limit, after, now, forked_from=source_id)

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        key = (self._ns, session_id.encode())
        rows = await self._read(STATEMENTS.load_archive, (*key, *key, to_micros(now)))
        return [_text(row[0]) for row in rows]

    @_write
    async def _delete(self, session_id: str, now: datetime) -> bool:
        key = (self._ns, session_id.encode())
        async with self._connection() as connection, self._transaction(connection):
            found = await fetch(connection, STATEMENTS.session_liveness, (to_micros(now), *key))
            if not found:
                return False
            await execute(connection, STATEMENTS.delete_session, key)
            await execute(connection, STATEMENTS.delete_events, key)
            await execute(connection, STATEMENTS.delete_archive, key)
        return bool(found[0][0])

    @_write
    async def _delete_user(self, user_id: str, now: datetime) -> int:
        args = (to_micros(now), self._ns, user_id.encode())
        async with self._connection() as connection, self._transaction(connection):
            rows = await fetch(connection, STATEMENTS.user_sessions, args)
            await self._erase(connection, [row[0] for row in rows])
        return sum(1 for row in rows if row[1])

    async def _erase(self, connection: Connection, ids: list[bytes]) -> None:
        """Delete the sessions *ids* (locked), their events and their archives."""
        for start in range(0, len(ids), PURGE_BATCH):
            batch = ids[start : start + PURGE_BATCH]
            for table in (
                "agentsessions_sessions",
                "agentsessions_events",
                "agentsessions_archive",
            ):
                await execute(connection, in_list(table, len(batch)), (self._ns, *batch))

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        return await self._page(user_id, limit, after, now)

    async def _page(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
        forked_from: str | None = None,
    ) -> list[SessionSummary]:
        """One listing page: every live session, or the forks of *forked_from*."""
        sql = list_statement(
            by_user=user_id is not None, paged=after is not None, forks=forked_from is not None
        )
        args: list[Any] = [self._ns, to_micros(now)]
        if forked_from is not None:
            args.append(forked_from.encode())
        if user_id is not None:
            args.append(user_id.encode())
        if after is not None:
            created = to_micros(after[0])
            args += [created, created, after[1].encode()]
        args.append(limit)
        return [decode_summary(row) for row in await self._read(sql, args)]

    @_write
    async def _purge_expired(self, now: datetime) -> int:
        purged = 0
        while True:
            async with self._connection() as connection, self._transaction(connection):
                rows = await fetch(
                    connection, STATEMENTS.purge_batch, (self._ns, to_micros(now), PURGE_BATCH)
                )
                await self._erase(connection, [row[0] for row in rows])
            purged += len(rows)
            if len(rows) < PURGE_BATCH:
                return purged


def _micros(at: datetime | None) -> int | None:
    return None if at is None else to_micros(at)


def _expired(expires_at: int | None, now: datetime) -> bool:
    return expires_at is not None and int(expires_at) <= to_micros(now)


def _tokens(stored: bytes) -> list[bytes]:
    """The save tokens a session row holds, newest first."""
    return [stored[i : i + TOKEN_BYTES] for i in range(0, len(stored), TOKEN_BYTES)]


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else value.encode()


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else bytes(value).decode()


def _loaded(record: list[tuple[Any, ...]], events: list[tuple[Any, ...]]) -> LoadedSession | None:
    """The session a load read (its record row and event rows), or None when absent."""
    if not record:
        return None
    texts = [bytes(row[0]) for row in events]
    return LoadedSession(decode_record(record[0]), decode_events(texts) if texts else [])
