"""``pip install ./core`` alone: the contract with pydantic and pluggy only, no command line.

One fresh virtualenv (uv, reusing its cache) gets core, then the kit, then the command
line, as a user would install them from the sources; a second gets core and the command
line only. Nothing from this checkout is on their path.
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
import importlib.metadata, importlib.util, json, pathlib, sys
import agentsessions, agentsessions.backend, agentsessions.runtime
package = pathlib.Path(agentsessions.__file__).parent
print(json.dumps({
    "file": agentsessions.__file__,
    "distributions": sorted(
        d.metadata["Name"].lower().replace("_", "-") for d in importlib.metadata.distributions()
    ),
    "rich": importlib.util.find_spec("rich") is not None,
    "cli": importlib.util.find_spec("agentsessions_cli") is not None,
    # Any file of the installed library that looks like the command line or the demo.
    "cli_files": sorted(
        str(path.relative_to(package)) for path in package.rglob("*")
        if "demo" in path.name or "cli" in path.name or path.name == "__main__.py"
    ),
    "cli_loaded": sorted(
        m for m in sys.modules if m.startswith(("agentsessions_cli", "rich")) or "demo" in m
    ),
}))
"""

# The verbs of agentsessions-cli itself, and the command's list of verbs as installed.
CLI_VERBS = [
    "backends",
    "branches",
    "chat",
    "copy",
    "demo",
    "doctor",
    "erase-user",
    "export",
    "fork",
    "import",
    "inspect",
    "ls",
    "purge-expired",
    "rekey",
    "rewind",
    "rm",
    "show",
]
_VERBS = r"""
import json
from agentsessions_cli import build_parser
action = next(a for a in build_parser()._actions if a.dest == "command")
print(json.dumps(sorted(action.choices)))
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
    assert probe["cli"] is False
    assert probe["cli_files"] == []
    assert probe["cli_loaded"] == []
    # No `agentsessions` command: that is agentsessions-cli's.
    assert not (venv / "bin" / "agentsessions").exists()
    assert (
        sorted(path.name for path in (venv / "bin").iterdir() if "agentsessions" in path.name) == []
    )

    importtime = _run(python, "-X", "importtime", "-c", "import agentsessions", cwd=tmp_path)
    _ok(importtime)
    imported = {line.rsplit("|", 1)[-1].strip() for line in importtime.stderr.splitlines()}
    assert "agentsessions" in imported  # the report is there and names our modules
    cli_modules = {
        name
        for name in imported
        if name.startswith(("agentsessions_cli", "rich")) or "demo" in name
    }
    assert cli_modules == set()

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

    # With the command line added: the `agentsessions` script, its verbs and the kit's.
    _ok(_run(uv, "pip", "install", "--quiet", "--python", python, ROOT / "cli", cwd=tmp_path))
    assert json.loads(_ok(_run(python, "-c", _VERBS, cwd=tmp_path))) == sorted(
        [*CLI_VERBS, "conformance"]
    )
    _ok(_run(venv / "bin" / "agentsessions", "conformance", "--help", cwd=tmp_path))


@pytest.mark.slow
def test_core_and_the_command_line_alone_list_only_the_verbs_present(tmp_path: Path) -> None:
    uv = _uv()
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    _ok(_run(uv, "venv", "--quiet", "--python", sys.executable, venv, cwd=tmp_path))
    # Both paths: the cli extra's requirement is agentsessions-cli, not on an index here.
    _ok(
        _run(
            uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            python,
            f"{ROOT / 'core'}[cli]",
            ROOT / "cli",
            cwd=tmp_path,
        )
    )
    probe = json.loads(_ok(_run(python, "-c", _PROBE, cwd=tmp_path)))
    assert set(probe["distributions"]) >= {"agentsessions", "agentsessions-cli", "rich"}
    assert not {name for name in probe["distributions"] if name.endswith(("conformance", "bench"))}
    assert json.loads(_ok(_run(python, "-c", _VERBS, cwd=tmp_path))) == CLI_VERBS
    script = venv / "bin" / "agentsessions"
    listed = _run(script, "backends", "--json", cwd=tmp_path)
    assert [row["scheme"] for row in json.loads(_ok(listed))["backends"]] == ["memory"]
    missing = _run(script, "conformance", "memory://", cwd=tmp_path)
    assert missing.returncode == 2
    assert "invalid choice: 'conformance'" in missing.stderr
