"""The tables, their migrations, and every statement the manager sends.

Layout (in the schema chosen by the ``schema`` option, ``public`` by default)::

    agentsessions_sessions        (namespace, session_id) PRIMARY KEY
    agentsessions_events          (namespace, session_id, position) PRIMARY KEY
    agentsessions_schema_version  one row per applied migration

Why ``json`` and not ``jsonb`` for state and event data: ``jsonb`` re-encodes what it
stores. It rejects ``\\u0000`` in strings, reorders object keys, and turns floats such as
``1e300`` into integers and ``-0.0`` into ``0.0``; all of those are values that would not
come back as saved. ``json`` keeps the exact text (and still validates it), so a load
returns the bytes that were saved, and the events of a load are concatenated by the
server into one JSON array that is decoded in a single pass, with no per-event work
in Python. Ad-hoc queries can still cast (``data::jsonb ->> 'author'``).

The namespace is a key column rather than a table-name prefix, so any number of
namespaces share three tables and no DDL runs when a new one is used. Both tables are
keyed by session id (with the namespace), so they can be distributed and co-located by
``session_id`` (Citus ``create_distributed_table(..., 'session_id')``): every statement
of a save or a load touches one session only.

Ids and namespaces use the "C" collation: listing order (created_at, session_id)
descending must be code-point order, as everywhere else in agentsessions, not the
database locale's; byte comparison is also the fastest.

Statements are written against ``{s}``, replaced by the quoted schema name. The schema
name is validated by the options (``[a-z_][a-z0-9_]*``) and quoted as an identifier;
values always travel as parameters, never in the SQL text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from agentsessions.backend import TOKENS_KEPT, SchemaTooNewError

if TYPE_CHECKING:
    import asyncpg
    from asyncpg.pool import PoolConnectionProxy

    # Pooled, or the bare one a pool's init callback gets.
    Connection = PoolConnectionProxy[Any] | asyncpg.Connection[Any]

__all__ = [
    "LATEST_VERSION",
    "MIGRATIONS",
    "OTHER_LIFE",
    "SOUND_STATISTICS",
    "Statements",
    "compact_statement",
    "list_forks_statement",
    "list_statement",
    "migrate",
    "migration_lock_key",
    "quote_ident",
    "rewind_statement",
    "save_statement",
    "statements",
]

#: Rows both tables' statistics must count before the loads are sent in the form that
#: is planned once per connection (`Statements.generic_load_all`). Below it, PostgreSQL
#: prices a sequential scan, or a walk of the listing index, no dearer than the primary
#: key; a plan made then and kept would read the whole table or namespace at every load
#: once the table has grown, until an ANALYZE made a new one.
SOUND_STATISTICS = 1000

#: A save's or compaction's outcome when the stored version is the expected one and
#: the lineage is not (see `save_statement`): never a version, which starts at 1.
OTHER_LIFE = -2

# Each migration is a list of DDL statements applied in one transaction, in order.
# Never edit a released migration: append a new one.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        # fillfactor leaves room on each page so that a save (which rewrites the
        # session row) can stay a HOT update that touches no index when no indexed
        # column changes.
        """
        CREATE TABLE IF NOT EXISTS {s}.agentsessions_sessions (
            namespace   text COLLATE "C" NOT NULL,
            session_id  text COLLATE "C" NOT NULL,
            user_id     text COLLATE "C",
            state       json NOT NULL,
            version     bigint NOT NULL,
            event_count integer NOT NULL,
            created_at  timestamptz NOT NULL,
            updated_at  timestamptz NOT NULL,
            expires_at  timestamptz,
            PRIMARY KEY (namespace, session_id)
        ) WITH (fillfactor = 80)
        """,
        # Append-only in the common case; the primary key serves "ORDER BY position
        # DESC LIMIT n" for last_events and the range delete of a truncating save.
        """
        CREATE TABLE IF NOT EXISTS {s}.agentsessions_events (
            namespace   text COLLATE "C" NOT NULL,
            session_id  text COLLATE "C" NOT NULL,
            position    integer NOT NULL,
            data        json NOT NULL,
            PRIMARY KEY (namespace, session_id, position)
        )
        """,
        # Listing pages walk these in index order (keyset pagination).
        """
        CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_created
            ON {s}.agentsessions_sessions (namespace, created_at DESC, session_id DESC)
        """,
        """
        CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_user
            ON {s}.agentsessions_sessions (namespace, user_id, created_at DESC, session_id DESC)
            WHERE user_id IS NOT NULL
        """,
        # The purge finds expired sessions here; sessions without a ttl are not indexed.
        """
        CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_expiry
            ON {s}.agentsessions_sessions (namespace, expires_at)
            WHERE expires_at IS NOT NULL
        """,
    ),
    # Idempotent saves: the tokens of the session's latest saves, newest first (see
    # `save_statement`). A constant default: no table rewrite.
    2: (
        """
        ALTER TABLE {s}.agentsessions_sessions
            ADD COLUMN IF NOT EXISTS save_tokens text[] NOT NULL DEFAULT '{}'
        """,
    ),
    # Compaction: a session's first event sits at first_position, so replacing a prefix
    # deletes and writes only that prefix instead of renumbering what stays; the archive
    # keeps what a compaction was asked to keep, keyed by the version it replaced.
    3: (
        """
        ALTER TABLE {s}.agentsessions_sessions
            ADD COLUMN IF NOT EXISTS first_position integer NOT NULL DEFAULT 0
        """,
        """
        CREATE TABLE IF NOT EXISTS {s}.agentsessions_archive (
            namespace   text COLLATE "C" NOT NULL,
            session_id  text COLLATE "C" NOT NULL,
            version     bigint NOT NULL,
            position    integer NOT NULL,
            data        json NOT NULL,
            PRIMARY KEY (namespace, session_id, version, position)
        )
        """,
    ),
    # The stored history's lineage (SessionRecord.lineage); '' for sessions written
    # before it existed, which a conflict retry then reads whole. No table rewrite.
    4: (
        """
        ALTER TABLE {s}.agentsessions_sessions
            ADD COLUMN IF NOT EXISTS lineage text NOT NULL DEFAULT ''
        """,
    ),
    # Branching: where a fork came from (SessionRecord.forked_from), all NULL for a
    # session that is no fork (no table rewrite); the index lists one session's forks.
    5: (
        """
        ALTER TABLE {s}.agentsessions_sessions
            ADD COLUMN IF NOT EXISTS fork_source text COLLATE "C",
            ADD COLUMN IF NOT EXISTS fork_version bigint,
            ADD COLUMN IF NOT EXISTS fork_event text
        """,
        """
        CREATE INDEX IF NOT EXISTS agentsessions_sessions_by_fork
            ON {s}.agentsessions_sessions
                (namespace, fork_source, created_at DESC, session_id DESC)
            WHERE fork_source IS NOT NULL
        """,
    ),
}
LATEST_VERSION = max(MIGRATIONS)

VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {s}.agentsessions_schema_version (
    version    integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""


def quote_ident(name: str) -> str:
    """*name* as a quoted SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def migration_lock_key(schema: str) -> int:
    """The advisory lock that serialises migrations of *schema* across processes.

    A stable hash (not Python's salted ``hash``) so every process computes the same key.
    """
    digest = hashlib.blake2b(f"agentsessions_postgres:{schema}".encode(), digest_size=8)
    return int.from_bytes(digest.digest(), "big", signed=True)


