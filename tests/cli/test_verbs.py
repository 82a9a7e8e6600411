"""Which verbs the command offers: its own, plus those other distributions register."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import subprocess
import sys
from typing import Any

import pytest
from agentsessions_cli import ENTRY_POINT_GROUP, build_parser, main

CLI_VERBS = {
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
    assert _verbs() == CLI_VERBS | {"bench", "conformance"}


def test_without_other_distributions_only_the_commands_own_verbs_are_listed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(importlib.metadata, "entry_points", _only())
    assert _verbs() == CLI_VERBS
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
    assert not {name for name in imported if name.startswith(("agentsessions_cli", "rich"))}


def test_the_command_is_its_own_package_over_the_public_library() -> None:
    import agentsessions_cli

    assert agentsessions_cli.main is main
    assert agentsessions_cli.ENTRY_POINT_GROUP == "agentsessions.cli"
    # The library holds no command line: neither the old private package nor a __main__.
    for name in ("agentsessions._cli", "agentsessions.__main__", "agentsessions.demo"):
        assert importlib.util.find_spec(name) is None, name
