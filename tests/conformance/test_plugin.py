"""The plugin: URL mode, staying out of the way, report header, JSON report, known divergences."""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentsessions_conformance._suite._operations import OPERATIONS

from conformance._run import (
    STORAGE_CLAUSES,
    TESTS_DIR,
    assert_url_mode_green,
    run_pytest,
    run_url_mode,
)

UNRELATED = """
def test_unrelated():
    assert True
"""

ADOPTER = """
import uuid

import pytest_asyncio
from agentsessions import MemorySessionManager
from agentsessions_conformance import SessionManagerTests, memory_inventory

from conformance.broken import OverwritingCreateManager


class TestBroken(SessionManagerTests):
    known_divergences = {DIVERGENCES}

    @pytest_asyncio.fixture
    async def manager(self):
        async with OverwritingCreateManager(f"memory://d-{uuid.uuid4().hex}") as manager:
            yield manager

    async def raw_inventory(self, manager, session_id):
        return memory_inventory(manager, session_id)
"""

# A backend no installed distribution registers an inventory for, and no hook.
NO_INVENTORY = """
import uuid

import pytest_asyncio
from agentsessions_conformance import SessionManagerTests

from conformance.thirdparty import OpaqueManager


class TestNoHook(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self):
        async with OpaqueManager(f"opaque://n-{uuid.uuid4().hex}") as manager:
            yield manager
"""

HANGING = """
import asyncio
import uuid

import pytest_asyncio
from agentsessions import MemorySessionManager
from agentsessions_conformance import SessionManagerTests, memory_inventory


class Hanging(MemorySessionManager):
    async def _load(self, session_id, last_events, now):
        await asyncio.sleep(3600)


class TestHanging(SessionManagerTests):
    time_limit = 30.0  # the command line's limit wins

    @pytest_asyncio.fixture
    async def manager(self):
        async with Hanging(f"memory://h-{uuid.uuid4().hex}") as manager:
            yield manager

    async def raw_inventory(self, manager, session_id):
        return memory_inventory(manager, session_id)
"""

OVERWRITE_CLAUSES = {
    "test_create_never_overwrites": "create is a blind upsert (issue #1)",
    "test_concurrent_creates_exactly_one_wins": "same bug",
    "test_concurrent_creates_across_managers": "same bug",
    "test_loops_in_threads_race_one_create": "same bug",
}


def test_without_url_the_plugin_collects_nothing(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "-q", module=UNRELATED)
    assert run.returncode == 0, run.output
    assert "1 passed" in run.output
    assert "agentsessions conformance" not in run.output
    assert run.report is not None  # asked for explicitly, so written, and empty
    assert run.report["clauses"] == [] and run.report["url_backend"] is None


def test_url_mode_runs_whole_suite_on_memory(tmp_path: Path) -> None:
    # The unrelated module is not collected: URL mode replaces the default paths.
    run = run_pytest(tmp_path, "--session-url", "memory://", module=UNRELATED)
    assert run.returncode == 0, run.output[-3000:]
    assert "test_unrelated" not in run.output
    assert run.report is not None
    # Skipped for what memory lacks: persistence, an event size limit, a network (the
    # wire faults), a file (its write lock), a password and a database in its URL (the
    # error mapping); and for what it has: branching (the clause for backends without it).
    wire = {
        "test_wire_frozen_server_times_out_then_recovers",
        "test_wire_reset_is_backend_unavailable_then_recovers",
        "test_wire_lost_reply_save_retry_lands_exactly_once",
        "test_wire_one_lost_reply_save_lands_once",
        "test_wire_one_lost_reply_update_applies_fn_once",
        "test_wire_refused_connection_is_backend_unavailable",
        "test_file_lock_held_by_another_process_fails_writes_within_the_wait",
        *(
            f"{clause}[{operation}]"
            for clause in (
                "test_wire_frozen_server_every_operation_ends_at_its_deadline",
                "test_wire_outage_every_operation_raises_backend_unavailable",
            )
            for operation in OPERATIONS
        ),
    }
    errors = {
        "test_wrong_password_is_backend_authentication_error",
        "test_missing_database_is_database_not_found",
    }
    expected = {
        "test_persistent_data_survives_reconnect",
        "test_event_size_limit_is_exact",
        "test_without_branching_every_call_is_refused",
    }
    assert run.report["summary"] == {
        "passed": len(run.report["clauses"]) - len(expected | wire | errors),
        "skipped": len(expected | wire | errors),
    }
    skipped = {c["test"] for c in run.report["clauses"] if c["outcome"] == "skipped"}
    assert skipped == expected | wire | errors
    assert len(run.report["clauses"]) > 100
    header = [
        line for line in run.output.splitlines() if line.startswith("agentsessions conformance:")
    ]
    assert header and "MemorySessionManager at memory://" in header[0]
    assert "shared=True" in header[0] and "persistent=False" in header[0]


def test_url_mode_from_environment_plus_explicit_paths(tmp_path: Path) -> None:
    (tmp_path / "test_mine.py").write_text(UNRELATED)
    run = run_pytest(
        tmp_path,
        "-k",
        "unrelated or create_never",
        "test_mine.py",
        env={"AGENTSESSIONS_SESSION_URL": "memory://"},
    )
    assert run.returncode == 0, run.output[-3000:]
    assert "2 passed" in run.output  # the explicit path ran alongside the kit