async def migrate(
    connection: Connection,
    schema: str,
    transaction: Callable[[Connection], AbstractAsyncContextManager[None]],
) -> int:
    """Bring *schema* to `LATEST_VERSION`, exactly once across racing processes; the
    version it was at.

    The common case (already migrated) costs two reads and takes no lock. Otherwise
    a transaction-scoped advisory lock serialises the processes starting at once:
    the first applies the migrations, the others wait, then find them applied.
    """
    sql, quoted = statements(schema), quote_ident(schema)
    table = f"{quoted}.agentsessions_schema_version"
    if await connection.fetchval("SELECT to_regclass($1)::text", table) is not None:
        found = await connection.fetchval(sql.current_version)
        _check_not_newer(found or 0, schema)
        if found == LATEST_VERSION:
            return LATEST_VERSION
    async with transaction(connection):
        await connection.execute("SELECT pg_advisory_xact_lock($1)", migration_lock_key(schema))
        has_schema = await connection.fetchval(
            "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema
        )
        if not has_schema:
            # Only when missing: CREATE SCHEMA needs the CREATE privilege on the
            # database even with IF NOT EXISTS, which an application role may lack.
            await connection.execute(f"CREATE SCHEMA IF NOT EXISTS {quoted}")
        await connection.execute(sql.version_table)
        current: int = await connection.fetchval(sql.current_version) or 0
        _check_not_newer(current, schema)
        for version in sorted(MIGRATIONS):
            if version <= current:
                continue
            for ddl in MIGRATIONS[version]:
                await connection.execute(ddl.replace("{s}", quoted))
            await connection.execute(sql.record_version, version)
    return current


