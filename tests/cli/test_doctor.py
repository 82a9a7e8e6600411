"""``agentsessions doctor URL``: the report, its JSON form, and the exit status by the worst
finding; once as an operator runs it (a subprocess), the rest in-process (faster)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agentsessions import Diagnosis, connect
from agentsessions_cli import main
from agentsessions_testservers import ManagedServer, start_redis

Run = Callable[..., subprocess.CompletedProcess[str]]
SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "doctor.schema.json"


def doctor(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["doctor", *args])
    return code, capsys.readouterr().out


@pytest.fixture(scope="module")
def bare_redis() -> Iterator[ManagedServer]:
    with start_redis() as server:
        yield server


def test_a_redis_without_persistence_fails_the_gate(cli: Run, bare_redis: ManagedServer) -> None:
    done = cli("doctor", bare_redis.url)
    assert done.returncode == 6, done.stderr
    assert "ERROR    redis.persistence" in done.stdout
    assert "appendonly yes" in done.stdout
    assert "common.tls" not in done.stdout  # ok checks only with --all


def test_all_lists_the_checks_that_passed(
    capsys: pytest.CaptureFixture[str], bare_redis: ManagedServer
) -> None:
    code, out = doctor(capsys, "--all", bare_redis.url)
    assert code == 6
    assert "common.tls" in out


def test_fail_on_decides_the_exit_status(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}?synchronous=full"

    async def make() -> None:
        async with connect(url):
            pass

    asyncio.run(make())
    # Made by the library, then locked down: the worst finding is "info" (encryption off).
    os.chmod(path, 0o600)
    assert doctor(capsys, url)[0] == 0
    assert doctor(capsys, "--fail-on", "info", url)[0] == 6
    os.chmod(path, 0o644)
    assert doctor(capsys, url)[0] == 0  # a warning, under the default gate (error)
    assert doctor(capsys, "--fail-on", "warning", url)[0] == 6


def test_json_output_follows_the_committed_schema(
    capsys: pytest.CaptureFixture[str], bare_redis: ManagedServer
) -> None:
    code, out = doctor(capsys, "--json", bare_redis.url)
    assert code == 6
    report = Diagnosis.model_validate_json(out)
    assert report.schema_version == 1
    assert report.worst == "error"
    data = json.loads(out)
    assert {f["check"] for f in data["findings"]} >= {"redis.persistence", "common.tls"}
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.loads(SCHEMA.read_text(encoding="utf-8")))


def test_errors_keep_the_usual_exit_codes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert doctor(capsys, f"sqlite:///{tmp_path}/missing.db")[0] == 2
    assert not (tmp_path / "missing.db").exists()
    assert doctor(capsys, "nosuch://x")[0] == 2
    assert doctor(capsys, "redis://127.0.0.1:1/0?timeout=2")[0] == 3
    with pytest.raises(SystemExit) as exited:
        doctor(capsys, "--fail-on", "fatal", "memory://")
    assert exited.value.code == 2


def test_the_text_report_prints_brackets_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    from datetime import datetime, timezone

    from agentsessions.backend import finding
    from agentsessions_cli._doctor import render

    report = Diagnosis(
        url="redis://[::1]:6379/0",
        backend="RedisSessionManager",
        checked_at=datetime.now(timezone.utc),
        worst="warning",
        findings=(
            finding("redis.eviction", "warning", "policy [b]x[/b]", "means [/]", "fix [red]"),
            finding("common.tls", "ok", "loopback"),
        ),
    )
    render(report, show_ok=False)
    out = capsys.readouterr().out
    assert "redis://[::1]:6379/0" in out
    assert "found: policy [b]x[/b]" in out
    assert "means: means [/]" in out
    assert "fix:   fix [red]" in out
    assert "1 check found nothing wrong (--all lists them)" in out


def test_piped_output_keeps_every_line_whole(tmp_path: Path) -> None:
    # A path long enough that an 80-column layout would break the lines that name it.
    folder = tmp_path / ("a-rather-long-directory-name-" * 4).rstrip("-")
    folder.mkdir()
    path = folder / "sessions.db"
    path.touch()
    path.chmod(0o644)  # so that doctor has a finding that names the file
    env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
    done = subprocess.run(
        [sys.executable, "-m", "agentsessions_cli", "doctor", f"sqlite:///{path}", "--all"],
        capture_output=True,
        text=True,
        env={**env, "NO_COLOR": "1"},
        timeout=120,
    )
    assert str(path) in done.stdout, (
        f"piped doctor output must print the path {path} on one line, got:\n{done.stdout}"
    )
    docs = [line for line in done.stdout.splitlines() if line.lstrip().startswith("docs:")]
    assert docs, f"doctor printed no docs line:\n{done.stdout}"
    for line in docs:
        assert re.fullmatch(r"\s*docs:\s+\S+", line), f"a docs line was broken: {line!r}"
