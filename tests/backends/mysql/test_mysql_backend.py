"""MySQL/MariaDB specifics the kit cannot see: driver errors, server-side kills on
cancellation, migrations under GET_LOCK, and the layout."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import agentsessions
import asyncmy
import pytest
from agentsessions import (
    BackendAuthenticationError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    DatabaseNotFoundError,
    Session,
    connect,
)
from agentsessions_mysql import MySQLSessionManager
from agentsessions_mysql import _manager as manager_module
from agentsessions_mysql._options import connect_arguments
from agentsessions_mysql._schema import LATEST_VERSION, MIGRATIONS, VERSION_TABLE
from asyncmy.errors import OperationalError

pytestmark = pytest.mark.mysql


async def _rows(url: str, sql: str, *args: object) -> list[tuple[object, ...]]:
    connection = await asyncmy.connect(**connect_arguments(url), autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(sql, args or None)
            return list(await cursor.fetchall())
    finally:
        connection.close()


async def test_wrong_password_is_an_authentication_error_without_the_password(
    mysql_url: str,
) -> None:
    args = connect_arguments(mysql_url)
    url = f"mysql://nosuchuser_as:s3cr3tpw@{args['host']}:{args['port']}/{args['db']}"
    try:
        await _rows(url, "SELECT 1")
    except OperationalError:
        pass  # refused, as a server that checks passwords does
    else:  # the private test server runs with --skip-grant-tables: it lets anyone in
        pytest.skip("the server does not check passwords (--skip-grant-tables)")
    manager = connect(url, timeout=5)
    with pytest.raises(BackendAuthenticationError) as caught:
        await manager.get("x")
    await manager.close()
    assert "s3cr3tpw" not in str(caught.value)


async def test_unknown_database_is_database_not_found(mysql_url: str) -> None:
    base = mysql_url.partition("?")[0].rpartition("/")[0]
    manager = connect(f"{base}/agentsessions_mysql_absent_db", timeout=5)
    with pytest.raises(DatabaseNotFoundError):
        await manager.get("x")
    await manager.close()


async def test_a_statement_past_the_deadline_is_killed_on_the_server(
    fresh_database_url: str,
) -> None:
    manager = connect(fresh_database_url, timeout=0.5)
    assert isinstance(manager, MySQLSessionManager)
    async with manager:
        await manager.get("warm")  # the pool and the schema are up
        thread_ids: list[int] = []

        async def sleeper(session_id: str, last_events: object, now: object) -> None:
            async with manager._connection() as connection:
                thread_ids.append(connection.thread_id())
                async with connection.cursor() as cursor:
                    await cursor.execute("SELECT SLEEP(30)")

        manager._load = sleeper  # type: ignore[assignment,method-assign]
        with pytest.raises(BackendTimeoutError):
            await manager.get("slow")
        del manager._load
        (thread_id,) = thread_ids
        for _ in range(50):  # bounded: 5 s at most for the background KILL
            running = await _rows(
                fresh_database_url,
                "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = %s",
                thread_id,
            )
            if not running:
                break
            await asyncio.sleep(0.1)
        assert running == [], "the cancelled statement is still running on the server"
        # The manager goes on working after the abandoned connection.
        assert await manager.get("slow") is None


async def test_concurrent_managers_migrate_exactly_once(fresh_database_url: str) -> None:
    managers = [connect(fresh_database_url) for _ in range(5)]
    try:
        await asyncio.gather(*(manager.open() for manager in managers))
        versions = await _rows(
            fresh_database_url, "SELECT version FROM agentsessions_schema_version"
        )
        assert versions == [(version,) for version in range(1, LATEST_VERSION + 1)]
        session = await managers[0].create("shared")
        session.add_event("user", "hi")
        await managers[1].save(session)
        loaded = await managers[4].get("shared")
        assert loaded is not None and loaded.events[0].content == "hi"
    finally:
        await asyncio.gather(*(manager.close() for manager in managers))


async def test_a_version_1_database_upgrades_to_branching_exactly_once(
    fresh_database_url: str,
) -> None:
    """A database written by the first release (no fork columns) is migrated once by
    managers opening together; its sessions load unchanged and can be forked."""
    for ddl in (VERSION_TABLE, *MIGRATIONS[1]):
        assert isinstance(ddl, str)
        await _rows(fresh_database_url, ddl)
    await _rows(fresh_database_url, "INSERT INTO agentsessions_schema_version VALUES (1, 0)")
    await _rows(
        fresh_database_url,
        "INSERT INTO agentsessions_sessions (namespace, session_id, user_id, state, version,"
        " event_count, created_at, updated_at, lineage) VALUES ('', 'old', 'u', '{\"k\": 1}',"
        " 2, 1, 1000000, 2000000, 'l1')",
    )
    await _rows(
        fresh_database_url,
        "INSERT INTO agentsessions_events VALUES ('', 'old', 0, %s)",
        Session(session_id="old").add_event("user", "kept").model_dump_json(),
    )
    managers = [connect(fresh_database_url) for _ in range(5)]
    try:
        await asyncio.gather(*(manager.open() for manager in managers))
        versions = await _rows(
            fresh_database_url, "SELECT version FROM agentsessions_schema_version ORDER BY 1"
        )
        assert versions == [(1,), (2,)] and LATEST_VERSION == 2
        old = await managers[0].get("old")
        assert old is not None and old.forked_from is None and old.state == {"k": 1}
        assert [event.content for event in old.events] == ["kept"] and old.version == 2
        await managers[1].fork("old", "young")
        fork = await managers[3].get("young")
        assert fork is not None and fork.forked_from is not None
        assert fork.forked_from.version == 2 and fork.state == {"k": 1}
        assert [event.content for event in fork.events] == ["kept"]
        page = await managers[2].list_sessions(forked_from="old")
        assert [summary.session_id for summary in page.items] == ["young"]
    finally:
        await asyncio.gather(*(manager.close() for manager in managers))


async def test_a_migration_applied_but_not_recorded_is_recorded_not_reapplied(
    fresh_database_url: str,
) -> None:
    """DDL commits on its own: a manager that died between the ALTER and recording its
    version leaves the columns in place; the next one finds them and records it."""
    async with connect(fresh_database_url) as manager:
        await manager.create("kept")
    await _rows(fresh_database_url, "DELETE FROM agentsessions_schema_version WHERE version = 2")
    async with connect(fresh_database_url) as manager:
        assert await manager.get("kept") is not None
        await manager.fork("kept", "forked")
    versions = await _rows(
        fresh_database_url, "SELECT version FROM agentsessions_schema_version ORDER BY 1"
    )
    assert versions == [(1,), (2,)]


async def test_the_server_keeps_the_last_32_save_tokens(fresh_database_url: str) -> None:
    """The UPDATE prepends each save's token on the server and keeps 32 of them: after
    40 saves the row holds exactly 32 distinct 32-byte tokens, the newest first."""
    async with connect(fresh_database_url) as manager:
        session = await manager.create("tokens")
        for turn in range(40):
            session.add_event("user", f"turn {turn}")
            await manager.save(session)
        ((stored,),) = await _rows(
            fresh_database_url,
            "SELECT save_tokens FROM agentsessions_sessions WHERE session_id = %s",
            b"tokens",
        )
        assert isinstance(stored, bytes) and len(stored) == 32 * 32
        tokens = [stored[i : i + 32] for i in range(0, len(stored), 32)]
        assert len(set(tokens)) == 32
        assert all(len(token) == 32 and bytes.fromhex(token.decode()) for token in tokens)
        # One more save lands and moves the oldest out; what was written reads back.
        session.add_event("user", "last")
        await manager.save(session)
        ((after,),) = await _rows(
            fresh_database_url,
            "SELECT save_tokens FROM agentsessions_sessions WHERE session_id = %s",
            b"tokens",
        )
        assert isinstance(after, bytes)
        assert len(after) == 32 * 32 and after[32:] == stored[:-32]
        loaded = await manager.get("tokens")
        assert loaded is not None and len(loaded.events) == 41


async def test_a_newer_schema_is_refused(fresh_database_url: str) -> None:
    async with connect(fresh_database_url) as manager:
        await manager.get("x")
    await _rows(
        fresh_database_url,
        "INSERT INTO agentsessions_schema_version VALUES (%s, 0)",
        LATEST_VERSION + 1,
    )
    manager = connect(fresh_database_url)
    with pytest.raises(BackendUnavailableError, match=r"newer|upgrade"):
        await manager.get("x")
    await manager.close()


async def test_tables_are_innodb_utf8mb4_with_binary_ids(fresh_database_url: str) -> None:
    async with connect(fresh_database_url) as manager:
        await manager.create("a")
        await manager.create("a ")  # distinct ids: no PAD SPACE comparison
        assert {s.session_id for s in (await manager.list_sessions()).items} == {"a", "a "}
    engines = await _rows(
        fresh_database_url,
        "SELECT table_name, engine, table_collation FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name LIKE 'agentsessions%%'",
    )
    assert len(engines) == 4
    for _name, engine, collation in engines:
        assert engine == "InnoDB"
        assert str(collation).startswith("utf8mb4")
    stored = await _rows(
        fresh_database_url,
        "SELECT created_at FROM agentsessions_sessions WHERE session_id = %s",
        b"a",
    )
    assert isinstance(stored[0][0], int)  # exact microseconds since the epoch


async def test_concurrent_restores_of_new_ids_all_land(database_url: str) -> None:
    """Many restores at once (as ``agentsessions copy`` sends them) neither deadlock nor
    fail: the row is inserted before anything is read, so no gap locks are taken."""
    async with connect(database_url, max_pool_size=20) as manager:
        sessions = []
        for index in range(100):
            session = Session(session_id=f"r{index:03d}", user_id="u", version=3)
            session.add_event("user", f"hello {index}")
            sessions.append(session)
        await asyncio.gather(*(manager.restore(session) for session in sessions))
        page = await manager.list_sessions(user_id="u", limit=1000)
        assert len(page.items) == 100
        stored = await manager.get("r042")
        assert stored is not None and stored.version == 3
        assert [event.content for event in stored.events] == ["hello 42"]


@pytest.mark.parametrize(
    ("code", "kind"),
    [
        (1045, BackendAuthenticationError),
        (1049, DatabaseNotFoundError),
        (1290, BackendReadOnlyError),  # --read-only server
        (1792, BackendReadOnlyError),  # read-only transaction
        (1969, BackendTimeoutError),  # MariaDB max_statement_time
        (2013, BackendUnavailableError),  # lost connection
    ],
)
def test_server_error_codes_map_to_our_errors(
    code: int, kind: type[BackendUnavailableError]
) -> None:
    manager = connect("mysql://app:pw1234@127.0.0.1:3306/db")
    error = manager._translate(OperationalError(code, "the server's message"))
    assert type(error) is kind
    assert "pw1234" not in str(error)


async def test_a_server_packet_limit_below_the_need_is_refused_at_open(
    fresh_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_module, "MIN_PACKET", 2**40)
    manager = connect(fresh_database_url)
    with pytest.raises(BackendUnavailableError, match="max_allowed_packet"):
        await manager.open()
    await manager.close()


async def test_connections_read_at_repeatable_read(database_url: str) -> None:
    """A load's two selects share one snapshot only under REPEATABLE READ: every
    connection sets it, whatever the server's default."""
    manager = connect(database_url)
    assert isinstance(manager, MySQLSessionManager)
    async with manager, manager._connection() as connection:
        async with connection.cursor() as cursor:
            await cursor.execute("SELECT @@SESSION.tx_isolation")
            (level,) = await cursor.fetchone()
        assert level == "REPEATABLE-READ"


