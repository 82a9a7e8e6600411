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
