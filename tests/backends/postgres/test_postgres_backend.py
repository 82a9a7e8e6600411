"""PostgreSQL-specific behaviour the conformance kit cannot see: storage layout, options,
statements per operation, migrations, purging, masking."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import asyncpg
import pydantic_core
import pytest
import pytest_asyncio
from agentsessions import (
    BackendUnavailableError,
    Event,
    InvalidOptionError,
    SessionConflictError,
    SessionNotFoundError,
    connect,
)
from agentsessions_postgres import PostgresOptions, PostgresSessionManager
from agentsessions_postgres import _manager as manager_module
from agentsessions_postgres._schema import (
    LATEST_VERSION,
    SOUND_STATISTICS,
    quote_ident,
    statements,
)
from agentsessions_testservers import free_port

pytestmark = pytest.mark.postgres


def with_query(url: str, **params: object) -> str:
    """*url* with query parameters appended."""
    query = "&".join(f"{name}={value}" for name, value in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


async def drop_schema(url: str, schema: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
    finally:
        await connection.close()


def pg(url: str, **options: Any) -> PostgresSessionManager:
    manager = connect(url, **options)
    assert isinstance(manager, PostgresSessionManager)
    return manager


@pytest_asyncio.fixture
async def admin(postgres_url: str) -> AsyncIterator[asyncpg.Connection[Any]]:
    """A plain asyncpg connection to look at what the manager stored."""
    connection = await asyncpg.connect(postgres_url)
    yield connection
    await connection.close()


@pytest_asyncio.fixture
async def manager(schema_url: str) -> AsyncIterator[PostgresSessionManager]:
    async with pg(schema_url) as opened:
        yield opened


class StatementLog:
    """Every statement the manager's only pooled connection sends (pool size 1)."""

    def __init__(self) -> None:
        self.queries: list[str] = []

    def __call__(self, record: Any) -> None:
        self.queries.append(" ".join(record.query.split()))

    async def attach(self, manager: PostgresSessionManager) -> None:
        async with manager._pool.acquire() as connection:
            connection.add_query_logger(self)

    async def taken(self) -> list[str]:
        await asyncio.sleep(0)  # asyncpg calls loggers with call_soon
        queries, self.queries = self.queries, []
        return queries


# -- plugin and URLs ------------------------------------------------------------------


def test_plugin_serves_both_schemes_without_importing_asyncpg() -> None:
    code = (
        "import sys, agentsessions\n"
        "backends = agentsessions.installed_backends()\n"
        "assert backends['postgresql'].distribution == 'agentsessions-postgres'\n"
        "assert backends['postgres'] == backends['postgresql']\n"
        "assert 'asyncpg' not in sys.modules, 'the plugin imported asyncpg'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_postgres_scheme_works_like_postgresql(postgres_url: str, schema: str) -> None:
    url = with_query(postgres_url.replace("postgresql://", "postgres://", 1), schema=schema)
    async with pg(url) as manager:
        await manager.create("a", "u")
        stored = await manager.get("a")
        assert stored is not None
        assert stored.user_id == "u"


def test_driver_parameters_stay_in_the_url_and_options_do_not() -> None:
    manager = pg(
        "postgresql://app:pw@db.example:6432/sessions"
        "?sslmode=require&application_name=bot&schema=app&max_pool_size=3&ttl=60"
    )
    assert manager._url == (
        "postgresql://app:pw@db.example:6432/sessions?sslmode=require&application_name=bot"
    )
    options = manager.options
    assert isinstance(options, PostgresOptions)
    assert (options.schema, options.max_pool_size, options.ttl) == ("app", 3, 60)


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("bogus=1", "unknown option 'bogus'"),
        ("schema=Upper", "schema"),
        ("schema=a-b", "schema"),
        ("schema=pg_mine", "reserved"),
        ("max_pool_size=0", "max_pool_size"),
        ("min_pool_size=5&max_pool_size=2", "min_pool_size (5) is larger than max_pool_size"),
        ("statement_timeout=-1", "statement_timeout"),
        ("connect_timeout=0", "connect_timeout"),
        ("pgbouncer=maybe", "pgbouncer"),
        ("namespace=no-dash", "namespace"),
    ],
)
def test_bad_options_are_rejected_by_name(query: str, named: str) -> None:
    with pytest.raises(InvalidOptionError, match=re.escape(named)):
        connect(f"postgresql://postgres@127.0.0.1/test?{query}")


