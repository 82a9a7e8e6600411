"""URL mode on SQLite: the whole kit on a bare URL, with no adopter code, is green on a
file (the write-lock clause included: another process holds the file's lock) and on
``:memory:``, its storage clauses read through the inventory the kit registers itself."""

from __future__ import annotations

from pathlib import Path

from conformance._run import assert_url_mode_green, run_url_mode


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
