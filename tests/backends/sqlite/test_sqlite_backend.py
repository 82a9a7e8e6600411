"""The SQLite backend's own behaviour: URLs, options, schema, storage layout, errors."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import agentsessions
import pytest
from agentsessions import (
    BackendUnavailableError,
    Event,
    InvalidInputError,
    InvalidOptionError,
    SessionExistsError,
)
from agentsessions_sqlite import SQLiteOptions, SQLiteSessionManager, _schema

# -- URLs and options ---------------------------------------------------------------------


def test_relative_url_is_resolved_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    manager = agentsessions.connect("sqlite:///data/sessions.db")
    assert isinstance(manager, SQLiteSessionManager)
    assert manager.path == str(tmp_path / "data" / "sessions.db")
    monkeypatch.chdir("/")
    assert manager.path == str(tmp_path / "data" / "sessions.db")


def test_absolute_url(tmp_path: Path) -> None:
    manager = agentsessions.connect(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(manager, SQLiteSessionManager)
    assert manager.path == str(tmp_path / "x.db")
    assert manager.capabilities.persistent and manager.capabilities.shared


def test_percent_encoded_path(tmp_path: Path) -> None:
    manager = SQLiteSessionManager.from_url(f"sqlite:///{tmp_path}/my%20sessions.db")
    assert manager.path == str(tmp_path / "my sessions.db")


def test_memory_url() -> None:
    manager = agentsessions.connect("sqlite:///:memory:")
    assert isinstance(manager, SQLiteSessionManager)
    assert manager.in_memory
    assert not manager.capabilities.persistent
    assert not manager.capabilities.shared


@pytest.mark.parametrize(
    ("url", "complaint"),
    [
        ("sqlite://", "needs a database path"),
        ("sqlite:///", "needs a database path"),
        ("sqlite://host/x.db", "not a host"),
        ("sqlite:///dir/", "names a directory"),
        ("sqlite:///x.db#frag", "fragment"),
    ],
)
def test_bad_urls_are_refused(url: str, complaint: str) -> None:
    with pytest.raises(InvalidInputError, match=complaint):
        agentsessions.connect(url)


def test_options_from_query_string(tmp_path: Path) -> None:
    manager = agentsessions.connect(
        f"sqlite:///{tmp_path}/x.db?ttl=60&namespace=app_1&busy_timeout=2.5&synchronous=FULL"
    )
    assert isinstance(manager.options, SQLiteOptions)
    assert manager.options.ttl == 60
    assert manager.options.namespace == "app_1"
    assert manager.options.busy_timeout == 2.5
    assert manager.options.synchronous == "full"
    assert "?" not in manager.url


def test_default_options() -> None:
    options = SQLiteSessionManager.from_url("sqlite:///:memory:").options
    assert isinstance(options, SQLiteOptions)
    assert options.busy_timeout == 10.0
    assert options.synchronous == "normal"


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("journal_mode=delete", "unknown option 'journal_mode'"),
        ("busy_timeout=0", "busy_timeout"),
        ("busy_timeout=soon", "busy_timeout"),
        ("synchronous=off", "synchronous"),
        ("ttl=-1", "ttl"),
        ("namespace=no-dashes", "namespace"),
    ],
)
def test_bad_options_are_refused(query: str, named: str) -> None:
    with pytest.raises(InvalidOptionError, match=named):
        agentsessions.connect(f"sqlite:///:memory:?{query}")


def test_entry_point_does_not_import_aiosqlite() -> None:
    code = (
        "import sys, agentsessions\n"
        "spec = agentsessions.installed_backends()['sqlite']\n"
        "assert spec.distribution == 'agentsessions-sqlite', spec\n"
        "assert spec.version, spec\n"
        "assert 'aiosqlite' not in sys.modules, 'the plugin imported aiosqlite'\n"
        "manager = agentsessions.connect('sqlite:///:memory:')\n"
        "assert 'aiosqlite' in sys.modules\n"
        "print(type(manager).__name__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "SQLiteSessionManager"


# -- schema -------------------------------------------------------------------------------


def _stored_version(raw: sqlite3.Connection) -> int:
    (value,) = raw.execute(
        "SELECT value FROM agentsessions_meta WHERE key = 'schema_version'"
    ).fetchone()
    return int(value)


async def test_schema_is_created_and_versioned(
    file_manager: SQLiteSessionManager, raw: sqlite3.Connection
) -> None:
    assert _stored_version(raw) == _schema.SCHEMA_VERSION
    tables = {name for (name,) in raw.execute("SELECT name FROM sqlite_master")}
    assert {"agentsessions_sessions", "agentsessions_events", "agentsessions_meta"} <= tables
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_migration_from_an_older_schema(
    db_url: str, raw: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with agentsessions.connect(db_url) as manager:
        session = await manager.create("kept", "u")
        session.add_event("user", "hello")
        await manager.save(session)
    assert _stored_version(raw) == _schema.SCHEMA_VERSION

    # A later release adds a step; the database written by this release must upgrade.
    step = ("ALTER TABLE agentsessions_sessions ADD COLUMN label TEXT",)
    monkeypatch.setattr(_schema, "MIGRATIONS", [*_schema.MIGRATIONS, step])
    monkeypatch.setattr(_schema.migrate, "__defaults__", (_schema.MIGRATIONS,))
    async with agentsessions.connect(db_url) as manager:
        stored = await manager.get("kept")
    assert stored is not None
    assert [e.content for e in stored.events] == ["hello"]
    assert _stored_version(raw) == _schema.SCHEMA_VERSION + 1
    columns = [row[1] for row in raw.execute("PRAGMA table_info(agentsessions_sessions)")]
    assert "label" in columns


async def test_failed_migration_changes_nothing(
    db_url: str, raw: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with agentsessions.connect(db_url) as manager:
        await manager.create("kept")
    steps = (
        "ALTER TABLE agentsessions_sessions ADD COLUMN label TEXT",
        "CREATE INDEX broken ON no_such_table (x)",
    )
    monkeypatch.setattr(_schema.migrate, "__defaults__", ([*_schema.MIGRATIONS, steps],))
    with pytest.raises(BackendUnavailableError, match="no such table"):
        await agentsessions.connect(db_url).open()
    assert _stored_version(raw) == _schema.SCHEMA_VERSION
    columns = [row[1] for row in raw.execute("PRAGMA table_info(agentsessions_sessions)")]
    assert "label" not in columns, "half a migration was committed"


async def test_newer_schema_is_a_clear_error(db_url: str, raw: sqlite3.Connection) -> None:
    async with agentsessions.connect(db_url) as manager:
        await manager.create("kept")
    raw.execute("UPDATE agentsessions_meta SET value = '99' WHERE key = 'schema_version'")
    manager = agentsessions.connect(db_url)
    with pytest.raises(BackendUnavailableError, match="schema version 99, newer") as info:
        await manager.open()
    assert "upgrade agentsessions-sqlite" in str(info.value)
    assert _stored_version(raw) == 99


async def test_two_managers_creating_the_schema_at_once(db_url: str) -> None:
    managers = [agentsessions.connect(db_url) for _ in range(5)]
    await asyncio.gather(*(m.open() for m in managers))
    for m in managers:
        await m.close()


# -- storage ------------------------------------------------------------------------------


async def test_timestamps_are_integer_microseconds(
    file_manager: SQLiteSessionManager, raw: sqlite3.Connection
) -> None:
    session = await file_manager.create("t")
    created, updated, expires = raw.execute(
        "SELECT created_at, updated_at, expires_at FROM agentsessions_sessions"
        " WHERE session_id = 't'"
    ).fetchone()
    assert isinstance(created, int) and created == updated and expires is None
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    assert epoch + timedelta(microseconds=created) == session.created_at
    stored = await file_manager.get("t")
    assert stored is not None
    assert stored.created_at == session.created_at
    assert stored.created_at.tzinfo is not None and stored.created_at.utcoffset() == timedelta(0)


async def test_append_writes_only_the_new_rows(file_manager: SQLiteSessionManager) -> None:
    session = await file_manager.create("long")
    session.events.extend(Event(author="user", content=i) for i in range(1000))
    await file_manager.save(session)
    writer = file_manager._writer
    assert writer is not None

    before = await writer.call(lambda conn: conn.total_changes)
    session.add_event("user", "one more")
    session.add_event("user", "and another")
    await file_manager.save(session)
    after = await writer.call(lambda conn: conn.total_changes)
    # The session row, plus the two new event rows: nothing of the 1,000 old ones.
    assert after - before == 3

    stored = await file_manager.get("long", last_events=3)
    assert stored is not None
    assert [e.content for e in stored.events] == [999, "one more", "and another"]


async def test_truncating_save_deletes_exactly_the_tail(
    file_manager: SQLiteSessionManager, raw: sqlite3.Connection
) -> None:
    session = await file_manager.create("cut")
    session.events.extend(Event(author="user", content=i) for i in range(10))
    await file_manager.save(session)
    del session.events[6:]
    session.add_event("user", "new")
    await file_manager.save(session)
    rows = raw.execute(
        "SELECT position, json_extract(data, '$.content') FROM agentsessions_events"
        " WHERE session_id = 'cut' ORDER BY position"
    ).fetchall()
    assert rows == [(i, i) for i in range(6)] + [(6, "new")]


async def test_expired_sessions_are_invisible_and_purged(
    db_url: str, raw: sqlite3.Connection
) -> None:
    async with agentsessions.connect(db_url, ttl=3600) as manager:
        for name in ("old", "fresh"):
            session = await manager.create(name, "u")
            session.add_event("user", name)
            await manager.save(session)
        async with manager.with_options(namespace="other") as other:
            await other.create("old")
        # Make "old" expire a second ago, behind the manager's back.
        past = int((datetime.now(timezone.utc).timestamp() - 1) * 1_000_000)
        raw.execute(
            "UPDATE agentsessions_sessions SET expires_at = ? WHERE session_id = 'old'"
            " AND namespace = ''",
            (past,),
        )
        assert await manager.get("old") is None
        assert [s.session_id for s in (await manager.list_sessions()).items] == ["fresh"]
        assert await manager.delete("old") is False

    # delete() above already removed it; make another one to purge.
    async with agentsessions.connect(db_url, ttl=3600) as manager:
        session = await manager.create("old")
        session.add_event("user", "x")
        await manager.save(session)
        raw.execute(
            "UPDATE agentsessions_sessions SET expires_at = ? WHERE session_id = 'old'"
            " AND namespace = ''",
            (past,),
        )
        assert await manager.purge_expired() == 1
        assert await manager.purge_expired() == 0
    remaining = raw.execute(
        "SELECT namespace, session_id FROM agentsessions_sessions ORDER BY 1, 2"
    ).fetchall()
    assert remaining == [("", "fresh"), ("other", "old")]
    events = raw.execute(
        "SELECT DISTINCT session_id FROM agentsessions_events WHERE namespace = ''"
    ).fetchall()
    assert events == [("fresh",)]


async def test_create_over_an_expired_session_replaces_it(
    file_manager: SQLiteSessionManager, raw: sqlite3.Connection
) -> None:
    session = await file_manager.create("reused", "alice", state={"old": True})
    session.events.extend(Event(author="user", content=i) for i in range(5))
    await file_manager.save(session)
    raw.execute("UPDATE agentsessions_sessions SET expires_at = 1 WHERE session_id = 'reused'")

    fresh = await file_manager.create("reused", "bob")
    assert fresh.version == 1
    stored = await file_manager.get("reused")
    assert stored is not None
    assert (stored.user_id, stored.state, stored.events) == ("bob", {}, [])
    (count,) = raw.execute(
        "SELECT count(*) FROM agentsessions_events WHERE session_id = 'reused'"
    ).fetchone()
    assert count == 0
    with pytest.raises(SessionExistsError):
        await file_manager.create("reused")


async def test_memory_managers_do_not_share_a_database() -> None:
    async with agentsessions.connect("sqlite:///:memory:") as first:
        await first.create("only-here")
        async with first.with_options() as second:
            assert await second.get("only-here") is None
        assert await first.get("only-here") is not None


async def test_data_survives_reopening(db_url: str) -> None:
    async with agentsessions.connect(db_url, namespace="n1") as manager:
        session = await manager.create("kept", "u", state={"k": [1, 2]})
        session.add_event("user", {"text": "héllo ✓"})
        await manager.save(session)
    async with agentsessions.connect(db_url, namespace="n1") as manager:
        stored = await manager.get("kept")
    assert stored is not None
    assert stored.state == {"k": [1, 2]}
    assert [e.content for e in stored.events] == [{"text": "héllo ✓"}]
    assert stored.version == 2


# -- concurrency inside one process -------------------------------------------------------


async def test_many_tasks_updating_one_manager(file_manager: SQLiteSessionManager) -> None:
    await file_manager.create("busy")

    async def append(i: int) -> None:
        # group=False: each call loads and saves on its own, so the 50 saves race through
        # the one writer connection (grouped, they would share two saves).
        await file_manager.update("busy", lambda s: s.add_event("user", i), group=False)

    await asyncio.gather(*(append(i) for i in range(50)))
    stored = await file_manager.get("busy")
    assert stored is not None
    assert sorted(e.content for e in stored.events) == list(range(50))
    assert stored.version == 51


async def test_two_managers_on_one_file_race(db_url: str) -> None:
    async with agentsessions.connect(db_url) as a, agentsessions.connect(db_url) as b:
        await a.create("s")
        copy_a, copy_b = await a.get("s"), await b.get("s")
        assert copy_a is not None and copy_b is not None
        copy_a.add_event("user", "a")
        copy_b.add_event("user", "b")
        results = await asyncio.gather(a.save(copy_a), b.save(copy_b), return_exceptions=True)
        assert sorted(type(r).__name__ for r in results) == ["NoneType", "SessionConflictError"]
        winner = "a" if results[0] is None else "b"
        stored = await b.get("s")
        assert stored is not None
        assert [e.content for e in stored.events] == [winner]


async def test_cancelled_save_leaves_no_open_transaction(
    file_manager: SQLiteSessionManager,
) -> None:
    session = await file_manager.create("c")
    session.events.extend(Event(author="user", content=i) for i in range(2000))
    task = asyncio.create_task(file_manager.save(session))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    writer = file_manager._writer
    assert writer is not None
    assert await writer.call(lambda conn: conn.in_transaction) is False
    # The save ran to completion or not at all; either way the store is consistent.
    stored = await file_manager.get("c")
    assert stored is not None
    assert len(stored.events) in (0, 2000)
    assert stored.version == (1 if not stored.events else 2)
    await file_manager.create("after-cancel")


# -- locks held by someone else -----------------------------------------------------------


async def test_a_held_lock_is_waited_for(db_url: str, db_path: Path) -> None:
    async with agentsessions.connect(db_url, busy_timeout=5) as manager:
        session = await manager.create("s")
        other = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        release = threading.Timer(0.2, lambda: other.execute("COMMIT"))
        release.start()
        try:
            session.add_event("user", "waited")
            await manager.save(session)  # blocks until the other writer commits
        finally:
            release.join()
            other.close()
        stored = await manager.get("s")
        assert stored is not None and [e.content for e in stored.events] == ["waited"]


async def test_a_lock_held_past_busy_timeout_is_a_clear_error(db_url: str, db_path: Path) -> None:
    async with agentsessions.connect(db_url, busy_timeout=0.2) as manager:
        session = await manager.create("s")
        other = sqlite3.connect(db_path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            session.add_event("user", "blocked")
            with pytest.raises(BackendUnavailableError, match=r"busy_timeout=0\.2s") as info:
                await manager.save(session)
            assert not isinstance(info.value, sqlite3.Error)
            # Readers are not blocked by a writer in WAL mode.
            assert await manager.get("s") is not None
        finally:
            other.execute("ROLLBACK")
            other.close()
        # Nothing was written, so the same copy saves cleanly once the lock is gone.
        await manager.save(session)
        stored = await manager.get("s")
        assert stored is not None
        assert (stored.version, [e.content for e in stored.events]) == (2, ["blocked"])


# -- failures to open ---------------------------------------------------------------------


async def test_missing_directory(tmp_path: Path) -> None:
    manager = agentsessions.connect(f"sqlite:///{tmp_path}/nowhere/x.db")
    with pytest.raises(BackendUnavailableError, match="does not exist") as info:
        await manager.create("s")
    assert str(tmp_path / "nowhere") in str(info.value)


async def test_path_is_a_directory(tmp_path: Path) -> None:
    (tmp_path / "d.db").mkdir()
    with pytest.raises(BackendUnavailableError, match="cannot open SQLite database"):
        await agentsessions.connect(f"sqlite:///{tmp_path}/d.db").open()


async def test_file_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not a database, just some text" * 200)
    with pytest.raises(BackendUnavailableError, match="not a database"):
        await agentsessions.connect(f"sqlite:///{tmp_path}/junk.db").open()


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="file permissions do not bind the root user",
)
async def test_read_only_directory(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(BackendUnavailableError, match="not writable"):
            await agentsessions.connect(f"sqlite:///{locked}/x.db").open()
    finally:
        locked.chmod(0o700)


async def test_the_private_aiosqlite_api_the_backend_relies_on_is_there(tmp_path: Path) -> None:
    """`Link` runs whole transactions via aiosqlite's private Connection._execute and
    ._conn; if an aiosqlite release changes them, this fails before users do."""
    import inspect

    import aiosqlite

    async with aiosqlite.connect(tmp_path / "probe.db") as conn:
        assert isinstance(conn._conn, sqlite3.Connection)
        assert inspect.iscoroutinefunction(conn._execute)
        assert await conn._execute(lambda: 41 + 1) == 42


_NEVER_CLOSED = """
import asyncio, sys
from agentsessions import connect

