"""``pip install ./core`` alone: the contract with pydantic and pluggy only, no command line.

One fresh virtualenv (uv, reusing its cache) gets core, then the kit, as a user would
install them from the sources; nothing from this checkout is on its path.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# pydantic and pluggy with their own dependencies, and nothing else.
CORE_CLOSURE = {
    "agentsessions",
    "annotated-types",
    "pluggy",
    "pydantic",
    "pydantic-core",
    "typing-extensions",
    "typing-inspection",
}

_PROBE = r"""
import importlib.metadata, importlib.util, json, sys
import agentsessions, agentsessions.backend, agentsessions.runtime
print(json.dumps({
    "file": agentsessions.__file__,
    "distributions": sorted(
        d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions()
    ),
    "rich": importlib.util.find_spec("rich") is not None,
    "demo": importlib.util.find_spec("agentsessions.demo") is not None,
    "cli_loaded": sorted(m for m in sys.modules if m.startswith(("agentsessions._cli", "rich"))),
}))
"""


def _uv() -> str:
    # nox passes its own uv (the tests session sets AGENTSESSIONS_UV); else the PATH's.
    uv = os.environ.get("AGENTSESSIONS_UV") or shutil.which("uv")
    if not uv:
        pytest.fail("uv not found: put it on PATH or set AGENTSESSIONS_UV", pytrace=False)
    return uv


def _run(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(arg) for arg in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_core_alone_is_the_contract_and_runs_the_kit_on_memory(tmp_path: Path) -> None:
    uv = _uv()
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    _ok(_run(uv, "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp_path))
    _ok(_run(uv, "pip", "install", "--quiet", "--python", python, ROOT / "core", cwd=tmp_path))

    probe = json.loads(_ok(_run(python, "-c", _PROBE, cwd=tmp_path)))
    assert probe["file"].startswith(str(venv)), probe["file"]  # the installed copy
    assert set(probe["distributions"]) == CORE_CLOSURE
    assert probe["rich"] is False
    assert probe["demo"] is False
    assert probe["cli_loaded"] == []

    importtime = _run(python, "-X", "importtime", "-c", "import agentsessions", cwd=tmp_path)
    _ok(importtime)
    assert "agentsessions._cli" not in importtime.stderr
    assert "rich" not in importtime.stderr

    # The console script is installed with core, and without the extra says what to add.
    script = _run(venv / "bin" / "agentsessions", "ls", "memory://", cwd=tmp_path)
    assert script.returncode == 2
    assert script.stdout == ""
    assert script.stderr.strip().splitlines() == [
        "agentsessions: the command line needs the cli extra: pip install 'agentsessions[cli]'"
    ]

    # The kit brings pytest, still no rich; its memory clauses all pass on this install.
    _ok(
        _run(
            uv, "pip", "install", "--quiet", "--python", python, ROOT / "conformance", cwd=tmp_path
        )
    )
    probe = json.loads(_ok(_run(python, "-c", _PROBE, cwd=tmp_path)))
    assert probe["rich"] is False
    work = tmp_path / "kit"
    work.mkdir()
    # Its own ini file, so that pytest takes this directory as its rootdir and the
    # repository's configuration (pythonpath, conftest files) does not apply.
    (work / "pytest.ini").write_text("[pytest]\n")
    report = work / "report.json"
    kit = _run(
        python,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--session-url",
        "memory://",
        "--conformance-report",
        report,
        cwd=work,
    )
    assert kit.returncode == 0, kit.stdout[-4000:] + kit.stderr[-2000:]
    summary = json.loads(report.read_text())["summary"]
    assert set(summary) <= {"passed", "skipped"}, summary  # skipped: undeclared capabilities
    assert summary["passed"] >= 100, summary