_CONCURRENT_OPENS = """
import asyncio, sys
from agentsessions import connect

async def main():
    managers = [connect(sys.argv[1]) for _ in range(6)]
    await asyncio.gather(*(manager.open() for manager in managers))
    session = await managers[0].create("s")
    session.add_event("user", "hi")
    await managers[1].save(session)
    for manager in managers:
        await manager.close()

asyncio.run(main())
"""


def test_concurrent_first_opens_print_nothing(fresh_database_url: str) -> None:
    # As an application without logging configured runs it: whatever a driver logs at
    # WARNING reaches stderr through logging's last-resort handler.
    done = subprocess.run(
        [sys.executable, "-c", _CONCURRENT_OPENS, fresh_database_url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"concurrent first opens failed: {done.stderr}"
    assert done.stderr == "", (
        f"concurrent first opens of a fresh database must print nothing, printed: {done.stderr!r}"
    )


async def test_connect_timeout_bounds_a_server_that_never_sends_its_handshake() -> None:
    # A server that accepts TCP and stays silent: asyncmy's own timeout covers only the
    # TCP connect, so without ours the call would wait for its whole deadline.
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    manager = agentsessions.connect(
        f"mysql://root@127.0.0.1:{port}/test?connect_timeout=1&timeout=6"
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(BackendUnavailableError) as caught:
            await manager.get("s")
        took = loop.time() - started
    finally:
        await manager.close()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert accepted, "the test server was never reached"
    assert took < 3.0, (
        f"connect_timeout=1 must bound the handshake: get() raised {caught.value!r} "
        f"after {took:.1f} s (timeout=6)"
    )