def _check_not_newer(found: int, schema: str) -> None:
    if found > LATEST_VERSION:
        raise SchemaTooNewError(found, LATEST_VERSION, f"schema {schema!r}")


# Appended to the plain loads so that PostgreSQL plans them afresh at every call, on the
# tables as they are. Its plan cache keeps a statement's generic plan (made once, with
# the values unknown) when that costs no more than the custom plans made so far; on a
# new store's near-empty tables it does, and the plan kept then scans the whole table,
# or walks the namespace's listing index, at every load once the tables have grown,
# until an ANALYZE. A custom plan knows $2 (the session id, never NULL), folds the
# condition to true and plans nothing of it; the generic plan keeps the subquery, which
# it prices at a hundred million rows, so it is never chosen.
_CUSTOM_PLANS_ONLY = (
    "AND ($2::text IS NOT NULL OR (SELECT count(*) FROM generate_series(1, 100000000)) >= 0)"
)
# The record columns and the session row of the generic loads (`Statements.generic_load_all`).
_RECORD_COLUMNS = (
    "o.session_id, o.user_id, o.state, o.version, o.created_at, o.updated_at, o.expires_at,"
    " o.event_count, o.lineage, o.fork_source, o.fork_version, o.fork_event"
)
_SESSION_ROW = (
    "FROM {s}.agentsessions_sessions o WHERE o.namespace = $1 AND o.session_id = $2"
    " AND (o.expires_at IS NULL OR o.expires_at > $3)"
)


