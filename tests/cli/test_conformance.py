"""``agentsessions conformance URL``: a clause table, the exit code, a masked URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conformance._run import TESTS_DIR


def _cli(*args: str, code: str | None = None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTSESSIONS_SESSION_URL"}
    env["PYTHONPATH"] = str(TESTS_DIR)
    command = (
        [sys.executable, "-c", code, *args]
        if code
        else [sys.executable, "-m", "agentsessions_cli", *args]
    )
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )


def test_cli_runs_kit_on_memory(tmp_path: Path) -> None:
    report = tmp_path / "out" / "report.json"
    done = _cli(
        "conformance",
        "memory://",
        "-k",
        # Not the wire clauses (their list_sessions and create cases skip on memory).
        "(create or listing or list_) and not wire",
        "--report",
        str(report),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(report.read_text())
    assert data["summary"] == {"passed": len(data["clauses"])}
    # Without -v, passes are counted, not listed.
    assert "test_create_never_overwrites" not in done.stdout, done.stdout
    assert "every clause passed" in done.stdout
    assert f"{len(data['clauses'])} passed" in done.stdout
    assert "MemorySessionManager" in done.stdout
    assert not (tmp_path / ".pytest_cache").exists()


def test_cli_lists_passes_under_verbose(tmp_path: Path) -> None:
    done = _cli(
        "conformance", "memory://", "-v", "-k", "(create or list_) and not wire", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_create_never_overwrites" in done.stdout
    assert "test_list_invalid_limit_raises[0]" in done.stdout  # ids printed, not eaten as markup
    assert "\x1b[" not in done.stdout  # not a terminal: no colour codes


def test_cli_fails_on_broken_backend_and_masks_password(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from agentsessions import register_backend\n"
        "from agentsessions_cli import main\n"
        "from conformance.broken import OverwritingCreateManager\n"
        "register_backend('brokenmem', OverwritingCreateManager)\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    report = tmp_path / "report.json"
    done = _cli(
        "conformance",
        "brokenmem://admin:hunter2@store",
        "-k",
        "create",
        "--report",
        str(report),
        code=code,
        cwd=tmp_path,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed" in done.stdout
    assert "DID NOT RAISE" in done.stdout
    assert "brokenmem://admin:***@store" in done.stdout
    everything = done.stdout + done.stderr + report.read_text()
    assert "hunter2" not in everything


def test_cli_unknown_scheme_is_reported(tmp_path: Path) -> None:
    done = _cli("conformance", "nosuchdb://u:pw@host/x", cwd=tmp_path)
    assert done.returncode != 0
    assert "nosuchdb" in done.stdout + done.stderr
    assert "pw@" not in done.stdout + done.stderr
