"""`SQLiteSessionManager`: sessions in a SQLite file (or a private in-memory database).

Every operation is one transaction run in one hop on a connection's thread (see
`_connection`). A file-backed manager holds two connections: the writer, for every
write, and a reader, so that loads and listings never queue behind a write (WAL lets
them read the last committed snapshot while a write is in progress). A read goes to
the writer when the writer has nothing in flight: SQLite drops a connection's page
cache whenever another connection changed the file, so the reader would read again
from the file what the writer, having just written it, still holds in its cache. A
``:memory:`` database exists only inside its one connection, so that connection does
everything.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import datetime
from functools import partial
from operator import itemgetter
from typing import ClassVar

from agentsessions import (
    BackendUnavailableError,
    ForkOrigin,
    InvalidInputError,
    SessionError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSummary,
)
from agentsessions.backend import (
    TOKENS_KEPT,
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
    decode_record,
    decode_summary,
    encode_record,
    finding,
    fork_fields,
    refused,
    to_micros,
)

from . import _diagnosis
from . import _statements as sql
from ._connection import Link, connect, is_busy
from ._options import SQLiteOptions
from ._schema import SCHEMA_VERSION, migrate
from ._url import MEMORY, database_path

__all__ = ["SQLiteSessionManager"]

_first = itemgetter(0)
# save_tokens holds the latest TOKENS_KEPT tokens of 32 hex characters, newest first.
_TOKEN_CHARS = 32 * TOKENS_KEPT


def _optional_micros(when: datetime | None) -> int | None:
    return None if when is None else to_micros(when)


def _create_private(path: str) -> None:
    """Create a database file that does not exist yet readable by its owner only (0600).

    Sessions are conversations: a file the umask makes world-readable exposes them to
    every local user. SQLite gives the -wal and -shm files the database file's mode, so
    they follow. An existing file keeps its mode: chmod it, or create it yourself, to
    share it. A file another process creates first (O_EXCL) is left as it made it.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError:
        return  # exists already, or cannot be created: sqlite3 reports why
    os.close(fd)


# -- what runs in the connection thread ------------------------------------------------


def _load(
    conn: sqlite3.Connection,
    namespace: str,
    session_id: str,
    last_events: int | None,
    now: int,
    utf8: bool,
) -> LoadedSession | None:
    row = conn.execute(sql.SELECT_SESSION, (namespace, session_id, now)).fetchone()
    if row is None:
        return None
    if last_events is None:
        rows = conn.execute(sql.SELECT_ALL_EVENTS[utf8], (namespace, session_id)).fetchall()
    elif last_events:
        rows = conn.execute(
            sql.SELECT_LAST_EVENTS[utf8], (namespace, session_id, last_events)
        ).fetchall()
        rows.reverse()
    else:
        rows = []
    # One batch decode of every event (pydantic-core); map() keeps the unpacking in C.
    return LoadedSession(decode_record((session_id, *row)), decode_events(list(map(_first, rows))))


def _load_since(
    conn: sqlite3.Connection,
    namespace: str,
    session_id: str,
    event_count: int,
    lineage: str,
    now: int,
    utf8: bool,
) -> LoadedSession | None:
    # The caller runs this in one read transaction: the record and the events agree.
    row = conn.execute(sql.SELECT_SESSION, (namespace, session_id, now)).fetchone()
    if row is None:
        return None
    record = decode_record((session_id, *row))
    start = record.since_position(event_count, lineage)
    # Stored positions count from the session's first position (moved by compaction).
    (first,) = conn.execute(sql.SELECT_FIRST_POSITION, (namespace, session_id)).fetchone()
    rows = conn.execute(
        sql.SELECT_EVENTS_FROM[utf8], (namespace, session_id, first + start)
    ).fetchall()
    return LoadedSession(record, decode_events(list(map(_first, rows))))