@dataclass(frozen=True)
class Statements:
    """Every statement, schema-qualified. Fields hold templates until `statements` fills them."""

    # -- schema --
    version_table: str = VERSION_TABLE
    current_version: str = "SELECT max(version) FROM {s}.agentsessions_schema_version"
    record_version: str = (
        "INSERT INTO {s}.agentsessions_schema_version (version) VALUES ($1) "
        "ON CONFLICT (version) DO NOTHING"
    )

    # -- create --
    # $1 ns, then the record (encode_record): $2 id, $3 user, $4 state, $5 version,
    # $6 created (now), $7 updated, $8 expires, $9 event count, $10 lineage
    insert_session: str = """
        INSERT INTO {s}.agentsessions_sessions (namespace, session_id, user_id, state,
            version, created_at, updated_at, expires_at, event_count, lineage)
        VALUES ($1, $2, $3, $4::json, $5, $6, $7, $8, $9, $10)
        ON CONFLICT (namespace, session_id) DO NOTHING
        RETURNING true
    """
    replace_expired: str = """
        UPDATE {s}.agentsessions_sessions
        SET user_id = $3, state = $4::json, version = $5, event_count = $9,
            created_at = $6, updated_at = $7, expires_at = $8, save_tokens = '{}',
            first_position = 0, lineage = $10, fork_source = NULL, fork_version = NULL,
            fork_event = NULL
        WHERE namespace = $1 AND session_id = $2 AND expires_at <= $6
        RETURNING true
    """
    session_exists: str = (
        "SELECT true FROM {s}.agentsessions_sessions WHERE namespace = $1 AND session_id = $2"
    )
    delete_events: str = (
        "DELETE FROM {s}.agentsessions_events WHERE namespace = $1 AND session_id = $2"
    )
    delete_archive: str = (
        "DELETE FROM {s}.agentsessions_archive WHERE namespace = $1 AND session_id = $2"
    )
    # $1 ns, $2 id, $3 now
    load_archive: str = """
        SELECT ARRAY(SELECT a.data::text FROM {s}.agentsessions_archive a
                     WHERE a.namespace = $1 AND a.session_id = $2
                     ORDER BY a.version, a.position)
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
    """

    # -- restore: the record exactly as given, then its events, in one transaction --
    # $1 ns, $2..$9 the record as for a create, $10 lineage, $11 now, $12..$14 the
    # fork origin (source, version, cut event; NULL for a session that is no fork)
    restore_session: str = """
        INSERT INTO {s}.agentsessions_sessions (namespace, session_id, user_id, state,
            version, created_at, updated_at, expires_at, event_count, lineage,
            fork_source, fork_version, fork_event)
        VALUES ($1, $2, $3, $4::json, $5, $6, $7, $8, $9, $10, $12, $13, $14)
        ON CONFLICT (namespace, session_id) DO UPDATE SET
            user_id = excluded.user_id, state = excluded.state, version = excluded.version,
            event_count = excluded.event_count, created_at = excluded.created_at,
            updated_at = excluded.updated_at, expires_at = excluded.expires_at,
            first_position = 0, save_tokens = '{}', lineage = excluded.lineage,
            fork_source = excluded.fork_source, fork_version = excluded.fork_version,
            fork_event = excluded.fork_event
        WHERE {s}.agentsessions_sessions.expires_at <= $11
        RETURNING (xmax::text <> '0') AS replaced
    """
    # $1 ns, $2 id, $3 event texts (positions 0..n-1)
    restore_events: str = """
        INSERT INTO {s}.agentsessions_events (namespace, session_id, position, data)
        SELECT $1, $2, u.ord - 1, u.data::json
        FROM unnest($3::text[]) WITH ORDINALITY AS u(data, ord)
    """

    # -- load: one statement, so the record and its events come from one snapshot --
    # The columns are SessionRecord's fields in order, then the events.
    # $1 ns, $2 id, $3 now [, $4 last_events]
    load_record: str = """
        SELECT session_id, user_id, state, version, created_at, updated_at, expires_at,
               event_count, lineage, fork_source, fork_version, fork_event,
               NULL::text[] AS events
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
        {custom_plans_only}
    """
    load_all: str = """
        SELECT session_id, user_id, state, version, created_at, updated_at, expires_at,
               event_count, lineage, fork_source, fork_version, fork_event,
               ARRAY(SELECT e.data::text FROM {s}.agentsessions_events e
                     WHERE e.namespace = $1 AND e.session_id = $2
                     ORDER BY e.position) AS events
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
        {custom_plans_only}
    """
    # $4 the caller's event count, $5 its lineage: the events after them while the
    # lineage is unchanged, else all of them (see SessionManager._load_since).
    load_since: str = """
        SELECT session_id, user_id, state, version, created_at, updated_at, expires_at,
               event_count, lineage, fork_source, fork_version, fork_event,
               ARRAY(SELECT e.data::text FROM {s}.agentsessions_events e
                     WHERE e.namespace = $1 AND e.session_id = $2
                       AND e.position >= first_position
                                         + CASE WHEN lineage = $5 AND event_count >= $4
                                                THEN $4 ELSE 0 END
                     ORDER BY e.position) AS events
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
        {custom_plans_only}
    """
    load_last: str = """
        SELECT session_id, user_id, state, version, created_at, updated_at, expires_at,
               event_count, lineage, fork_source, fork_version, fork_event,
               ARRAY(SELECT w.data::text
                     FROM (SELECT e.position, e.data FROM {s}.agentsessions_events e
                           WHERE e.namespace = $1 AND e.session_id = $2
                           ORDER BY e.position DESC LIMIT $4) w
                     ORDER BY w.position) AS events
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
        {custom_plans_only}
    """

    # The same four loads in a form whose plan does not depend on the values: the events
    # are matched on the session row's columns (a unique key lookup, one row whatever the
    # values) and last N's limit comes through a one-row subquery. PostgreSQL's plan
    # cache keeps a statement's generic plan only when it costs no more than the custom
    # plans it has made so far; with the id in sight, a custom plan prices a session
    # missing from the statistics' common values at fewer events than the generic plan's
    # average, so the plain statements are planned again at every call, and planning
    # costs more than running them. These are planned once per connection. A plan made
    # on the statistics of a near-empty table scans it whole until the next ANALYZE, so
    # the manager sends these only once the tables' statistics count `SOUND_STATISTICS`
    # rows (see `statistics_sound`).
    generic_load_record: str = """
        SELECT {record_columns}, NULL::text[] AS events
        {session_row}
    """
    generic_load_all: str = """
        SELECT {record_columns},
               ARRAY(SELECT e.data::text FROM {s}.agentsessions_events e
                     WHERE e.namespace = o.namespace AND e.session_id = o.session_id
                     ORDER BY e.position) AS events
        {session_row}
    """
    generic_load_since: str = """
        SELECT {record_columns},
               ARRAY(SELECT e.data::text FROM {s}.agentsessions_events e
                     WHERE e.namespace = o.namespace AND e.session_id = o.session_id
                       AND e.position >= o.first_position
                                         + CASE WHEN o.lineage = $5 AND o.event_count >= $4
                                                THEN $4 ELSE 0 END
                     ORDER BY e.position) AS events
        {session_row}
    """
    generic_load_last: str = """
        SELECT {record_columns},
               ARRAY(SELECT w.data::text
                     FROM (SELECT e.position, e.data FROM {s}.agentsessions_events e
                           WHERE e.namespace = o.namespace AND e.session_id = o.session_id
                           ORDER BY e.position DESC LIMIT (SELECT $4::bigint)) w
                     ORDER BY w.position) AS events
        {session_row}
    """

    # True once both tables' statistics count at least $1 rows: a plan made then reads
    # one session by its primary key however large the tables grow.
    statistics_sound: str = """
        SELECT count(*) = 2 AND min(reltuples) >= $1 FROM pg_class
        WHERE oid IN ('{s}.agentsessions_sessions'::regclass,
                      '{s}.agentsessions_events'::regclass)
    """

    # -- fork: one transaction, the source row share-locked so that no save lands in
    # between; the events are copied row to row by the server --
    # $1 ns, $2 source id, $3 now
    fork_source: str = """
        SELECT user_id, state::text, version, event_count, first_position
        FROM {s}.agentsessions_sessions
        WHERE namespace = $1 AND session_id = $2 AND (expires_at IS NULL OR expires_at > $3)
        FOR SHARE
    """
    # $1 ns, $2 source id, $3 the cut event's id
    find_event: str = """
        SELECT position FROM {s}.agentsessions_events
        WHERE namespace = $1 AND session_id = $2 AND data->>'id' = $3
        LIMIT 1
    """
    # $1 ns, $2 new id, $3 the source's first position, $4 source id, $5 end position
    copy_events: str = """
        INSERT INTO {s}.agentsessions_events (namespace, session_id, position, data)
        SELECT namespace, $2, position - $3, data FROM {s}.agentsessions_events
        WHERE namespace = $1 AND session_id = $4 AND position < $5
    """

    # -- save: see `save_statement` --

    # -- delete --
    # $1 ns, $2 id, $3 now
    delete_session: str = """
        DELETE FROM {s}.agentsessions_sessions WHERE namespace = $1 AND session_id = $2
        RETURNING (expires_at IS NULL OR expires_at > $3)
    """
    # $1 ns, $2 user, $3 now
    delete_user_sessions: str = """
        DELETE FROM {s}.agentsessions_sessions WHERE namespace = $1 AND user_id = $2
        RETURNING session_id, (expires_at IS NULL OR expires_at > $3) AS live
    """
    # $1 ns, $2 ids
    delete_events_of: str = """
        DELETE FROM {s}.agentsessions_events
        WHERE namespace = $1 AND session_id = ANY($2::text[])
    """
    delete_archive_of: str = """
        DELETE FROM {s}.agentsessions_archive
        WHERE namespace = $1 AND session_id = ANY($2::text[])
    """
    # $1 ns, $2 now, $3 batch size. SKIP LOCKED: a purge never waits on (or blocks) a
    # session that is being written; whatever it skips, the next purge takes. The rows
    # are deleted by the ctids of the locking scan, so the delete can only be a TID scan
    # or a sequential one (priced by the table's real size): locked by this transaction,
    # those rows can neither move nor stop being expired. Joined back on the key, a plan
    # made on statistics of an emptied table ran the locking scan once per expired row.
    purge_batch: str = """
        DELETE FROM {s}.agentsessions_sessions
        WHERE ctid = ANY(ARRAY(
            SELECT ctid FROM {s}.agentsessions_sessions
            WHERE namespace = $1 AND expires_at <= $2
            LIMIT $3 FOR UPDATE SKIP LOCKED))
        RETURNING session_id
    """


