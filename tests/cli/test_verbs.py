"""Which verbs the command offers: core's own, plus those other distributions register."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from typing import Any

import pytest
from agentsessions import _cli
from agentsessions._cli import ENTRY_POINT_GROUP, build_parser, main

CORE_VERBS = {
    "backends",
    "chat",
    "copy",
    "demo",
    "erase-user",
    "export",
    "import",
    "ls",
    "purge-expired",
    "rm",
    "show",
}


def _verbs() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.dest == "command")
    assert action.choices is not None
    return set(action.choices)


def _only(*points: importlib.metadata.EntryPoint) -> Any:
    def entry_points(*, group: str) -> list[importlib.metadata.EntryPoint]:
        assert group == ENTRY_POINT_GROUP
        return list(points)

    return entry_points


def test_kit_and_bench_verbs_come_from_their_distributions() -> None:
    found = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert found == {
        "bench": "agentsessions_bench._cli:register",
        "conformance": "agentsessions_conformance._cli:register",
    }
    assert _verbs() == CORE_VERBS | {"bench", "conformance"}


def test_without_other_distributions_only_core_verbs_are_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", _only())
    assert _verbs() == CORE_VERBS
    with pytest.raises(SystemExit) as exc:
        main(["conformance", "memory://"])
    assert exc.value.code == 2
    assert "invalid choice: 'conformance'" in capsys.readouterr().err


def test_a_broken_plugin_verb_is_reported_and_the_others_still_work(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = importlib.metadata.EntryPoint(
        name="frob", value="no_such_module_xyz:register", group=ENTRY_POINT_GROUP
    )
    clash = importlib.metadata.EntryPoint(
        name="ls", value="no_such_module_xyz:register", group=ENTRY_POINT_GROUP
    )
    monkeypatch.setattr(importlib.metadata, "entry_points", _only(broken, clash))
    assert main(["backends"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # the clash with a built-in verb is ignored, never loaded
    assert "verb 'frob' (no_such_module_xyz:register) could not be loaded" in err
    assert "ModuleNotFoundError" in err


def test_without_rich_the_command_says_which_extra_to_install() -> None:
    # `sys.modules["rich"] = None` makes rich unimportable, as in a venv without the extra.
    code = (
        "import sys\n"
        "sys.modules['rich'] = None\n"
        "from agentsessions._cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "ls", "memory://"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr == f"{_cli._MISSING_CLI}\n"
    assert "pip install 'agentsessions[cli]'" in done.stderr


def test_importing_the_library_imports_no_command_line_module() -> None:
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import agentsessions, agentsessions.runtime"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "agentsessions" in imported
    assert "agentsessions.runtime" in imported
    assert not {name for name in imported if name.startswith(("agentsessions._cli", "rich"))}