manager = connect(sys.argv[1])

async def main():
    session = await manager.create("kept", state={"saved": True})
    for index in range(50):
        session.add_event("user", f"e{index}")
        await manager.save(session)
    print("acknowledged", flush=True)

asyncio.run(main())
# No close(): the program just ends, as the Agents SDK example in the docs does.
"""


def test_a_program_that_never_closes_its_manager_exits_with_its_saves(tmp_path: Path) -> None:
    path = tmp_path / "never-closed.db"
    done = subprocess.run(
        [sys.executable, "-c", _NEVER_CLOSED, f"sqlite:///{path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "acknowledged"

    async def read() -> None:
        async with SQLiteSessionManager.from_url(f"sqlite:///{path}") as manager:
            stored = await manager.get("kept")
            assert stored is not None
            assert stored.state == {"saved": True}
            assert [e.content for e in stored.events] == [f"e{i}" for i in range(50)]

    asyncio.run(read())
    # The exit hook closed the connections: SQLite removes the WAL when the last closes.
    assert not (tmp_path / "never-closed.db-wal").exists()


def test_one_manager_serves_threads_with_their_own_loops(tmp_path: Path) -> None:
    manager = SQLiteSessionManager.from_url(f"sqlite:///{tmp_path / 'threads.db'}")
    asyncio.run(manager.create("shared"))
    threads = 10

    def writer(index: int) -> None:
        def add(session: agentsessions.Session) -> None:
            session.add_event("user", f"t{index}")

        asyncio.run(asyncio.wait_for(manager.update("shared", add), 30))

    workers = [threading.Thread(target=writer, args=(i,), daemon=True) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert not worker.is_alive()

    async def check() -> None:
        stored = await manager.get("shared")
        assert stored is not None
        assert sorted(str(e.content) for e in stored.events) == sorted(
            f"t{i}" for i in range(threads)
        )
        await manager.close()

    asyncio.run(check())


# -- file permissions ---------------------------------------------------------------------


async def test_new_database_files_are_private_to_their_owner(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    old = os.umask(0o022)
    try:
        async with agentsessions.connect(f"sqlite:///{path}") as manager:
            session = await manager.create("s1")
            session.add_event("user", "hi")
            await manager.save(session)
            modes = {
                name: oct(os.stat(tmp_path / name).st_mode & 0o777)
                for name in ("sessions.db", "sessions.db-wal", "sessions.db-shm")
            }
    finally:
        os.umask(old)
    assert modes == dict.fromkeys(modes, "0o600"), (
        f"a new SQLite database and its -wal/-shm must be created 0600, found {modes}"
    )


async def test_an_existing_database_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch()
    path.chmod(0o640)
    async with agentsessions.connect(f"sqlite:///{path}") as manager:
        await manager.create("s1")
    assert oct(path.stat().st_mode & 0o777) == "0o640", "an existing file's mode must be kept"
