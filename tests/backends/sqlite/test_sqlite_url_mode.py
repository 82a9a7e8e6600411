"""URL mode on SQLite: the whole kit on a bare URL, with no adopter code, is green on a
file (the write-lock clause included: another process holds the file's lock) and on
``:memory:``, its storage clauses read through the inventory agentsessions-sqlite registers
(the kit reaches SQLite through its entry point, as every other backend)."""

from __future__ import annotations

import ast
from pathlib import Path

import agentsessions_conformance
from agentsessions import connect
from agentsessions_conformance import find_inventory, find_write_lock
from agentsessions_sqlite._conformance import sqlite_inventory
from conformance._run import assert_url_mode_green, run_url_mode


def test_the_kit_finds_sqlite_through_its_entry_point(tmp_path: Path) -> None:
    # Found as URL mode finds them; nothing connects.
    on_file = connect(f"sqlite:///{tmp_path / 'kit.db'}")
    assert find_inventory(on_file) is sqlite_inventory
    found = find_write_lock(on_file, 1.5)
    assert isinstance(found, tuple), f"expected a lock-holding command, found {found!r}"
    command, options = found
    assert str(tmp_path / "kit.db") in command and options == {"busy_timeout": 1.5}
    in_memory = find_write_lock(connect("sqlite:///:memory:"), 1.5)
    assert isinstance(in_memory, str) and "inside this process" in in_memory
    assert find_write_lock(connect("memory://"), 1.5) is None


def test_the_kit_never_imports_the_sqlite_distribution() -> None:
    kit = Path(agentsessions_conformance.__file__).parent
    importers = sorted(
        str(path.relative_to(kit))
        for path in kit.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        and any(
            name.startswith("agentsessions_sqlite")
            for name in (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
        )
    )
    assert not importers, f"the kit must reach SQLite through its entry point: {importers}"


def test_url_mode_runs_every_clause_green_on_a_file(tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, f"sqlite:///{tmp_path / 'kit.db'}")
    assert_url_mode_green(run, least=220)
    assert run.report is not None
    outcomes = {c["test"]: c["outcome"] for c in run.report["clauses"]}
    assert outcomes["test_file_lock_held_by_another_process_fails_writes_within_the_wait"] == (
        "passed"
    )


def test_url_mode_runs_every_clause_green_in_memory(tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, "sqlite:///:memory:")
    assert_url_mode_green(run, least=220)