@lru_cache(maxsize=64)
def statements(schema: str) -> Statements:
    """The statements with *schema* filled in (cached: many managers share a schema)."""
    quoted = quote_ident(schema)
    filled = {
        field.name: getattr(Statements, field.name)
        .replace("{custom_plans_only}", _CUSTOM_PLANS_ONLY)
        .replace("{record_columns}", _RECORD_COLUMNS)
        .replace("{session_row}", _SESSION_ROW)
        .replace("{s}", quoted)
        for field in fields(Statements)
    }
    return Statements(**filled)


def _with_outcome(parts: list[str], schema: str, *, token: int, lineage: int) -> str:
    """A conditional write's statement: *parts* (CTE ``s`` the guarded UPDATE) followed by
    the one row that says how it went, shared by save, compaction and rewind.

    The row is 0 when the write landed now (``s``) or earlier (the token $*token* is among
    the stored ones), else the stored version (`OTHER_LIFE` when the version matches but
    the lineage $*lineage* does not), else -1 (no live session). $1 is the namespace, $2
    the id, $3 the expected version and $4 now, in every statement.
    """
    outcome = """
        SELECT COALESCE(
            (SELECT 0 FROM s),
            (SELECT 0 FROM {s}.agentsessions_sessions
             WHERE namespace = $1 AND session_id = $2 AND ${token}::text = ANY(save_tokens)),
            (SELECT CASE WHEN version = $3 AND ${lineage}::text <> '' AND lineage <> ${lineage}
                         THEN {other_life} ELSE version END
             FROM {s}.agentsessions_sessions
             WHERE namespace = $1 AND session_id = $2
               AND (expires_at IS NULL OR expires_at > $4)),
            -1)
        """
    sql = "".join([*parts, outcome]).replace("{kept}", str(TOKENS_KEPT))
    sql = sql.replace("{other_life}", str(OTHER_LIFE))
    sql = sql.replace("{token}", str(token)).replace("{lineage}", str(lineage))
    return sql.replace("{s}", quote_ident(schema))