def test_with_options_keeps_the_schema() -> None:
    manager = pg("postgresql://postgres@127.0.0.1/test?schema=app&max_pool_size=2")
    other = manager.with_options(namespace="tenant")
    assert isinstance(other.options, PostgresOptions)
    assert (other.options.schema, other.options.max_pool_size) == ("app", 2)
    assert other.options.namespace == "tenant"


# -- password masking -------------------------------------------------------------------


def test_password_is_masked_in_repr_and_url() -> None:
    manager = pg("postgresql://app:s3cr3t-pw@127.0.0.1:5432/test?password=other-s3cr3t")
    for text in (repr(manager), manager.url):
        assert "s3cr3t" not in text
        assert "***" in text


async def test_unreachable_server_raises_unavailable_without_the_password() -> None:
    port = free_port()  # nothing listens there
    manager = pg(f"postgresql://app:s3cr3t-pw@127.0.0.1:{port}/test?connect_timeout=2")
    with pytest.raises(BackendUnavailableError) as caught:
        await manager.get("anything")
    assert "s3cr3t-pw" not in str(caught.value)
    assert "s3cr3t-pw" not in repr(caught.value)
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
    assert f"127.0.0.1:{port}" in str(caught.value)
    await manager.close()


async def test_wrong_database_raises_unavailable_naming_the_reason(postgres_url: str) -> None:
    base = postgres_url.rsplit("/", 1)[0]
    manager = pg(f"{base}/no_such_database_here")
    with pytest.raises(BackendUnavailableError, match="no_such_database_here"):
        await manager.get("a")
    await manager.close()


# -- storage layout and fidelity ----------------------------------------------------------


async def test_stored_text_is_exactly_what_was_saved(
    manager: PostgresSessionManager, admin: asyncpg.Connection[Any], schema: str
) -> None:
    # The values jsonb would alter: NUL in strings, key order, huge floats, -0.0.
    awkward = {"zeta": "x\x00y", "alpha": [1e300, -0.0, 2**63 - 1], "mid": {"b": 1, "a": 2}}
    session = await manager.create("fidelity", state=awkward)
    event = Event(author="user", content=awkward, metadata={"z": 1, "a": 2})
    session.events.append(event)
    await manager.save(session)

    row = await admin.fetchrow(
        f"SELECT state, pg_typeof(state)::text AS kind FROM {quote_ident(schema)}"
        ".agentsessions_sessions WHERE session_id = 'fidelity'"
    )
    assert row is not None
    assert row["kind"] == "json"
    # What the manager encoded (pydantic-core's float spelling, e.g. 1e300 or 1e+300,
    # depends on its version), byte for byte.
    assert row["state"] == pydantic_core.to_json(awkward).decode()
    data = await admin.fetchval(
        f"SELECT data FROM {quote_ident(schema)}.agentsessions_events WHERE session_id = 'fidelity'"
    )
    assert data == event.model_dump_json()

    loaded = await manager.get("fidelity")
    assert loaded is not None
    assert list(loaded.state) == ["zeta", "alpha", "mid"]
    assert list(loaded.state["mid"]) == ["b", "a"]
    assert loaded.state == awkward
    assert str(loaded.state["alpha"][1]) == "-0.0"
    assert loaded.events == [event]


async def test_timestamps_come_back_aware_utc_to_the_microsecond(
    manager: PostgresSessionManager,
) -> None:
    created = await manager.create("times")
    loaded = await manager.get("times")
    assert loaded is not None
    assert loaded.created_at == created.created_at
    assert loaded.created_at.utcoffset() == timedelta(0)
    assert loaded.created_at.microsecond == created.created_at.microsecond


