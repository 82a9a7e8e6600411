"""The kit catches every deliberately broken backend, and the real ones pass the same clauses.

One pytest process runs them all (a conftest there keeps, for each broken backend, only
the clauses that must catch it), with a short time limit, so that a backend that hangs
costs seconds and the whole mutation test stays cheap.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conformance._run import Run, run_pytest
from conformance.broken import BROKEN, REFERENCES

MODULE = """
import uuid

import pytest
import pytest_asyncio
from agentsessions import MemorySessionManager
from agentsessions_conformance import SessionManagerTests, memory_inventory
from agentsessions_sqlite._conformance import sqlite_inventory
from agentsessions_sqlite import SQLiteSessionManager

from conformance.broken import BROKEN, REFERENCES


def suite(name, cls):
    class Suite(SessionManagerTests):
        # Shrunk briefly: the mutation test must stay cheap. The backends that list the
        # state machine among their catchers break something on almost every run.
        machine_shrink_seconds = 2.0
        machine_examples = 50
        # Well inside the 15 s limit below: no new batch of runs starts after this.
        machine_seconds = 8.0

        @pytest_asyncio.fixture
        async def manager(self, tmp_path):
            if issubclass(cls, SQLiteSessionManager):
                url = f"sqlite:///{tmp_path / 'kit.db'}"
            else:
                # One named store per test: shared by the kit's second managers, and a
                # broken backend's leftovers cannot spill into another test.
                url = f"memory://{name}-{uuid.uuid4().hex}"
            async with cls.from_url(url) as manager:
                yield manager

        async def raw_inventory(self, manager, session_id):
            if isinstance(manager, MemorySessionManager):
                return memory_inventory(manager, session_id)
            return await sqlite_inventory(manager, session_id)

    Suite.__name__ = Suite.__qualname__ = f"Test{name}"
    return Suite


for _name, _cls in {**REFERENCES, **BROKEN}.items():
    globals()[f"Test{_name}"] = suite(_name, _cls)
"""

# Keeps only the clauses each class needs: a broken backend its catchers, a reference
# every clause some broken backend of its kind needs.
CONFTEST = """
import json
import re
from pathlib import Path

SELECTED = json.loads((Path(__file__).parent / "selected.json").read_text())


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        wanted = SELECTED.get(item.cls.__name__[4:], [])
        (kept if item.originalname in wanted else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept
"""


def _selection() -> dict[str, list[str]]:
    selected = {name: sorted(cls.caught_by) for name, cls in BROKEN.items()}  # type: ignore[attr-defined]
    for ref_name, reference in REFERENCES.items():
        needed: set[str] = set()
        for cls in BROKEN.values():
            if issubclass(cls, reference) and (
                ref_name != "Memory" or not issubclass(cls, REFERENCES["SQLite"])
            ):
                needed |= cls.caught_by  # type: ignore[attr-defined]
        selected[ref_name] = sorted(needed)
    return selected


# What a broken backend's own bug looks like, as opposed to the contract breach it stages.
_CRASH = re.compile(r"\b(AttributeError|NameError|TypeError|ProgrammingError)\b")


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    workdir = tmp_path_factory.mktemp("broken")
    (workdir / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (workdir / "selected.json").write_text(json.dumps(_selection()), encoding="utf-8")
    return run_pytest(workdir, "-q", "--conformance-time-limit", "15", module=MODULE)


def test_there_are_enough_broken_backends() -> None:
    assert len(BROKEN) >= 40
    names = {cls.__name__ for cls in BROKEN.values()}
    assert any(name.startswith("SQLite") for name in names)
    for cls in BROKEN.values():
        assert cls.caught_by, cls  # type: ignore[attr-defined]


@pytest.mark.parametrize("backend", sorted(BROKEN))
def test_kit_catches_the_broken_backend(broken_run: Run, backend: str) -> None:
    expected: frozenset[str] = BROKEN[backend].caught_by  # type: ignore[attr-defined]
    outcomes = broken_run.outcomes(f"::Test{backend}")
    assert set(outcomes) == set(expected), broken_run.output[-2000:]
    missed = {name for name, seen in outcomes.items() if not seen & {"failed", "error"}}
    assert not missed, f"the kit did not catch {backend} on {sorted(missed)}"
    # Caught by the defect it was built with, not by the broken backend's own crash (a
    # statement or helper of the real backend renamed under it).
    assert broken_run.report is not None
    crashed = {
        clause["test"]: clause["message"][-300:]
        for clause in broken_run.report["clauses"]
        if clause["suite"].endswith(f"::Test{backend}") and _CRASH.search(clause["message"])
    }
    assert not crashed, f"{backend} crashed instead of misbehaving: {crashed}"


@pytest.mark.parametrize("reference", sorted(REFERENCES))
def test_real_backends_pass_those_clauses(broken_run: Run, reference: str) -> None:
    outcomes = broken_run.outcomes(f"::Test{reference}")
    assert outcomes, broken_run.output[-2000:]
    bad = {name: seen for name, seen in outcomes.items() if seen - {"passed", "skipped"}}
    assert not bad, bad
    assert any("passed" in seen for seen in outcomes.values())


def test_no_broken_backend_hangs_the_kit(broken_run: Run) -> None:
    assert broken_run.report is not None
    slow = {
        c["nodeid"]: round(c["duration"], 1)
        for c in broken_run.report["clauses"]
        if c["duration"] > 14
    }
    assert not slow, slow
    assert broken_run.returncode == 1
    assert "FAILED" in broken_run.output


def test_selection_names_real_clauses() -> None:
    from agentsessions_conformance import SessionManagerTests

    clauses = {name for name in dir(SessionManagerTests) if name.startswith("test_")}
    unknown = {
        name: sorted(cls.caught_by - clauses)  # type: ignore[attr-defined]
        for name, cls in BROKEN.items()
        if cls.caught_by - clauses  # type: ignore[attr-defined]
    }
    assert not unknown
    assert Path(__file__).with_name("broken.py").exists()
