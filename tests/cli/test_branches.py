"""The branching verbs (fork, rewind, branches), end to end on SQLite."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from agentsessions import connect

Run = Callable[..., subprocess.CompletedProcess[str]]


async def _root(url: str) -> list[str]:
    async with connect(url) as manager:
        session = await manager.create("root", "ada", state={"plan": 1})
        for index in range(6):
            session.add_event("user", f"m{index}")
        await manager.save(session)
        return [event.id for event in session.events]


async def _contents(url: str, session_id: str) -> list[object] | None:
    async with connect(url) as manager:
        session = await manager.get(session_id)
        return None if session is None else [event.content for event in session.events]


def test_fork_rewind_and_the_fork_tree(cli: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'branches.db'}"
    ids = asyncio.run(_root(url))
    done = cli("fork", url, "root", "b1", "--at", ids[2])
    assert done.returncode == 0, done.stderr
    assert "3 events" in done.stderr
    assert cli("fork", url, "b1", "b2").returncode == 0
    assert asyncio.run(_contents(url, "b1")) == ["m0", "m1", "m2"]
    assert asyncio.run(_contents(url, "b2")) == ["m0", "m1", "m2"]

    refused = cli("fork", url, "root", "b1")
    assert refused.returncode == 1 and "already exists" in refused.stderr
    assert asyncio.run(_contents(url, "b1")) == ["m0", "m1", "m2"]
    missing = cli("fork", url, "root", "b3", "--at", "no-such-event")
    assert missing.returncode == 2 and "no-such-event" in missing.stderr
    assert asyncio.run(_contents(url, "b3")) is None

    tree = cli("branches", url, "root", "--json")
    assert tree.returncode == 0, tree.stderr
    rows = [json.loads(line) for line in tree.stdout.splitlines()]
    assert [(r["session_id"], r["forked_from"]) for r in rows] == [("b1", "root"), ("b2", "b1")]
    assert rows[0]["event_id"] == ids[2] and rows[0]["source_version"] == 2
    shown = cli("branches", url, "root")
    assert shown.returncode == 0 and "b1: 3 events" in shown.stdout and "b2" in shown.stdout

    rewound = cli("rewind", url, "root", ids[3], "--archive")
    assert rewound.returncode == 0, rewound.stderr
    assert "2 events dropped (archived)" in rewound.stderr
    assert asyncio.run(_contents(url, "root")) == ["m0", "m1", "m2", "m3"]
    bad = cli("rewind", url, "root", "no-such-event")
    assert bad.returncode == 2 and "no-such-event" in bad.stderr
    assert cli("rewind", url, "absent", ids[0]).returncode == 1
    assert cli("branches", url, "absent").returncode == 1