@lru_cache(maxsize=256)
def save_statement(schema: str, *, truncate: bool, insert: bool, upsert: bool) -> str:
    """The single statement of a save: check the version, write the record, move events.

    One statement is one implicit transaction and one round trip. Parameters: $1 ns,
    $2 id, $3 expected version, $4 now, $5 state, $6 new version, $7 expires_at,
    $8 new event count, $9 the save's token, $10 the lineage, $11 the expected
    lineage ("" skips its check) [, $12 first new position, $13 new event texts].

    The update's version check is what makes a stale save fail: a concurrent save of
    the same session blocks on the row lock and then sees the new version. The event
    statements read ``FROM s`` / ``EXISTS (SELECT FROM s)``, so they do nothing unless
    the update matched. A truncating save deletes positions past the new end and
    upserts the rest: the two touch disjoint rows, since the sub-statements of one
    statement run in an unspecified order against one snapshot.

    The events travel as ``text[]``, cast to json in SQL: asyncpg has no built-in codec
    for ``json[]`` and would spend three round trips introspecting it on every new
    connection.

    The token is stored with the new version (the last `TOKENS_KEPT` are kept), and
    a save whose token is already stored writes nothing: it is the retry of a save
    that landed.

    The result is 0 when saved or when the token was already stored; otherwise the
    live stored version or -1 (not stored or expired), read in the statement's
    snapshot. A stored version equal to the expected one means the row changed after
    that snapshot was taken (a racing save, maybe this save's own earlier attempt):
    inconclusive, run the statement again; `OTHER_LIFE` means it is the expected
    version but not the expected lineage: the copy is of an earlier life of the id
    (lineages are random, so a later snapshot cannot bring the expected one back).
    """
    parts = [
        """
        WITH s AS (
            UPDATE {s}.agentsessions_sessions
            SET state = $5::json, version = $6, updated_at = $4, expires_at = $7,
                event_count = $8,
                save_tokens = (ARRAY[$9::text] || save_tokens)[1:{kept}], lineage = $10
            WHERE namespace = $1 AND session_id = $2 AND version = $3
              AND (expires_at IS NULL OR expires_at > $4)
              AND ($11::text = '' OR lineage = $11)
              AND NOT ($9::text = ANY(save_tokens))
            RETURNING first_position
        )"""
    ]
    if truncate:
        parts.append(
            """, d AS (
            DELETE FROM {s}.agentsessions_events e USING s
            WHERE e.namespace = $1 AND e.session_id = $2
              AND e.position >= s.first_position + $8
        )"""
        )
    if insert:
        conflict = (
            "ON CONFLICT (namespace, session_id, position) DO UPDATE SET data = excluded.data"
            if upsert
            else ""
        )
        parts.append(
            """, i AS (
            INSERT INTO {s}.agentsessions_events (namespace, session_id, position, data)
            SELECT $1, $2, s.first_position + $12 + u.ord - 1, u.data::json
            FROM s, unnest($13::text[]) WITH ORDINALITY AS u(data, ord)
            {conflict}
        )""".replace("{conflict}", conflict)
        )
    return _with_outcome(parts, schema, token=9, lineage=11)


