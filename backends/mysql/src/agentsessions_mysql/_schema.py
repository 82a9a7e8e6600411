"""The tables, their migrations, and every statement the manager sends.

Layout (in the URL's database)::

    agentsessions_sessions        (namespace, session_id) PRIMARY KEY
    agentsessions_events          (namespace, session_id, position) PRIMARY KEY
    agentsessions_archive         (namespace, session_id, version, position) PRIMARY KEY
    agentsessions_schema_version  one row per applied migration

InnoDB, utf8mb4. Ids are ``VARBINARY``, not a ``_bin`` collation: MariaDB's ``utf8mb4_bin``
pads with spaces (``'a' = 'a '``), which would make two ids one key, and byte order of
UTF-8 is code-point order, the listing order of every backend. State and events are
``LONGBLOB`` holding the JSON text exactly as saved: MySQL's ``JSON`` type re-encodes
(it reorders keys and normalises numbers) and MariaDB's is a ``LONGTEXT`` with a check,
so neither would add anything but cost. Timestamps are ``BIGINT`` microseconds since the
epoch (`agentsessions.backend.to_micros`): exact, ordered, and free of the server's and
the connection's time zone.

Values always travel as parameters, quoted to the text asyncmy would give (`_quoting`);
no value is spliced into SQL by hand.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any, NamedTuple

from agentsessions.backend import TOKENS_KEPT

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "STATEMENTS",
    "TOKEN_BYTES",
    "VERSION_TABLE",
    "Guarded",
    "Statements",
    "in_list",
    "insert_events",
    "list_statement",
    "snapshot_read",
    "migration_lock_name",
    "unpack_record",
]


class Guarded(NamedTuple):
    """A DDL statement run only while *probe* (a ``count(*)``) finds 0: the idempotence
    MySQL 8 cannot spell in the DDL itself (it has no ``ADD COLUMN IF NOT EXISTS``)."""

    probe: str
    ddl: str


_FORK_COLUMNS_PROBE = (
    "SELECT count(*) FROM information_schema.columns WHERE table_schema = DATABASE() "
    "AND table_name = 'agentsessions_sessions' AND column_name = 'fork_source'"
)


# Each migration is a list of DDL statements, applied in order under the migration lock
# (MySQL commits DDL implicitly, so each is idempotent: IF NOT EXISTS, or `Guarded`, a
# single ALTER being atomic). Never edit a released migration: append a new one.
MIGRATIONS: dict[int, tuple[str | Guarded, ...]] = {
    1: (
        """
        CREATE TABLE IF NOT EXISTS agentsessions_sessions (
            namespace      VARBINARY(192) NOT NULL,
            session_id     VARBINARY(1020) NOT NULL,
            user_id        VARBINARY(1020) NULL,
            state          LONGBLOB NOT NULL,
            version        BIGINT NOT NULL,
            event_count    INT NOT NULL,
            first_position INT NOT NULL DEFAULT 0,
            created_at     BIGINT NOT NULL,
            updated_at     BIGINT NOT NULL,
            expires_at     BIGINT NULL,
            save_tokens    VARBINARY(1024) NOT NULL DEFAULT '',
            lineage        VARBINARY(64) NOT NULL DEFAULT '',
            PRIMARY KEY (namespace, session_id),
            KEY agentsessions_sessions_by_created (namespace, created_at, session_id),
            KEY agentsessions_sessions_by_user (namespace, user_id, created_at, session_id),
            KEY agentsessions_sessions_by_expiry (namespace, expires_at)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
        """,
        """
        CREATE TABLE IF NOT EXISTS agentsessions_events (
            namespace   VARBINARY(192) NOT NULL,
            session_id  VARBINARY(1020) NOT NULL,
            position    INT NOT NULL,
            data        LONGBLOB NOT NULL,
            PRIMARY KEY (namespace, session_id, position)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
        """,
        """
        CREATE TABLE IF NOT EXISTS agentsessions_archive (
            namespace   VARBINARY(192) NOT NULL,
            session_id  VARBINARY(1020) NOT NULL,
            version     BIGINT NOT NULL,
            position    INT NOT NULL,
            data        LONGBLOB NOT NULL,
            PRIMARY KEY (namespace, session_id, version, position)
        ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
        """,
    ),
    # Branching: where a fork came from (SessionRecord.forked_from), all NULL for a
    # session that is no fork; the index lists one session's forks, newest first. One
    # ALTER: it lands whole or not at all, so the probe of its first column decides.
    2: (
        Guarded(
            _FORK_COLUMNS_PROBE,
            """
            ALTER TABLE agentsessions_sessions
                ADD COLUMN fork_source  VARBINARY(1020) NULL,
                ADD COLUMN fork_version BIGINT NULL,
                ADD COLUMN fork_event   VARBINARY(1020) NULL,
                ADD KEY agentsessions_sessions_by_fork
                    (namespace, fork_source, created_at, session_id)
            """,
        ),
    ),
}
LATEST_VERSION = max(MIGRATIONS)

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS agentsessions_schema_version (
    version    INT NOT NULL PRIMARY KEY,
    applied_at BIGINT NOT NULL
) ENGINE=InnoDB
"""


def migration_lock_name(database: str) -> str:
    """The ``GET_LOCK`` name that serialises migrations of *database* across processes.

    Lock names are global to the server and at most 64 characters, hence a digest.
    """
    digest = hashlib.blake2b(database.encode(), digest_size=16).hexdigest()
    return f"agentsessions_mysql:{digest}"


_LIVE = "namespace = %s AND session_id = %s AND (expires_at IS NULL OR expires_at > %s)"


_LIVE_S = "s.namespace = %s AND s.session_id = %s AND (s.expires_at IS NULL OR s.expires_at > %s)"
#: A session row as one binary string: a header of comma-separated numbers, "-" for
#: NULL (version, created, updated, event count, expiry, fork version, then the byte
#: lengths of the owner, state, lineage, fork source and fork event), "|", then those
#: five values back to back. `unpack_record` reads it.
_PACKED = (
    "CONCAT(CONCAT_WS(',', s.version, s.created_at, s.updated_at, s.event_count, "
    "IFNULL(s.expires_at, '-'), IFNULL(s.fork_version, '-'), IFNULL(LENGTH(s.user_id), '-'), "
    "LENGTH(s.state), LENGTH(s.lineage), IFNULL(LENGTH(s.fork_source), '-'), "
    "IFNULL(LENGTH(s.fork_event), '-')), '|', IFNULL(s.user_id, ''), s.state, s.lineage, "
    "IFNULL(s.fork_source, ''), IFNULL(s.fork_event, ''))"
)


def unpack_record(session_id: bytes, packed: bytes) -> tuple[Any, ...]:
    """A `_PACKED` session row as `Statements.load_record` returns it."""
    head, _, body = bytes(packed).partition(b"|")
    version, created, updated, count, expires, fork_version, *lengths = head.split(b",")
    values: list[bytes | None] = []
    at = 0
    for length in lengths:
        if length == b"-":
            values.append(None)
        else:
            end = at + int(length)
            values.append(body[at:end])
            at = end
    if len(values) != 5 or at != len(body):
        raise ValueError(f"a packed session row does not add up: header {head!r}")
    user, state, lineage, fork_source, fork_event = values
    return (
        session_id,
        user,
        state,
        int(version),
        int(created),
        int(updated),
        None if expires == b"-" else int(expires),
        int(count),
        lineage,
        fork_source,
        None if fork_version == b"-" else int(fork_version),
        fork_event,
    )


@dataclass(frozen=True)
class Statements:
    """Every statement the manager sends (``%s`` placeholders, asyncmy's paramstyle)."""

    current_version: str = "SELECT max(version) FROM agentsessions_schema_version"
    schema_exists: str = (
        "SELECT count(*) FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = 'agentsessions_schema_version'"
    )
    record_version: str = (
        # Not INSERT IGNORE: a duplicate would be a warning, which asyncmy logs.
        "INSERT INTO agentsessions_schema_version (version, applied_at) VALUES (%s, %s) "
        "ON DUPLICATE KEY UPDATE version = version"
    )

    # -- create: ns, id, user, state, version, created, updated, expires, count, lineage,
    # the fork origin (source, version, cut event; NULL for a session that is no fork) --
    insert_session: str = """
        INSERT INTO agentsessions_sessions (namespace, session_id, user_id, state, version,
            created_at, updated_at, expires_at, event_count, lineage, fork_source,
            fork_version, fork_event)
        VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
    """
    # ns, id: the row, locked, as a replacement reads it.
    lock_session: str = """
        SELECT version, lineage, expires_at, first_position
        FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s FOR UPDATE
    """
    # token, token, ns, id: the row, locked, as a save, compaction or rewind reads it.
    # The stored tokens come back only when the request's token occurs in them (the
    # caller then checks it is one of them): a save neither reads nor sends them, it
    # prepends its token in the UPDATE ({_TOKENS_BYTES}: the last TOKENS_KEPT tokens).
    lock_for_write: str = """
        SELECT version, lineage, expires_at, first_position,
               IF(%s <> '' AND LOCATE(%s, save_tokens) > 0, save_tokens, NULL)
        FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s FOR UPDATE
    """
    # user, state, version, created, updated, expires, count, lineage, fork source,
    # fork version, fork event, ns, id
    replace_session: str = """
        UPDATE agentsessions_sessions
        SET user_id = %s, state = %s, version = %s, created_at = %s, updated_at = %s,
            expires_at = %s, event_count = %s, lineage = %s, fork_source = %s,
            fork_version = %s, fork_event = %s, first_position = 0, save_tokens = ''
        WHERE namespace = %s AND session_id = %s
    """
    delete_events: str = "DELETE FROM agentsessions_events WHERE namespace = %s AND session_id = %s"
    delete_archive: str = (
        "DELETE FROM agentsessions_archive WHERE namespace = %s AND session_id = %s"
    )

    # -- save: state, version, updated, expires, count, token, lineage, ns, id --
    update_saved: str = """
        UPDATE agentsessions_sessions
        SET state = %s, version = %s, updated_at = %s, expires_at = %s, event_count = %s,
            save_tokens = LEFT(CONCAT(%s, save_tokens), {_TOKENS_BYTES}), lineage = %s
        WHERE namespace = %s AND session_id = %s
    """
    # ns, id, first stored position to delete
    delete_events_from: str = """
        DELETE FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s AND position >= %s
    """
    # -- compaction: version, updated, expires, count, token, first position, lineage --
    update_compacted: str = """
        UPDATE agentsessions_sessions
        SET version = %s, updated_at = %s, expires_at = %s, event_count = %s,
            save_tokens = LEFT(CONCAT(%s, save_tokens), {_TOKENS_BYTES}),
            first_position = %s, lineage = %s
        WHERE namespace = %s AND session_id = %s
    """
    # ns, id, end (exclusive) of the replaced stored positions
    delete_events_below: str = """
        DELETE FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s AND position < %s
    """
    # version, first stored position (logical 0), ns, id, end of the replaced positions
    archive_events: str = """
        INSERT INTO agentsessions_archive (namespace, session_id, version, position, data)
        SELECT namespace, session_id, %s, position - %s, data FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s AND position < %s
    """
    # -- rewind: version, updated, expires, count, token, lineage, ns, id --
    update_rewound: str = """
        UPDATE agentsessions_sessions
        SET version = %s, updated_at = %s, expires_at = %s, event_count = %s,
            save_tokens = LEFT(CONCAT(%s, save_tokens), {_TOKENS_BYTES}), lineage = %s
        WHERE namespace = %s AND session_id = %s
    """
    # version, first stored position (logical 0), ns, id, first dropped stored position
    archive_tail: str = """
        INSERT INTO agentsessions_archive (namespace, session_id, version, position, data)
        SELECT namespace, session_id, %s, position - %s, data FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s AND position >= %s
    """

    # -- fork: one transaction, the source row share-locked so that no save of it lands
    # in between; the events are copied row to row by the server --
    # ns, id, now. LOCK IN SHARE MODE, not FOR SHARE: MariaDB has only the former.
    fork_source: str = """
        SELECT user_id, state, version, event_count, first_position
        FROM agentsessions_sessions WHERE {_LIVE}
        LOCK IN SHARE MODE
    """
    # ns, source id, the cut event's id (bytes). The event is a binary string, which
    # MySQL's JSON functions refuse, hence the CONVERT; the id is compared as bytes
    # (exact, no collation, no padding).
    find_event: str = """
        SELECT position FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s
          AND CAST(JSON_UNQUOTE(JSON_EXTRACT(CONVERT(data USING utf8mb4), '$.id'))
                   AS BINARY) = %s
        ORDER BY position LIMIT 1
    """
    # new id, the source's first position, ns, source id, end (exclusive) of the copy
    copy_events: str = """
        INSERT INTO agentsessions_events (namespace, session_id, position, data)
        SELECT namespace, %s, position - %s, data FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s AND position < %s
    """

    # ns, id, now
    load_archive: str = """
        SELECT a.data FROM agentsessions_archive a
        WHERE a.namespace = %s AND a.session_id = %s AND EXISTS (
            SELECT 1 FROM agentsessions_sessions WHERE {_LIVE})
        ORDER BY a.version, a.position
    """

    # -- load: one read-only transaction with a consistent snapshot, sent as ONE
    # multi-statement packet (one round trip): the record, then its events. Two plain
    # selects, not one UNION ALL: MariaDB sorts a union through a temporary table.
    # ns, id, now
    load_record: str = """
        SELECT session_id, user_id, state, version, created_at, updated_at, expires_at,
               event_count, lineage, fork_source, fork_version, fork_event
        FROM agentsessions_sessions WHERE {_LIVE}
    """
    # ns, id
    events_all: str = """
        SELECT data FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s ORDER BY position
    """
    # ns, id, last_events: newest first (reversed by the caller), a backward index scan
    events_last: str = """
        SELECT data FROM agentsessions_events
        WHERE namespace = %s AND session_id = %s ORDER BY position DESC LIMIT %s
    """
    # -- load in ONE statement (its own snapshot, no transaction): the events joined to
    # the live session row, the record packed (`_PACKED`) on the row of the first event
    # returned and NULL on the others. A session without events returns no rows, as an
    # absent one does: the caller then runs the two-select load above. The flag is one
    # IF per row, not one per record column: the server evaluates it on every row. --
    # ns, id, now
    joined_all: str = """
        SELECT IF(e.position = s.first_position, {_PACKED}, NULL), e.data
        FROM agentsessions_sessions s JOIN agentsessions_events e
          ON e.namespace = s.namespace AND e.session_id = s.session_id
        WHERE {_LIVE_S} ORDER BY e.position
    """
    # ns, id, now, last_events: newest first (reversed by the caller)
    joined_last: str = """
        SELECT IF(e.position = s.first_position + s.event_count - 1, {_PACKED}, NULL), e.data
        FROM agentsessions_sessions s JOIN agentsessions_events e
          ON e.namespace = s.namespace AND e.session_id = s.session_id
        WHERE {_LIVE_S} ORDER BY e.position DESC LIMIT %s
    """
    # lineage, count, count, ns, id: the events after the caller's copy while the
    # lineage is unchanged, else all of them (SessionManager._load_since).
    events_since: str = """
        SELECT e.data
        FROM agentsessions_sessions s JOIN agentsessions_events e
          ON e.namespace = s.namespace AND e.session_id = s.session_id
         AND e.position >= s.first_position
             + CASE WHEN s.lineage = %s AND s.event_count >= %s THEN %s ELSE 0 END
        WHERE s.namespace = %s AND s.session_id = %s
        ORDER BY e.position
    """

    # -- delete: ns, id, now / ns, user, now --
    session_liveness: str = """
        SELECT expires_at IS NULL OR expires_at > %s
        FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s FOR UPDATE
    """
    delete_session: str = (
        "DELETE FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s"
    )
    user_sessions: str = """
        SELECT session_id, expires_at IS NULL OR expires_at > %s
        FROM agentsessions_sessions WHERE namespace = %s AND user_id = %s FOR UPDATE
    """
    # ns, now, batch
    purge_batch: str = """
        SELECT session_id FROM agentsessions_sessions
        WHERE namespace = %s AND expires_at <= %s
        LIMIT %s FOR UPDATE SKIP LOCKED
    """


#: A save token's length (`agentsessions.backend` makes them 32 hex characters).
TOKEN_BYTES = 32


def _filled() -> Statements:
    """The statements with the shared fragments in place of their ``{...}`` marks, and
    their runs of white space made single spaces (fewer bytes to send and parse; no
    statement holds a literal with white space in it)."""
    marks = {
        "{_LIVE}": _LIVE,
        "{_LIVE_S}": _LIVE_S,
        "{_PACKED}": _PACKED,
        "{_TOKENS_BYTES}": str(TOKENS_KEPT * TOKEN_BYTES),
    }
    filled = {}
    for field in fields(Statements):
        text = getattr(Statements, field.name)
        for mark, fragment in marks.items():
            text = text.replace(mark, fragment)
        filled[field.name] = " ".join(text.split())
    return Statements(**filled)


STATEMENTS = _filled()


def snapshot_read(*statements: str) -> str:
    """*statements* in one read-only transaction with one snapshot, as one packet."""
    body = "; ".join(statement.strip() for statement in statements)
    return f"START TRANSACTION WITH CONSISTENT SNAPSHOT, READ ONLY; {body}; COMMIT"


def in_list(table: str, count: int) -> str:
    """``DELETE FROM table WHERE namespace = %s AND session_id IN (%s, ...)``."""
    marks = ", ".join(["%s"] * count)
    sql = "DELETE FROM {table} WHERE namespace = %s AND session_id IN ({marks})"
    return sql.replace("{table}", table).replace("{marks}", marks)


@lru_cache(maxsize=64)
def insert_events(count: int) -> str:
    """A multi-row insert of *count* events: ns, id, position, data per row."""
    rows = ", ".join(["(%s, %s, %s, %s)"] * count)
    sql = "INSERT INTO agentsessions_events (namespace, session_id, position, data) VALUES {rows}"
    return sql.replace("{rows}", rows)


@lru_cache(maxsize=16)
def list_statement(*, by_user: bool, paged: bool, forks: bool = False) -> str:
    """A listing page, newest first, in index order (keyset pagination); with *forks*,
    of one session's forks.

    Parameters: ns, now [, fork source] [, user] [, cursor created_at twice and
    session_id], limit. The row comparison is spelt out: MySQL does not use an index
    for ``(a, b) < (x, y)``.
    """
    where = ["namespace = %s", "(expires_at IS NULL OR expires_at > %s)"]
    if forks:
        where.append("fork_source = %s")
    if by_user:
        where.append("user_id = %s")
    if paged:
        where.append("(created_at < %s OR (created_at = %s AND session_id < %s))")
    return (
        "SELECT session_id, user_id, created_at, updated_at, event_count, version, "
        "fork_source, fork_version, fork_event "
        "FROM agentsessions_sessions WHERE "
        + " AND ".join(where)
        + " ORDER BY created_at DESC, session_id DESC LIMIT %s"
    )
