"""Several processes on one database file: the setup the README promises works.

Each worker is a separate Python interpreter (``sys.executable``) with its own
connections, so these tests exercise SQLite's file locking, WAL and busy handling,
not anything shared inside one process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import agentsessions

WORKER = str(Path(__file__).with_name("sqlite_worker.py"))
RACERS = 4
ROUNDS = 3


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _result(process: subprocess.Popen[str]) -> dict[str, object]:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, f"worker failed ({process.returncode}): {err}"
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def _wait_all(paths: list[Path], processes: list[subprocess.Popen[str]]) -> None:
    import time

    deadline = time.monotonic() + 120
    while not all(path.exists() for path in paths):
        for process in processes:
            if process.poll() is not None:
                _, err = process.communicate()
                raise AssertionError(f"a worker exited before it was ready: {err}")
        assert time.monotonic() < deadline, "workers never became ready"
        time.sleep(0.01)


async def test_concurrent_saves_from_processes_one_wins(db_url: str, tmp_path: Path) -> None:
    async with agentsessions.connect(db_url) as manager:
        for round_ in range(ROUNDS):
            session_id = f"race-{round_}"
            session = await manager.create(session_id)
            session.add_event("user", "before")
            await manager.save(session)
            go = tmp_path / f"go-{round_}"
            ready = [tmp_path / f"ready-{round_}-{i}" for i in range(RACERS)]
            workers = [
                _start("race", db_url, session_id, f"p{i}", str(ready[i]), str(go))
                for i in range(RACERS)
            ]
            # Every worker has loaded the session at version 2 before any may save.
            _wait_all(ready, workers)
            go.touch()
            results = [_result(worker) for worker in workers]

            errors = [r for r in results if r["outcome"] == "error"]
            assert not errors, f"round {round_}: {errors}"
            saved = [r["name"] for r in results if r["outcome"] == "saved"]
            conflicts = [r for r in results if r["outcome"] == "conflict"]
            assert len(saved) == 1, f"round {round_}: {len(saved)} saves landed: {results}"
            assert len(conflicts) == RACERS - 1

            stored = await manager.get(session_id)
            assert stored is not None
            assert [e.content for e in stored.events] == ["before", saved[0]]
            assert stored.state == {"winner": saved[0]}
            assert stored.version == 3


async def test_concurrent_updates_from_processes_all_land(db_url: str, tmp_path: Path) -> None:
    processes, per_process = 4, 25
    async with agentsessions.connect(db_url) as manager:
        await manager.create("shared")
        go = tmp_path / "go"
        workers = [
            _start("append", db_url, "shared", f"p{i}", str(per_process), str(go))
            for i in range(processes)
        ]
        go.touch()
        results = [_result(worker) for worker in workers]
        assert all(r == {"outcome": "ok", "done": per_process} for r in results), results

        stored = await manager.get("shared")
        assert stored is not None
        contents = [e.content for e in stored.events]
        expected = {f"p{p}:{i}" for p in range(processes) for i in range(per_process)}
        assert len(contents) == len(expected)
        assert set(contents) == expected
        # Each process's own appends stay in the order it made them.
        for p in range(processes):
            mine = [c for c in contents if isinstance(c, str) and c.startswith(f"p{p}:")]
            assert mine == [f"p{p}:{i}" for i in range(per_process)]
        assert stored.version == 1 + processes * per_process
