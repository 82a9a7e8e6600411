"""Run pytest in a child process on a generated test module, as an adopter would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    returncode: int
    output: str
    report: dict[str, Any] | None

    def outcomes(self, suite_suffix: str = "") -> dict[str, set[str]]:
        """Test base name -> the outcomes of its cases, for suites ending in *suite_suffix*."""
        assert self.report is not None, self.output
        found: dict[str, set[str]] = {}
        for clause in self.report["clauses"]:
            if clause["suite"].endswith(suite_suffix):
                found.setdefault(clause["test"].partition("[")[0], set()).add(clause["outcome"])
        return found

    def failing(self, suite_suffix: str = "") -> set[str]:
        return {
            name
            for name, outcomes in self.outcomes(suite_suffix).items()
            if outcomes & {"failed", "error"}
        }


def run_pytest(
    workdir: Path, *args: str, module: str | None = None, env: dict[str, str] | None = None
) -> Run:
    """pytest in *workdir* (its own rootdir, strict asyncio mode: an adopter's defaults)."""
    if module is not None:
        (workdir / "test_adopter.py").write_text(module, encoding="utf-8")
    report = workdir / "report.json"
    child_env = {
        key: value for key, value in os.environ.items() if key != "AGENTSESSIONS_SESSION_URL"
    }
    child_env["PYTHONPATH"] = str(TESTS_DIR)  # for `conformance.broken`
    child_env.update(env or {})
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--tb=short",
            "-o",
            "asyncio_default_fixture_loop_scope=function",
            "--conformance-report",
            str(report),
            *args,
        ],
        cwd=workdir,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return Run(result.returncode, result.stdout + result.stderr, data)


_URL_RUN = """
import sys
from agentsessions_conformance import run

done = run(sys.argv[1], keyword=sys.argv[3] or None, report=sys.argv[2])
sys.exit(done.exit_code)
"""


def run_url_mode(
    workdir: Path, url: str, keyword: str = "", env: dict[str, str] | None = None
) -> Run:
    """The kit's URL mode (what ``agentsessions conformance URL`` runs) in a child process,
    on *url* with no adopter code: only the inventory the backend's distribution registers."""
    report = workdir / "url-report.json"
    child_env = {
        key: value for key, value in os.environ.items() if key != "AGENTSESSIONS_SESSION_URL"
    }
    child_env.update(env or {})
    result = subprocess.run(
        [sys.executable, "-c", _URL_RUN, url, str(report), keyword],
        cwd=workdir,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    data = json.loads(report.read_text()) if report.exists() else None
    return Run(result.returncode, result.stdout + result.stderr, data)


#: The clauses that read storage through the inventory, covering each of its fields
#: (records, events, other, archived): a short URL-mode run where the whole kit already
#: runs through a subclass on the same deployment.
STORAGE_CLAUSES = (
    "delete_removes_events or delete_erases_all_storage or compact_replaces_the_prefix"
    " or compact_archives_only_when_asked or save_appends_events"
    " or save_removes_events_from_end or purge_expired_removes or restore_keeps_every_field"
)


def assert_url_mode_green(run: Run, least: int) -> None:
    """No clause failed, at least *least* passed, and the storage clauses really ran."""
    assert run.report is not None, run.output[-3000:]
    bad = {
        clause["test"]: clause["message"][:500]
        for clause in run.report["clauses"]
        if clause["outcome"] in ("failed", "error")
    }
    assert not bad, bad
    assert run.returncode == 0, run.output[-3000:]
    passed = {c["test"] for c in run.report["clauses"] if c["outcome"] == "passed"}
    assert len(passed) >= least, run.report["summary"]
    # Clauses that read storage through the registered inventory, not the manager.
    assert "test_delete_removes_events" in passed, run.report["summary"]