def test_json_report_lists_every_clause(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "--session-url", "memory://", "-k", "create_never or persistent")
    assert run.report is not None
    clauses = {c["test"]: c for c in run.report["clauses"]}
    assert set(clauses) == {
        "test_create_never_overwrites",
        "test_persistent_data_survives_reconnect",
    }
    passed = clauses["test_create_never_overwrites"]
    assert passed["outcome"] == "passed"
    assert passed["clause"].startswith("create() of a stored id raises SessionExistsError")
    assert passed["duration"] > 0
    skipped = clauses["test_persistent_data_survives_reconnect"]
    assert skipped["outcome"] == "skipped"
    assert "'persistent' capability" in skipped["message"]
    backend = run.report["url_backend"]
    assert backend["manager_class"] == "agentsessions._memory.MemorySessionManager"
    assert backend["capabilities"]["ttl"] is True


def test_failures_are_reported_with_their_message(tmp_path: Path) -> None:
    module = ADOPTER.replace("{DIVERGENCES}", "{}")
    run = run_pytest(tmp_path, "-k", "create_never", module=module)
    assert run.returncode == 1
    assert run.report is not None
    (clause,) = run.report["clauses"]
    assert clause["outcome"] == "failed"
    assert "DID NOT RAISE" in clause["message"]
    assert "OverwritingCreateManager" in json.dumps(run.report["backends"])
    assert (
        "test_adopter.py::TestBroken: conformance.broken.OverwritingCreateManager at memory://"
        in (run.output)
    )


def test_known_divergences_become_strict_xfails(tmp_path: Path) -> None:
    module = ADOPTER.replace("{DIVERGENCES}", repr(OVERWRITE_CLAUSES))
    run = run_pytest(tmp_path, "-k", "create", module=module)
    assert run.returncode == 0, run.output[-3000:]
    assert run.report is not None
    outcomes = {c["test"]: c for c in run.report["clauses"]}
    for name, reason in OVERWRITE_CLAUSES.items():
        assert outcomes[name]["outcome"] == "xfailed"
        assert reason in outcomes[name]["message"]
    assert outcomes["test_create_stores_new_session"]["outcome"] == "passed"


def test_divergence_listed_for_a_passing_test_fails_the_run(tmp_path: Path) -> None:
    divergences = {**OVERWRITE_CLAUSES, "test_get_returns_none_when_absent": "stale entry"}
    module = ADOPTER.replace("{DIVERGENCES}", repr(divergences))
    run = run_pytest(tmp_path, "-k", "create or returns_none", module=module)
    assert run.returncode == 1
    assert run.report is not None
    stale = next(
        c for c in run.report["clauses"] if c["test"] == "test_get_returns_none_when_absent"
    )
    assert stale["outcome"] == "failed"
    assert "XPASS(strict)" in stale["message"]


def test_divergence_naming_no_test_is_a_usage_error(tmp_path: Path) -> None:
    module = ADOPTER.replace("{DIVERGENCES}", repr({"test_no_such_clause": "typo"}))
    run = run_pytest(tmp_path, "-k", "create", module=module)
    assert run.returncode == 4
    assert "test_no_such_clause" in run.output


def test_a_suite_without_the_storage_hook_fails_the_storage_clauses(tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "-k", "delete_removes_events or returns_none", module=NO_INVENTORY)
    assert run.returncode == 1
    assert run.report is not None
    outcomes = {c["test"]: c for c in run.report["clauses"]}
    assert outcomes["test_get_returns_none_when_absent"]["outcome"] == "passed"
    storage = outcomes["test_delete_removes_events"]
    assert storage["outcome"] == "failed"
    assert "does not implement raw_inventory" in storage["message"]
    assert (
        "no installed distribution registers an inventory for OpaqueManager" in (storage["message"])
    )


def test_a_subclass_without_the_hook_uses_the_registered_inventory(tmp_path: Path) -> None:
    # The same suite on the memory backend, whose inventory the kit registers itself.
    module = NO_INVENTORY.replace(
        "from conformance.thirdparty import OpaqueManager",
        "from agentsessions import MemorySessionManager as OpaqueManager",
    ).replace("opaque://", "memory://")
    run = run_pytest(tmp_path, "-k", "delete_removes_events or returns_none", module=module)
    assert run.returncode == 0, run.output[-3000:]


def _third_party(tmp_path: Path, *, inventory: bool) -> dict[str, str]:
    from conformance.thirdparty import write_distribution

    site = tmp_path / "site"
    write_distribution(site, inventory=inventory)
    return {"PYTHONPATH": os.pathsep.join([str(TESTS_DIR), str(site)])}


def test_url_mode_finds_a_third_party_inventory_registered_by_entry_point(
    tmp_path: Path,
) -> None:
    env = _third_party(tmp_path, inventory=True)
    run = run_url_mode(tmp_path, "opaque://kit-third-party", STORAGE_CLAUSES, env=env)
    assert_url_mode_green(run, least=8)


def test_url_mode_without_a_registered_inventory_fails_the_storage_clauses(
    tmp_path: Path,
) -> None:
    env = _third_party(tmp_path, inventory=False)
    run = run_url_mode(tmp_path, "opaque://kit-third-party", STORAGE_CLAUSES, env=env)
    assert run.returncode == 1
    assert "test_delete_removes_events" in run.failing()
    assert "no installed distribution registers an inventory" in run.output + json.dumps(run.report)


def test_a_hanging_backend_fails_within_the_time_limit(tmp_path: Path) -> None:
    run = run_pytest(
        tmp_path,
        "-k",
        "returns_none_when_absent",
        "--conformance-time-limit",
        "0.5",
        module=HANGING,
    )
    assert run.returncode == 1
    assert run.report is not None
    (clause,) = run.report["clauses"]
    assert clause["outcome"] == "failed"
    assert "did not finish within 0.5 s" in clause["message"]
    assert clause["duration"] < 20