async def test_each_namespace_sees_only_its_rows_in_one_schema(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    async with pg(schema_url, namespace="one") as one, pg(schema_url, namespace="two") as two:
        await one.create("same-id", "u1")
        await two.create("same-id", "u2")
        first, second = await one.get("same-id"), await two.get("same-id")
        assert first is not None and second is not None
        assert (first.user_id, second.user_id) == ("u1", "u2")
        assert await one.delete_user("u2") == 0
    namespaces = await admin.fetch(
        f"SELECT namespace FROM {quote_ident(schema)}.agentsessions_sessions ORDER BY 1"
    )
    assert [row[0] for row in namespaces] == ["one", "two"]


# -- statements per operation ---------------------------------------------------------------


async def test_load_and_save_are_one_statement_each(schema_url: str) -> None:
    log = StatementLog()
    async with pg(schema_url, min_pool_size=1, max_pool_size=1) as manager:
        await log.attach(manager)
        session = await manager.create("rt")
        assert len(await log.taken()) == 1

        session.add_event("user", "hello")
        session.add_event("assistant", "hi")
        session.state["turns"] = 1
        await manager.save(session)  # append: version check, record, both events
        assert len(await log.taken()) == 1

        session.state["turns"] = 2
        await manager.save(session)  # state only
        assert len(await log.taken()) == 1

        session.events[1:] = [Event(author="assistant", content="edited")]
        await manager.save(session)  # rewrite the tail
        assert len(await log.taken()) == 1

        for last_events in (None, 0, 1):
            await manager.get("rt", last_events=last_events)
            assert len(await log.taken()) == 1
        await manager.list_sessions()
        assert len(await log.taken()) == 1
        loaded = await manager.get("rt")
        assert loaded is not None
        assert [event.content for event in loaded.events] == ["hello", "edited"]


async def _plan_counts(manager: PostgresSessionManager) -> dict[str, tuple[int, int]]:
    """The load statements prepared on the manager's one connection: text -> (generic
    plans used, custom plans made)."""
    async with manager._pool.acquire() as connection:
        rows = await connection.fetch(
            "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
        )
    sql = manager._sql
    loads = {
        sql.load_all, sql.load_record, sql.load_last, sql.load_since,
        sql.generic_load_all, sql.generic_load_record, sql.generic_load_last,
        sql.generic_load_since,
    }  # fmt: skip
    return {row[0]: (row[1], row[2]) for row in rows if row[0] in loads}


async def _load_often(manager: PostgresSessionManager, session_id: str) -> None:
    for _ in range(8):  # past the five custom plans PostgreSQL makes before judging
        for last_events in (None, 0, 3):
            assert await manager.get(session_id, last_events=last_events) is not None
        await manager._load_since(session_id, 0, "", datetime.now(timezone.utc))


async def test_loads_on_a_new_store_are_planned_at_every_call(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    """A plan kept by a connection of a new store would be made on near-empty tables
    (here analyzed empty) and scan them whole once they have grown: the plain loads
    are planned at every call instead, each time on the tables as they are."""
    async with pg(schema_url, min_pool_size=1, max_pool_size=1) as manager:
        await manager.create("new")
        await admin.execute(f"ANALYZE {quote_ident(schema)}.agentsessions_sessions")
        await admin.execute(f"ANALYZE {quote_ident(schema)}.agentsessions_events")
        await _load_often(manager, "new")
        counts = await _plan_counts(manager)
        sql = manager._sql
        assert set(counts) == {sql.load_all, sql.load_record, sql.load_last, sql.load_since}
        assert all(generic == 0 and custom == 8 for generic, custom in counts.values())


async def test_loads_keep_one_plan_per_connection_once_statistics_are_sound(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    table = f"{quote_ident(schema)}.agentsessions"
    async with pg(schema_url) as manager:
        await manager.create("warm")
    await admin.execute(
        f"INSERT INTO {table}_sessions (namespace, session_id, state, version, event_count,"
        " created_at, updated_at) SELECT 'other', 's' || g, '{}', 1, 1, now(), now()"
        f" FROM generate_series(1, {SOUND_STATISTICS}) g"
    )
    await admin.execute(
        f"INSERT INTO {table}_events SELECT 'other', 's' || g, 0, '{{}}'"
        f" FROM generate_series(1, {SOUND_STATISTICS}) g"
    )
    await admin.execute(f"ANALYZE {table}_sessions")
    await admin.execute(f"ANALYZE {table}_events")
    async with pg(schema_url, min_pool_size=1, max_pool_size=1) as manager:
        await _load_often(manager, "warm")
        counts = await _plan_counts(manager)
        sql = manager._sql
        generic = {
            sql.generic_load_all, sql.generic_load_record, sql.generic_load_last,
            sql.generic_load_since,
        }  # fmt: skip
        assert set(counts) == generic
        # five custom plans, then the generic one, kept
        assert all(counts[text] == (3, 5) for text in generic)
        async with manager._pool.acquire() as connection:
            name = await connection.fetchval(
                "SELECT name FROM pg_prepared_statements WHERE statement = $1",
                sql.generic_load_all,
            )
            plan = await connection.fetch(f"EXPLAIN EXECUTE {name}('', 'warm', now())")
    text = "\n".join(row[0] for row in plan)
    assert "agentsessions_sessions_pkey" in text and "agentsessions_events_pkey" in text
    assert "Seq Scan" not in text


async def test_stale_save_changes_nothing(
    manager: PostgresSessionManager, admin: asyncpg.Connection[Any], schema: str
) -> None:
    first = await manager.create("stale")
    second = await manager.get("stale")
    assert second is not None
    first.add_event("user", "winner")
    await manager.save(first)
    second.add_event("user", "loser")
    second.state["x"] = 1
    with pytest.raises(SessionConflictError, match="stored version is 2"):
        await manager.save(second)
    rows = await admin.fetch(
        f"SELECT data FROM {quote_ident(schema)}.agentsessions_events WHERE session_id = 'stale'"
    )
    assert [json.loads(row[0])["content"] for row in rows] == ["winner"]


async def test_saving_a_deleted_session_is_not_found(manager: PostgresSessionManager) -> None:
    session = await manager.create("gone")
    assert await manager.delete("gone")
    session.add_event("user", "late")
    with pytest.raises(SessionNotFoundError):
        await manager.save(session)


# -- expiry ----------------------------------------------------------------------------------


async def test_create_over_an_expired_session_drops_its_events(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    async with pg(schema_url, ttl=60) as manager:
        old = await manager.create("reborn")
        old.add_event("user", "old")
        await manager.save(old)
        await admin.execute(
            f"UPDATE {quote_ident(schema)}.agentsessions_sessions SET expires_at = $1",
            datetime.now(timezone.utc) - timedelta(seconds=1),
        )
        assert await manager.get("reborn") is None
        await manager.create("reborn", "new-owner")
        reborn = await manager.get("reborn")
        assert reborn is not None
        assert (reborn.user_id, reborn.events, reborn.version) == ("new-owner", [], 1)
    count = await admin.fetchval(f"SELECT count(*) FROM {quote_ident(schema)}.agentsessions_events")
    assert count == 0


async def test_purge_deletes_expired_sessions_in_batches_and_keeps_live_ones(
    schema_url: str,
    admin: asyncpg.Connection[Any],
    schema: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(manager_module, "PURGE_BATCH", 3)
    table = f"{quote_ident(schema)}.agentsessions_sessions"
    async with (
        pg(schema_url, ttl=60) as manager,
        pg(schema_url, ttl=60, namespace="other") as other,
    ):
        for index in range(8):
            session = await manager.create(f"doomed-{index}")
            session.add_event("user", "bye")
            await manager.save(session)
        await manager.create("alive")
        await other.create("doomed-0")  # another namespace: not this manager's to purge
        await admin.execute(
            f"UPDATE {table} SET expires_at = $1 WHERE session_id LIKE 'doomed-%'",
            datetime.now(timezone.utc) - timedelta(seconds=1),
        )
        assert await manager.purge_expired() == 8
        assert await manager.purge_expired() == 0
        assert await manager.get("alive") is not None
    remaining = await admin.fetch(f"SELECT namespace, session_id FROM {table} ORDER BY 1, 2")
    assert [tuple(row) for row in remaining] == [("", "alive"), ("other", "doomed-0")]
    events = await admin.fetchval(
        f"SELECT count(*) FROM {quote_ident(schema)}.agentsessions_events"
    )
    assert events == 0


def _plan_nodes(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """*plan* and every node below it (EXPLAIN's JSON form)."""
    found = [plan]
    for child in plan.get("Plans", []):
        found += _plan_nodes(child)
    return found


async def test_a_purge_batch_locks_once_and_deletes_at_most_a_batch_on_a_generic_plan(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    """The purge statement's generic plan, made while the statistics say the table is
    nearly empty (as a long-lived connection's cached plan can be), must still run the
    locking scan once and delete one batch: joined back on the key, such a plan ran it
    once per expired row, deleted them all in one statement, and took quadratic time."""
    table = f"{quote_ident(schema)}.agentsessions_sessions"
    async with pg(schema_url) as manager:
        for index in range(300):
            await manager.create(f"gone-{index:03d}")
    await admin.execute(f"DELETE FROM {table}")
    await admin.execute(f"ANALYZE {table}")  # statistics: an empty table
    async with pg(schema_url, ttl=60) as manager:
        for index in range(300):
            await manager.create(f"doomed-{index:03d}")
    sql = statements(schema).purge_batch
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    transaction = admin.transaction()
    await transaction.start()
    try:  # EXPLAIN ANALYZE runs the delete: rolled back below
        await admin.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        await admin.execute(f"PREPARE purge_probe(text, timestamptz, int) AS {sql}")
        explained = await admin.fetchval(
            f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE purge_probe('', '{later.isoformat()}', 50)"
        )
    finally:
        await transaction.rollback()
        await admin.execute("DEALLOCATE ALL")
    nodes = _plan_nodes(json.loads(explained)[0]["Plan"])
    locks = [node for node in nodes if node["Node Type"] == "LockRows"]
    assert locks and all(node["Actual Loops"] == 1 for node in locks), nodes
    (delete,) = [node for node in nodes if node.get("Operation") == "Delete"]
    assert delete["Actual Rows"] == 50
    assert await admin.fetchval(f"SELECT count(*) FROM {table}") == 300


async def test_delete_user_removes_events_too(
    manager: PostgresSessionManager, admin: asyncpg.Connection[Any], schema: str
) -> None:
    for index in range(3):
        session = await manager.create(f"mine-{index}", "me")
        session.add_event("user", "x")
        await manager.save(session)
    kept = await manager.create("theirs", "them")
    kept.add_event("user", "y")
    await manager.save(kept)
    assert await manager.delete_user("me") == 3
    rows = await admin.fetch(
        f"SELECT DISTINCT session_id FROM {quote_ident(schema)}.agentsessions_events"
    )
    assert [row[0] for row in rows] == ["theirs"]


# -- migrations ------------------------------------------------------------------------------


async def test_concurrent_first_use_migrates_once(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    managers = [pg(schema_url, min_pool_size=0, max_pool_size=1) for _ in range(8)]
    try:
        await asyncio.gather(*(manager.open() for manager in managers))
        await asyncio.gather(
            *(manager.create(f"from-{index}") for index, manager in enumerate(managers))
        )
    finally:
        await asyncio.gather(*(manager.close() for manager in managers))
    versions = await admin.fetch(
        f"SELECT version FROM {quote_ident(schema)}.agentsessions_schema_version"
    )
    assert [row[0] for row in versions] == list(range(1, LATEST_VERSION + 1))
    count = await admin.fetchval(
        f"SELECT count(*) FROM {quote_ident(schema)}.agentsessions_sessions"
    )
    assert count == 8


async def test_concurrent_first_use_from_processes_migrates_once(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    # Separate interpreters, as when many application processes start together.
    code = (
        "import asyncio, sys, agentsessions\n"
        "async def main():\n"
        "    async with agentsessions.connect(sys.argv[1], min_pool_size=0) as m:\n"
        "        await m.create(sys.argv[2])\n"
        "asyncio.run(main())\n"
    )
    processes = [
        await asyncio.create_subprocess_exec(sys.executable, "-c", code, schema_url, f"p{index}")
        for index in range(6)
    ]
    codes = await asyncio.gather(*(process.wait() for process in processes))
    assert codes == [0] * 6
    versions = await admin.fetch(
        f"SELECT version FROM {quote_ident(schema)}.agentsessions_schema_version"
    )
    assert [row[0] for row in versions] == list(range(1, LATEST_VERSION + 1))


async def test_a_schema_from_a_newer_release_is_refused(
    schema_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    async with pg(schema_url):
        pass
    await admin.execute(
        f"INSERT INTO {quote_ident(schema)}.agentsessions_schema_version (version) VALUES (999)"
    )
    manager = pg(schema_url)
    with pytest.raises(BackendUnavailableError, match="version 999, newer"):
        await manager.open()
    await manager.close()


async def test_an_existing_schema_is_used_without_creating_it(
    postgres_url: str, admin: asyncpg.Connection[Any], schema: str
) -> None:
    # An application role may lack CREATE on the database: a schema made by the DBA
    # must be usable without CREATE SCHEMA.
    role = f"{schema}_app"
    await admin.execute(f"CREATE SCHEMA {quote_ident(schema)}")
    await admin.execute(f"CREATE ROLE {quote_ident(role)} LOGIN")
    try:
        assert not await admin.fetchval(
            "SELECT has_database_privilege($1, current_database(), 'CREATE')", role
        )
        await admin.execute(f"GRANT ALL ON SCHEMA {quote_ident(schema)} TO {quote_ident(role)}")
        url = postgres_url.replace("postgres@", f"{role}@", 1)
        async with pg(with_query(url, schema=schema)) as manager:
            await manager.create("owned")
            assert await manager.get("owned") is not None
    finally:
        await drop_schema(postgres_url, schema)
        await admin.execute(f"DROP ROLE {quote_ident(role)}")


# -- driver settings -------------------------------------------------------------------------


async def test_statement_timeout_is_set_on_the_server(schema_url: str) -> None:
    async with pg(schema_url, statement_timeout=0.25) as manager:
        async with manager._connection() as connection:
            assert await connection.fetchval("SHOW statement_timeout") == "250ms"
        with pytest.raises(asyncpg.exceptions.QueryCanceledError):
            async with manager._connection() as connection:
                await connection.execute("SELECT pg_sleep(2)")
        await manager.create("after-timeout")  # the pool is fine afterwards


async def test_pgbouncer_mode_prepares_nothing_on_the_server(schema_url: str) -> None:
    async def prepared_after_a_turn(manager: PostgresSessionManager) -> int:
        session = await manager.create(f"turn-{manager.options.namespace}")
        session.add_event("user", "hi")
        await manager.save(session)
        assert await manager.get(session.session_id) is not None
        async with manager._connection() as connection:
            count: int = await connection.fetchval("SELECT count(*) FROM pg_prepared_statements")
        return count

    single = {"min_pool_size": 1, "max_pool_size": 1}
    async with pg(schema_url, **single) as normal:
        assert await prepared_after_a_turn(normal) > 0
    async with pg(schema_url, pgbouncer=True, statement_timeout=5, namespace="b", **single) as b:
        assert await prepared_after_a_turn(b) == 0
        async with b._connection() as connection:
            # No startup parameters: the timeout is enforced client-side instead.
            assert await connection.fetchval("SHOW statement_timeout") == "0"


async def test_close_is_idempotent_and_releases_the_pool(schema_url: str) -> None:
    manager = pg(schema_url)
    await manager.create("x")
    pool = manager._pool
    assert pool is not None
    await manager.close()
    await manager.close()
    assert pool.is_closing()
    assert len(manager._pools) == 0
