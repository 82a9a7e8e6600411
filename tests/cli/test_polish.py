"""The command behaves like a good Unix tool: clear one-line errors, exit codes, pipes."""

from __future__ import annotations

import asyncio
import importlib.metadata
import io
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from agentsessions import connect
from agentsessions_cli import _ops
from rich.console import Console

Run = Callable[..., subprocess.CompletedProcess[str]]
CLI = [sys.executable, "-m", "agentsessions_cli"]


async def _populate(url: str, count: int) -> None:
    async with connect(url) as manager:
        for index in range(count):
            session = await manager.create(f"s{index:04d}", "ada", state={"n": index})
            session.add_event("user", "x" * 200)
            await manager.save(session)


def _one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    "verb",
    [["ls"], ["show", "{url}", "s1"], ["export", "{url}"], ["copy", "{url}", "memory://"]],
)
def test_reading_a_sqlite_file_that_does_not_exist_fails_and_creates_nothing(
    cli: Run, tmp_path: Path, verb: list[str]
) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    args = [part.format(url=url) for part in verb]
    if args == ["ls"]:
        args.append(url)
    result = cli(*args)
    assert result.returncode == 2
    assert f"no SQLite database at {missing}" in _one_line(result)
    assert not missing.exists(), "a read-only command created the database"
    assert list(tmp_path.iterdir()) == []


def test_copy_from_a_missing_sqlite_file_never_reports_verified(cli: Run, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    result = cli("copy", f"sqlite:///{tmp_path / 'typo.db'}", f"sqlite:///{target}")
    assert result.returncode == 2
    assert "verified" not in result.stderr
    assert not target.exists()


def test_version_lists_every_installed_distribution(cli: Run) -> None:
    result = cli("--version")
    assert result.returncode == 0, result.stderr
    versions = dict(line.split() for line in result.stdout.splitlines())
    for name in ("agentsessions", "agentsessions-sqlite", "agentsessions-conformance"):
        assert versions[name] == importlib.metadata.version(name)
    assert result.stdout.splitlines()[0].startswith("agentsessions ")


def test_export_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    asyncio.run(_populate(url, 600))  # far more than a pipe buffer holds
    process = subprocess.Popen(
        [*CLI, "export", url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    first = process.stdout.readline()  # what `| head -n 1` does, then it exits
    process.stdout.close()
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process.returncode == 0
    assert process.stderr is not None
    stderr = process.stderr.read()
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr
    assert json.loads(first)["session_id"] == "s0599"


def test_output_to_a_directory_or_nowhere_names_the_path_given(cli: Run, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    asyncio.run(_populate(url, 1))
    into_dir = cli("export", url, "-o", str(tmp_path))
    assert into_dir.returncode == 2
    assert f"-o {tmp_path}: is a directory" in _one_line(into_dir)
    nowhere = tmp_path / "no" / "such" / "dir" / "all.jsonl"
    missing = cli("export", url, "-o", str(nowhere))
    assert missing.returncode == 2
    assert f"-o {nowhere}: directory {nowhere.parent} does not exist" in _one_line(missing)
    written = cli("export", url, "-o", str(tmp_path / "all.jsonl"))
    assert written.returncode == 0
    assert f"to {tmp_path / 'all.jsonl'}" in written.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["ls", "memory://", "--limit", "0"], "argument --limit: must be at least 1, not 0"),
        (["ls", "memory://", "--limit", "many"], "argument --limit: 'many' is not an integer"),
        (["show", "memory://", "s", "--last", "-1"], "argument --last: must be at least 0"),
        (["ls"], "the following arguments are required: url"),
        (["nosuchverb"], "invalid choice: 'nosuchverb'"),
    ],
)
def test_usage_errors_are_one_line_with_exit_2(cli: Run, args: list[str], expected: str) -> None:
    result = cli(*args)
    assert result.returncode == 2
    line = _one_line(result)
    assert line.startswith("agentsessions: error: ") and expected in line
    assert result.stdout == ""


def test_import_from_stdin_stops_at_the_first_bad_line_before_writing(
    cli: Run, tmp_path: Path
) -> None:
    source = f"sqlite:///{tmp_path / 'source.db'}"
    asyncio.run(_populate(source, 3))
    lines = cli("export", source).stdout.splitlines()
    duplicate = json.loads(lines[1])
    duplicate["events"].append(duplicate["events"][0])
    bad = [lines[0], json.dumps(duplicate), '{"session_id": "x", "version": "v"}', lines[2]]
    target = tmp_path / "target.db"
    for name, kwargs in (("<stdin>", {"stdin": "\n".join(bad) + "\n"}), ("bad.jsonl", {})):
        path = tmp_path / "bad.jsonl"
        path.write_text("\n".join(bad) + "\n")
        arg = "-" if name == "<stdin>" else str(path)
        result = cli("import", f"sqlite:///{target}", arg, **kwargs)
        assert result.returncode == 2
        shown = str(path) if name == "bad.jsonl" else name
        assert f"{shown}:2: events[1]: duplicate event id" in _one_line(result)
        assert not target.exists(), "a malformed import wrote something"


def test_progress_shows_rate_and_time_left_on_a_terminal_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    screen = io.StringIO()
    terminal = Console(file=screen, force_terminal=True, width=120)
    monkeypatch.setattr(_ops, "err_console", terminal)
    with _ops._progress("copying", 10) as advance:
        for _ in range(10):
            advance(1)
            time.sleep(0.02)
    shown = screen.getvalue()
    assert "copying" in shown and "10/10" in shown
    assert "/s" in shown and "0:00:00" in shown
    piped = io.StringIO()
    monkeypatch.setattr(_ops, "err_console", Console(file=piped, force_terminal=False))
    with _ops._progress("copying", 10) as advance:
        advance(10)
    assert piped.getvalue() == ""


def _replace(url: str, *, user: str | None = None, path: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    if user is not None:
        netloc = f"{user}@{netloc}"
    elif "@" in parts.netloc:
        netloc = parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, path=parts.path if path is None else path))


def test_refused_credentials_and_missing_databases_have_their_own_exit_codes(
    cli: Run, postgres_url: str, redis_url: str
) -> None:
    cases = [
        (_replace(postgres_url, user="no_such_role_here:pw"), 4, "authentication failed"),
        (_replace(postgres_url, path="/no_such_database_here"), 5, "no such database"),
        (_replace(redis_url, user="nobody_here:not-the-password"), 4, "authentication failed"),
    ]
    for url, code, words in cases:
        result = cli("ls", url)
        line = _one_line(result)
        assert result.returncode == code, (url, result.stderr)
        assert words in line
        assert "not-the-password" not in line and ":pw@" not in line
    down = cli("ls", "postgresql://app:pw@127.0.0.1:1/db")
    assert down.returncode == 3, down.stderr
