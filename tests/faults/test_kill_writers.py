"""Writer processes killed with SIGKILL mid-save, on every backend: nothing they were
told was saved is lost, nothing is stored twice, and the store stays usable.

The writers are processes this test starts (``sys.executable``), killed by their PIDs;
the servers are only used, never signalled.
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from pathlib import Path

import pytest
from agentsessions import Session, connect

pytestmark = pytest.mark.faults

WRITER = str(Path(__file__).with_name("writer.py"))
WRITERS = 3
BACKENDS = ["sqlite", "postgres", "redis", "redis-cluster", "mongo", "mysql"]


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'killed.db'}"
    fixture = {"redis-cluster": "redis_cluster_url"}.get(kind, f"{kind}_url")
    url: str = request.getfixturevalue(fixture)
    return url


async def _read_acks(
    process: asyncio.subprocess.Process, acks: set[str], writing: asyncio.Event
) -> None:
    assert process.stdout is not None
    mine = 0
    for _ in range(1_000_000):  # bounded; ends when the process dies
        line = await process.stdout.readline()
        if not line:
            return
        text = line.decode().strip()
        if text.startswith("ack "):
            acks.add(text[4:])
            mine += 1
            if mine >= 5:
                writing.set()


@pytest.mark.parametrize("kind", BACKENDS)
async def test_writers_killed_mid_save_lose_and_double_nothing(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = _url(kind, request, tmp_path)
    namespace = f"k_{uuid.uuid4().hex[:12]}"
    async with connect(url, namespace=namespace) as manager:
        await manager.create("contended")
    acks: set[str] = set()
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            WRITER,
            url,
            namespace,
            "contended",
            f"p{index}",
            stdout=asyncio.subprocess.PIPE,
        )
        for index in range(WRITERS)
    ]
    writing = [asyncio.Event() for _ in processes]
    readers = [
        asyncio.create_task(_read_acks(process, acks, event))
        for process, event in zip(processes, writing, strict=True)
    ]
    try:
        # Every writer is in its stride (starting an interpreter is slow on a busy box).
        await asyncio.wait_for(asyncio.gather(*(event.wait() for event in writing)), 90)
        for process in processes:
            await asyncio.sleep(random.uniform(0.05, 0.3))
            process.kill()  # SIGKILL, by PID, in the middle of whatever it is doing
        await asyncio.wait_for(asyncio.gather(*(p.wait() for p in processes)), 30)
        await asyncio.wait_for(asyncio.gather(*readers), 30)
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert acks, "no writer acknowledged anything before it was killed"

    async with connect(url, namespace=namespace, timeout=10) as manager:
        stored = await manager.get("contended")
        assert stored is not None
        contents = [event.content for event in stored.events]
        assert acks <= set(contents), f"lost: {sorted(acks - set(contents))[:5]}"
        assert len(contents) == len(set(contents)), "an event was stored twice"
        assert stored.version == 1 + len(contents)
        # Nothing the killed writers held (a lock, a transaction) blocks the next writer.

        def add(session: Session) -> None:
            session.add_event("user", "after")

        await manager.update("contended", add)
        again = await manager.get("contended")
        assert again is not None and [e.content for e in again.events][-1] == "after"
        await manager.delete("contended")