def _create(conn: sqlite3.Connection, namespace: str, record: SessionRecord, now: int) -> bool:
    cursor = conn.execute(
        sql.CREATE, (namespace, *encode_record(record, micros=True), *fork_fields(record), now)
    )
    if cursor.rowcount == 0:
        return False
    # Either a fresh id (no events to delete: one index probe) or an expired session
    # being replaced, whose old events must go in the same transaction.
    conn.execute(sql.DELETE_EVENTS, (namespace, record.session_id))
    conn.execute(sql.DELETE_ARCHIVE, (namespace, record.session_id))
    return True


def _restore(
    conn: sqlite3.Connection,
    namespace: str,
    record: SessionRecord,
    events: list[EventRecord],
    now: int,
) -> bool:
    # One transaction: the record as given, then its events; a failure rolls back both.
    if not _create(conn, namespace, record, now):
        return False
    if events:
        conn.executemany(
            sql.INSERT_EVENT,
            [(namespace, record.session_id, event.position, event.data) for event in events],
        )
    return True


def _save(conn: sqlite3.Connection, namespace: str, request: SaveRequest, now: int) -> None:
    record = request.record
    session_id = record.session_id
    cursor = conn.execute(
        sql.UPDATE_SESSION,
        (
            record.state,
            record.version,
            to_micros(record.updated_at),
            _optional_micros(record.expires_at),
            record.event_count,
            request.token,
            _TOKEN_CHARS,
            record.lineage,
            namespace,
            session_id,
            request.expected_version,
            now,
            request.expected_lineage,
            request.expected_lineage,
        ),
    )
    if cursor.rowcount == 0:
        _check_landed(conn, namespace, request, now)
        return
    # Positions are stored from the session's first position (0 until a compaction).
    if request.truncates or request.new_events:
        (first,) = conn.execute(sql.SELECT_FIRST_POSITION, (namespace, session_id)).fetchone()
    if request.truncates:
        conn.execute(sql.DELETE_EVENT_TAIL, (namespace, session_id, first + request.keep))
    if request.new_events:
        conn.executemany(
            sql.INSERT_EVENT,
            [
                (namespace, session_id, first + event.position, event.data)
                for event in request.new_events
            ],
        )