@lru_cache(maxsize=64)
def compact_statement(schema: str, *, archive: bool) -> str:
    """The single statement of a compaction (see `agentsessions.backend.CompactRequest`).

    Parameters: $1 ns, $2 id, $3 expected version, $4 now, $5 new version, $6 updated,
    $7 expires_at, $8 new event count, $9 token, $10 shift (replaced - new events, what
    the first position moves by), $11 new event texts, $12 lineage, $13 the expected
    lineage ("" skips its check) [, $14 replaced: archive only].

    Only the prefix is touched: the session's first position moves by the shift, the
    rows below the new first position are deleted, and the new events take the
    positions from it to the cut, upserted over the replaced rows there (the
    sub-statements of one statement see one snapshot, so the delete and the upsert
    touch disjoint rows). The archive copies the replaced rows from that snapshot,
    server-side. The result is what `save_statement` returns.
    """
    parts = [
        """
        WITH s AS (
            UPDATE {s}.agentsessions_sessions
            SET version = $5, updated_at = $6, expires_at = $7, event_count = $8,
                save_tokens = (ARRAY[$9::text] || save_tokens)[1:{kept}],
                first_position = first_position + $10, lineage = $12
            WHERE namespace = $1 AND session_id = $2 AND version = $3
              AND (expires_at IS NULL OR expires_at > $4)
              AND ($13::text = '' OR lineage = $13)
              AND NOT ($9::text = ANY(save_tokens))
            RETURNING first_position
        ), d AS (
            DELETE FROM {s}.agentsessions_events e USING s
            WHERE e.namespace = $1 AND e.session_id = $2 AND e.position < s.first_position
        ), i AS (
            INSERT INTO {s}.agentsessions_events (namespace, session_id, position, data)
            SELECT $1, $2, s.first_position + u.ord - 1, u.data::json
            FROM s, unnest($11::text[]) WITH ORDINALITY AS u(data, ord)
            ON CONFLICT (namespace, session_id, position) DO UPDATE SET data = excluded.data
        )"""
    ]
    if archive:
        parts.append(
            """, a AS (
            INSERT INTO {s}.agentsessions_archive
                (namespace, session_id, version, position, data)
            SELECT $1, $2, $3, e.position - (s.first_position - $10), e.data
            FROM s, {s}.agentsessions_events e
            WHERE e.namespace = $1 AND e.session_id = $2
              AND e.position < s.first_position - $10 + $14
        )"""
        )
    return _with_outcome(parts, schema, token=9, lineage=13)


