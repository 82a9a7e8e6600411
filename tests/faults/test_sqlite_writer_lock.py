"""SQLite: another process's long write transaction never blocks a reader, not even a
fresh manager opening the file; writers give up at their deadline."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from agentsessions import BackendTimeoutError, connect

from faults._tools import MARGIN, timed

pytestmark = pytest.mark.faults

HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE agentsessions_sessions SET state = '{\\"held\\": 1}'")
print("locked", flush=True)
sys.stdin.read()  # hold the write lock until the test closes our stdin
conn.execute("ROLLBACK")
"""


async def test_a_fresh_manager_opens_and_reads_while_another_process_writes(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'locked.db'}"
    async with connect(url) as setup:
        session = await setup.create("kept")
        session.add_event("user", "hello")
        await setup.save(session)

    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        HOLDER,
        str(tmp_path / "locked.db"),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None
        ready = await asyncio.wait_for(holder.stdout.readline(), 60)
        assert ready.decode().strip() == "locked"
        fresh = connect(url, timeout=2)
        try:
            start = time.monotonic()
            stored = await fresh.get("kept")  # opens the manager, then reads
            took = time.monotonic() - start
            assert stored is not None and [e.content for e in stored.events] == ["hello"]
            assert stored.state == {}  # the other process's write is not committed
            assert took < 1.0, f"opening and reading waited {took:.2f} s for the writer"
            listed = await fresh.list_sessions()
            assert [item.session_id for item in listed.items] == ["kept"]

            # A write waits for the lock, but no longer than the deadline.
            stored.add_event("user", "blocked")
            took, error = await timed(fresh.save(stored))
            assert isinstance(error, BackendTimeoutError), repr(error)
            assert took < 2 + MARGIN
        finally:
            assert holder.stdin is not None
            holder.stdin.close()
            await asyncio.wait_for(holder.wait(), 30)
        # The lock is gone: the same manager writes (the same save, sent again).
        await fresh.save(stored)
        again = await fresh.get("kept")
        assert again is not None and [e.content for e in again.events] == ["hello", "blocked"]
        await fresh.close()
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()