def _fork(
    conn: sqlite3.Connection, namespace: str, request: ForkRequest, now: int
) -> SessionRecord:
    # One write transaction (BEGIN IMMEDIATE): the source cannot change in between.
    source_id = request.source_id
    row = conn.execute(sql.SELECT_SESSION, (namespace, source_id, now)).fetchone()
    if row is None:
        raise SessionNotFoundError(source_id)
    source = decode_record((source_id, *row))
    if request.user_id is not None and source.user_id != request.user_id:
        raise SessionOwnershipError(source_id, request.user_id)
    (first,) = conn.execute(sql.SELECT_FIRST_POSITION, (namespace, source_id)).fetchone()
    count = source.event_count
    if request.through_event_id is not None:
        found = conn.execute(
            sql.FIND_EVENT, (namespace, source_id, request.through_event_id)
        ).fetchone()
        if found is None:
            raise InvalidInputError(
                f"session {source_id!r} holds no event with id {request.through_event_id!r}"
            )
        count = found[0] - first + 1
    record = SessionRecord(
        session_id=request.session_id,
        user_id=source.user_id,
        state=source.state if request.state is None else request.state,
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
    if not _create(conn, namespace, record, now):
        raise SessionExistsError(request.session_id)
    conn.execute(sql.COPY_EVENTS, (request.session_id, first, namespace, source_id, first + count))
    return record


def _rewind(conn: sqlite3.Connection, namespace: str, request: RewindRequest, now: int) -> None:
    session_id = request.session_id
    cursor = conn.execute(
        sql.REWIND_SESSION,
        (
            request.version,
            to_micros(request.updated_at),
            _optional_micros(request.expires_at),
            request.event_count,
            request.token,
            _TOKEN_CHARS,
            request.lineage,
            namespace,
            session_id,
            request.expected_version,
            now,
            request.expected_lineage,
            request.expected_lineage,
        ),
    )
    if cursor.rowcount == 0:
        _check_landed(conn, namespace, request, now)
        return
    (first,) = conn.execute(sql.SELECT_FIRST_POSITION, (namespace, session_id)).fetchone()
    if request.archive:
        conn.execute(
            sql.ARCHIVE_TAIL,
            (request.expected_version, first, namespace, session_id, first + request.keep),
        )
    conn.execute(sql.DELETE_EVENT_TAIL, (namespace, session_id, first + request.keep))


def _list_forks(
    conn: sqlite3.Connection,
    namespace: str,
    source_id: str,
    user_id: str | None,
    limit: int,
    after: tuple[int, str] | None,
    now: int,
) -> list[SessionSummary]:
    params: list[object] = [namespace, now, source_id]
    if user_id is not None:
        params.append(user_id)
    if after is not None:
        params.extend(after)
    params.append(limit)
    query = sql.LIST_FORKS[user_id is not None, after is not None]
    return list(map(decode_summary, conn.execute(query, params).fetchall()))


def _check_landed(
    conn: sqlite3.Connection,
    namespace: str,
    request: SaveRequest | CompactRequest | RewindRequest,
    now: int,
) -> None:
    """After a failed version check: return if *request* landed before, else raise why.

    The token is checked only here: a write that landed has raised the version, so its
    retry always fails the version check first (the write lock is held).
    """
    row = conn.execute(
        sql.SELECT_VERSION, (request.token, namespace, request.session_id)
    ).fetchone()
    if row is None or not row[1]:
        raise refused(request, live=row is not None and (row[2] is None or row[2] > now))


def _compact(conn: sqlite3.Connection, namespace: str, request: CompactRequest, now: int) -> None:
    session_id = request.session_id
    shift = request.replaced - len(request.new_events)
    cursor = conn.execute(
        sql.COMPACT_SESSION,
        (
            request.version,
            to_micros(request.updated_at),
            _optional_micros(request.expires_at),
            request.event_count,
            request.token,
            _TOKEN_CHARS,
            shift,
            request.lineage,
            namespace,
            session_id,
            request.expected_version,
            now,
            request.expected_lineage,
            request.expected_lineage,
        ),
    )
    if cursor.rowcount == 0:
        _check_landed(conn, namespace, request, now)
        return
    (first,) = conn.execute(sql.SELECT_FIRST_POSITION, (namespace, session_id)).fetchone()
    old_first = first - shift
    cut = old_first + request.replaced
    if request.archive:
        conn.execute(
            sql.ARCHIVE_HEAD, (request.expected_version, old_first, namespace, session_id, cut)
        )
    conn.execute(sql.DELETE_EVENT_HEAD, (namespace, session_id, cut))
    if request.new_events:
        conn.executemany(
            sql.INSERT_EVENT,
            [
                (namespace, session_id, first + event.position, event.data)
                for event in request.new_events
            ],
        )


def _archived(conn: sqlite3.Connection, namespace: str, session_id: str, now: int) -> list[str]:
    if conn.execute(sql.SELECT_LIVE, (namespace, session_id, now)).fetchone() is None:
        return []
    rows = conn.execute(sql.SELECT_ARCHIVE, (namespace, session_id)).fetchall()
    return list(map(_first, rows))


def _delete(conn: sqlite3.Connection, namespace: str, session_id: str, now: int) -> bool:
    row = conn.execute(sql.SELECT_EXPIRY, (namespace, session_id)).fetchone()
    if row is None:
        return False
    conn.execute(sql.DELETE_EVENTS, (namespace, session_id))
    conn.execute(sql.DELETE_ARCHIVE, (namespace, session_id))
    conn.execute(sql.DELETE_SESSION, (namespace, session_id))
    expires = row[0]
    return expires is None or expires > now


def _delete_user(conn: sqlite3.Connection, namespace: str, user_id: str, now: int) -> int:
    (live,) = conn.execute(sql.COUNT_LIVE_OF_USER, (namespace, user_id, now)).fetchone()
    conn.execute(sql.DELETE_EVENTS_OF_USER, (namespace, namespace, user_id))
    conn.execute(sql.DELETE_ARCHIVE_OF_USER, (namespace, namespace, user_id))
    conn.execute(sql.DELETE_SESSIONS_OF_USER, (namespace, user_id))
    return int(live)


def _purge_expired(conn: sqlite3.Connection, namespace: str, now: int) -> int:
    conn.execute(sql.DELETE_EVENTS_OF_EXPIRED, (namespace, namespace, now))
    conn.execute(sql.DELETE_ARCHIVE_OF_EXPIRED, (namespace, namespace, now))
    return conn.execute(sql.DELETE_EXPIRED, (namespace, now)).rowcount


def _list(
    conn: sqlite3.Connection,
    namespace: str,
    user_id: str | None,
    limit: int,
    after: tuple[int, str] | None,
    now: int,
) -> list[SessionSummary]:
    params: list[object] = [namespace, now]
    if user_id is not None:
        params.append(user_id)
    if after is not None:
        params.extend(after)
    params.append(limit)
    rows = conn.execute(sql.LIST[user_id is not None, after is not None], params).fetchall()
    return list(map(decode_summary, rows))


def _prepare_writer(conn: sqlite3.Connection, synchronous: str, memory: bool) -> None:
    if not memory and str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
        # Persistent in the file: every later connection, in any process, is in WAL too.
        # Switching takes an exclusive lock, so it is done only when needed.
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise sqlite3.OperationalError(f"the database refused WAL mode (stays in {mode!r})")
    _set_synchronous(conn, synchronous)


def _set_synchronous(conn: sqlite3.Connection, synchronous: str) -> None:
    # A literal per value: PRAGMA takes no parameters, and no input is ever spliced in.
    if synchronous == "full":
        conn.execute("PRAGMA synchronous = FULL")
    else:
        conn.execute("PRAGMA synchronous = NORMAL")


def _is_utf8(conn: sqlite3.Connection) -> bool:
    return str(conn.execute("PRAGMA encoding").fetchone()[0]).upper() == "UTF-8"


def _prepare_reader(conn: sqlite3.Connection) -> None:
    # The reader must never write; if a bug tried, SQLite refuses instead of racing
    # the writer connection for the lock.
    conn.execute("PRAGMA query_only = ON")


def _locked(manager: SQLiteSessionManager, exc: sqlite3.Error) -> SessionError:
    return manager._locked_out(
        manager._busy_timeout,
        f"the database stayed locked by another connection for longer than "
        f"busy_timeout={manager._busy_timeout:g}s: {exc}",
    )


class SQLiteSessionManager(SessionManager):
    """Sessions in a SQLite database, shared safely by tasks, threads and processes.

    ``sqlite:///relative/path.db``, ``sqlite:////absolute/path.db`` or
    ``sqlite:///:memory:`` (private to this manager). Options: ``ttl``, ``namespace``,
    ``busy_timeout`` (seconds), ``synchronous`` (``normal`` or ``full``).
    """

    Options: ClassVar[type[ManagerOptions]] = SQLiteOptions
    options: SQLiteOptions
    # Set by _open, which the base class runs before any other hook.
    _writer: Link
    _reader: Link
    driver_errors = (
        ErrorRule((sqlite3.Error,), when=is_busy, build=_locked),
        ErrorRule((sqlite3.Error,)),
    )
    capabilities = Capabilities(persistent=True, shared=True, compaction=True, branching=True)
    db_system = "sqlite"

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        self.path = database_path(url)
        if self.path == MEMORY:
            # The URL decides what this manager can do, so it is set per instance.
            self.capabilities = Capabilities(
                persistent=False, shared=False, compaction=True, branching=True
            )
        self._ns = self.options.namespace
        self._utf8 = True

    @property
    def in_memory(self) -> bool:
        return self.path == MEMORY

    @property
    def _busy_timeout(self) -> float:
        """How long a statement waits for another connection's lock: never past a call's
        deadline, and the call's own deadline cuts it shorter still (see `Link`)."""
        return min(self.options.busy_timeout, self.options.timeout)

    def _reading(self) -> Link:
        """The connection a read runs on: the writer when it is idle (its cache is warm
        with what it wrote), else the reader, so that no read waits behind a write."""
        return self._writer if self._writer.in_flight == 0 else self._reader

    # -- lifecycle ----------------------------------------------------------------------

    async def _open(self) -> None:
        options = self.options
        links: list[Link] = []
        busy = self._busy_timeout
        try:
            if not self.in_memory:
                _create_private(self.path)
            writer = await connect(self.path, busy, self._remaining)
            links.append(writer)
            await writer.call(_prepare_writer, options.synchronous, self.in_memory)
            # Only a database that needs a migration costs the write lock: an up-to-date
            # one opens and reads while another process holds a long write transaction.
            found = SCHEMA_VERSION
            if await writer.read(partial(migrate, check_only=True)):
                found = await writer.write(migrate)
            self._utf8 = await writer.call(_is_utf8)
            if self.in_memory:
                reader = writer
            else:
                reader = await connect(self.path, busy, self._remaining)
                links.append(reader)
                await reader.call(_prepare_reader)
        except BaseException as exc:
            for link in reversed(links):
                await link.close()
            if isinstance(exc, sqlite3.Error):
                raise BackendUnavailableError(self.url, self._open_failure(exc)) from exc
            raise
        self._writer, self._reader = writer, reader
        self._migrations_applied(found, SCHEMA_VERSION)

    def _open_failure(self, exc: sqlite3.Error) -> str:
        reason = f"cannot open SQLite database {self.path}: {exc}"
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            return f"{reason} (directory {directory} does not exist)"
        if not os.access(directory, os.W_OK):
            return f"{reason} (directory {directory} is not writable: WAL creates files there)"
        if os.path.exists(self.path) and not os.access(self.path, os.R_OK | os.W_OK):
            return f"{reason} (the file is not readable and writable by this process)"
        return reason

    async def _close(self) -> None:
        if self._reader is not self._writer:
            await self._reader.close()
        await self._writer.close()

    async def _diagnose(self, now: datetime) -> list[Finding]:
        if self.in_memory:
            return [
                finding(
                    "sqlite.memory",
                    "warning",
                    "sqlite:///:memory: is a private in-memory database",
                    "every session is lost when the manager closes or the process ends",
                    "use a file: sqlite:////absolute/path/sessions.db",
                )
            ]
        mode, level, stored = await self._writer.call(_diagnosis.pragmas)
        found = _diagnosis.diagnose_file(self.path, mode, level, stored)
        return [*found, _diagnosis.encryption(self.encryption is not None)]

    # -- hooks ----------------------------------------------------------------------------

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        created = await self._writer.write(_create, self._ns, record, to_micros(now))
        if not created:
            raise SessionExistsError(record.session_id)

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        restored = await self._writer.write(_restore, self._ns, record, events, to_micros(now))
        if not restored:
            raise SessionExistsError(record.session_id)

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        return await self._reading().read(
            _load,
            self.options.namespace,
            session_id,
            last_events,
            to_micros(now),
            self._utf8,
        )

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        return await self._reading().read(
            _load_since,
            self._ns,
            session_id,
            event_count,
            lineage,
            to_micros(now),
            self._utf8,
        )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await self._writer.write(_save, self._ns, request, to_micros(now))

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await self._writer.write(_compact, self._ns, request, to_micros(now))

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        return await self._writer.write(_fork, self._ns, request, to_micros(now))

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        await self._writer.write(_rewind, self._ns, request, to_micros(now))

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        position = None if after is None else (to_micros(after[0]), after[1])
        return await self._reading().call(
            _list_forks, self._ns, source_id, user_id, limit, position, to_micros(now)
        )

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        texts: list[str] = await self._reading().read(
            _archived, self.options.namespace, session_id, to_micros(now)
        )
        return texts

    async def _delete(self, session_id: str, now: datetime) -> bool:
        return await self._writer.write(_delete, self._ns, session_id, to_micros(now))

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        return await self._writer.write(_delete_user, self._ns, user_id, to_micros(now))

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        position = None if after is None else (to_micros(after[0]), after[1])
        return await self._reading().call(_list, self._ns, user_id, limit, position, to_micros(now))

    async def _purge_expired(self, now: datetime) -> int:
        return await self._writer.write(_purge_expired, self._ns, to_micros(now))
