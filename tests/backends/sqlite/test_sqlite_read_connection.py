"""Which connection a read runs on: the writer when it is idle, the reader otherwise.

SQLite drops a connection's page cache whenever another connection changed the file,
so a read right after our own write is cheaper on the connection that wrote. A read
must still never queue behind a write in flight.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import agentsessions
import pytest
from agentsessions_sqlite import SQLiteSessionManager


@pytest.fixture
async def manager(tmp_path: Path) -> AsyncIterator[SQLiteSessionManager]:
    found = agentsessions.connect(f"sqlite:///{tmp_path}/reads.db")
    assert isinstance(found, SQLiteSessionManager)
    async with found:
        yield found


def _traced(conn: sqlite3.Connection, seen: list[str]) -> None:
    conn.set_trace_callback(seen.append)


async def test_a_read_after_a_write_runs_on_the_idle_writer(
    manager: SQLiteSessionManager,
) -> None:
    session = await manager.create(session_id="warm")
    session.add_event("user", "hello")
    await manager.save(session)
    on_writer: list[str] = []
    on_reader: list[str] = []
    await manager._writer.call(_traced, on_writer)
    await manager._reader.call(_traced, on_reader)

    loaded = await manager.get("warm")
    listed = await manager.list_sessions()

    assert loaded is not None and [e.content for e in loaded.events] == ["hello"]
    assert [s.session_id for s in listed.items] == ["warm"]
    selects = [sql for sql in on_writer if sql.lstrip().upper().startswith("SELECT")]
    assert len(selects) >= 2, (
        "with the writer idle, get() and list_sessions() must run on the writer "
        f"connection (its cache holds what it wrote): the writer ran {on_writer!r}"
    )
    assert not any(sql.lstrip().upper().startswith("SELECT") for sql in on_reader), (
        f"with the writer idle, no read should go to the reader: it ran {on_reader!r}"
    )


async def test_a_read_does_not_queue_behind_a_write_in_flight(
    manager: SQLiteSessionManager,
) -> None:
    session = await manager.create(session_id="busy")
    session.add_event("user", "hello")
    await manager.save(session)
    entered, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)  # bounded: a broken test fails instead of hanging

    held = asyncio.ensure_future(manager._writer.call(hold))
    try:
        assert await asyncio.to_thread(entered.wait, 5), "the writer never ran the held job"
        assert manager._writer.in_flight == 1
        loaded = await asyncio.wait_for(manager.get("busy"), 5)
        assert loaded is not None and [e.content for e in loaded.events] == ["hello"], (
            f"get() while the writer is busy must read the last commit: found {loaded!r}"
        )
        assert not held.done(), "the held writer job finished before the read: nothing tested"
    finally:
        release.set()
        await held
    assert manager._writer.in_flight == 0, "a finished call must leave the writer idle"


async def test_a_cancelled_call_leaves_the_writer_idle(manager: SQLiteSessionManager) -> None:
    entered, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(10)

    held = asyncio.ensure_future(manager._writer.call(hold))
    assert await asyncio.to_thread(entered.wait, 5), "the writer never ran the held job"
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    release.set()
    assert manager._writer.in_flight == 0
    await manager.create(session_id="after")
    assert await manager.get("after") is not None