@lru_cache(maxsize=64)
def rewind_statement(schema: str, *, archive: bool) -> str:
    """The single statement of a rewind (see `agentsessions.backend.RewindRequest`).

    Parameters: $1 ns, $2 id, $3 expected version, $4 now, $5 new version, $6 updated,
    $7 expires_at, $8 new event count (what is kept), $9 token, $10 lineage, $11 the
    expected lineage ("" skips its check). The tail past the kept events is deleted
    (and, with *archive*, copied to the archive first, from the same snapshot). The
    result is what `save_statement` returns.
    """
    parts = [
        """
        WITH s AS (
            UPDATE {s}.agentsessions_sessions
            SET version = $5, updated_at = $6, expires_at = $7, event_count = $8,
                save_tokens = (ARRAY[$9::text] || save_tokens)[1:{kept}], lineage = $10
            WHERE namespace = $1 AND session_id = $2 AND version = $3
              AND (expires_at IS NULL OR expires_at > $4)
              AND ($11::text = '' OR lineage = $11)
              AND NOT ($9::text = ANY(save_tokens))
            RETURNING first_position
        ), d AS (
            DELETE FROM {s}.agentsessions_events e USING s
            WHERE e.namespace = $1 AND e.session_id = $2
              AND e.position >= s.first_position + $8
        )"""
    ]
    if archive:
        parts.append(
            """, a AS (
            INSERT INTO {s}.agentsessions_archive
                (namespace, session_id, version, position, data)
            SELECT $1, $2, $3, e.position - s.first_position, e.data
            FROM s, {s}.agentsessions_events e
            WHERE e.namespace = $1 AND e.session_id = $2
              AND e.position >= s.first_position + $8
        )"""
        )
    return _with_outcome(parts, schema, token=9, lineage=11)


@lru_cache(maxsize=256)
def list_forks_statement(schema: str, *, by_user: bool, paged: bool) -> str:
    """A page of one session's forks, as `list_statement`. Parameters: $1 ns, $2 now,
    $3 limit, $4 source id [, $5 user] [, then the cursor's created_at, session_id]."""
    where = ["namespace = $1", "fork_source = $4", "(expires_at IS NULL OR expires_at > $2)"]
    if by_user:
        where.append("user_id = $5")
    if paged:
        first = 6 if by_user else 5
        where.append(f"(created_at, session_id) < (${first}, ${first + 1})")
    sql = (
        "SELECT session_id, user_id, created_at, updated_at, event_count, version, "
        "fork_source, fork_version, fork_event "
        "FROM {s}.agentsessions_sessions WHERE "
        + " AND ".join(where)
        + " ORDER BY created_at DESC, session_id DESC LIMIT $3"
    )
    return sql.replace("{s}", quote_ident(schema))


@lru_cache(maxsize=256)
def list_statement(schema: str, *, by_user: bool, paged: bool) -> str:
    """A listing page, newest first, read in index order from the matching index.

    Parameters: $1 ns, $2 now, $3 limit [, $4 user] [, then created_at, session_id of
    the cursor]. Separate statements rather than ``$4 IS NULL OR ...`` so that each
    prepared plan is a plain index range scan (keyset pagination on the row comparison).
    """
    where = ["namespace = $1", "(expires_at IS NULL OR expires_at > $2)"]
    if by_user:
        where.append("user_id = $4")
    if paged:
        first = 5 if by_user else 4
        where.append(f"(created_at, session_id) < (${first}, ${first + 1})")
    sql = (
        "SELECT session_id, user_id, created_at, updated_at, event_count, version, "
        "fork_source, fork_version, fork_event "
        "FROM {s}.agentsessions_sessions WHERE "
        + " AND ".join(where)
        + " ORDER BY created_at DESC, session_id DESC LIMIT $3"
    )
    return sql.replace("{s}", quote_ident(schema))
