"""The operator's verbs, end to end, across real backends."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentsessions import connect

Run = Callable[..., subprocess.CompletedProcess[str]]
CLI = [sys.executable, "-m", "agentsessions_cli"]


def _with_namespace(url: str, namespace: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}namespace={namespace}"


async def _populate(url: str, count: int, *, users: int = 3) -> None:
    async with connect(url) as manager:
        for index in range(count):
            session = await manager.create(
                f"s{index:04d}", f"user{index % users}", state={"n": index, "ünï": ["😀", None]}
            )
            session.add_event("user", f"hello {index}", channel="web")
            session.add_event("assistant", {"text": f"hi {index}", "score": index / 3})
            await manager.save(session)


def test_import_reports_a_malformed_line_and_writes_nothing(cli: Run, tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    asyncio.run(_populate(source, 3))
    exported = cli("export", source).stdout.splitlines()
    broken = [*exported[:2], '{"session_id": "x", "events": "not a list"}', exported[2]]
    (tmp_path / "bad.jsonl").write_text("\n".join(broken) + "\n")
    target = f"sqlite:///{tmp_path / 'target.db'}"
    result = cli("import", target, str(tmp_path / "bad.jsonl"))
    assert result.returncode == 2
    assert "bad.jsonl:3: events" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "target.db").exists(), "a malformed import wrote something"


def test_import_never_overwrites(cli: Run, tmp_path: Path) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    asyncio.run(_populate(source, 2))
    path = tmp_path / "a.jsonl"
    cli("export", source, "-o", str(path))
    target = f"sqlite:///{tmp_path / 'target.db'}"
    assert cli("import", target, str(path)).returncode == 0
    failed = cli("import", target, str(path))
    assert failed.returncode == 1 and "already exists" in failed.stderr
    skipped = cli("import", target, str(path), "--on-exists", "skip")
    assert skipped.returncode == 0 and "2 skipped" in skipped.stderr


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_copy_resumes_to_completion(
    cli: Run, tmp_path: Path, how: signal.Signals
) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    target_path = tmp_path / "target.db"
    target = f"sqlite:///{target_path}"
    asyncio.run(_populate(source, 400))
    process = subprocess.Popen(
        [*CLI, "copy", source, target], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if target_path.exists() and asyncio.run(_count(target)) >= 1:
            break
        time.sleep(0.02)
    process.send_signal(how)
    _, stderr = process.communicate(timeout=60)
    copied = asyncio.run(_count(target))
    assert 0 < copied < 400, "the copy was not interrupted midway"
    if how == signal.SIGINT:
        assert process.returncode == 130, stderr
        assert "Traceback" not in stderr
        assert "interrupted; copied:" in stderr
        assert "run the same command again to resume" in stderr

    resumed = cli("copy", source, target)
    assert resumed.returncode == 0, resumed.stderr
    assert "verified" in resumed.stderr
    assert f"{copied} skipped" in resumed.stderr
    assert f"{400 - copied} created" in resumed.stderr


async def _count(url: str) -> int:
    async with connect(url) as manager:
        page = await manager.list_sessions(limit=1000)
        return len(page.items)


def test_ls_show_rm_erase_and_purge(cli: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    asyncio.run(_populate(url, 5))
    listing = [json.loads(line) for line in cli("ls", url, "--json").stdout.splitlines()]
    assert [row["session_id"] for row in listing] == ["s0004", "s0003", "s0002", "s0001", "s0000"]
    assert all(row["event_count"] == 2 for row in listing)
    limited = cli("ls", url, "--json", "--limit", "2", "--user", "user1").stdout.splitlines()
    assert [json.loads(line)["session_id"] for line in limited] == ["s0004", "s0001"]

    shown = cli("show", url, "s0003", "--json")
    data: dict[str, Any] = json.loads(shown.stdout)
    assert data["state"]["n"] == 3 and len(data["events"]) == 2
    readable = cli("show", url, "s0003", "--last", "1")
    assert "hi 3" in readable.stdout and "hello 3" not in readable.stdout

    assert cli("rm", url, "s0003").returncode == 0
    missing = cli("rm", url, "s0003")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    refused = cli("erase-user", url, "user0")  # no terminal, no --yes
    assert refused.returncode == 2 and "--yes" in refused.stderr
    erased = cli("erase-user", url, "user0", "--yes")
    assert erased.returncode == 0 and "erased 1 sessions" in erased.stderr  # s0003 went above
    purged = cli("purge-expired", url)
    assert purged.returncode == 0 and "purged 0" in purged.stderr


def test_errors_are_one_line_with_exit_codes_and_masked_passwords(cli: Run) -> None:
    unknown = cli("ls", "nosuch://x")
    assert unknown.returncode == 2 and "nosuch" in unknown.stderr
    down = cli("ls", "postgresql://app:hunter2@127.0.0.1:1/db")
    assert down.returncode in (2, 3)
    for result in (unknown, down):
        assert "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert "hunter2" not in down.stderr + down.stdout


def test_backends_lists_installed_schemes(cli: Run) -> None:
    result = cli("backends", "--json")
    assert result.returncode == 0
    rows = {row["scheme"]: row for row in json.loads(result.stdout)["backends"]}
    assert rows["memory"]["distribution"] == "agentsessions"
    assert rows["memory"]["capabilities"]["ttl"] is True


def test_help_documents_exit_codes() -> None:
    out = subprocess.run(
        [*CLI, "copy", "--help"], capture_output=True, text=True, env={**os.environ}, check=True
    ).stdout
    assert "exit codes" in out and "130" in out
    assert sys.executable
