"""Broken PostgreSQL backends the kit's new clauses catch: a manager whose loads turn a
lost connection into "no such session", one that maps a missing database to a generic outage."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance._run import run_pytest

pytestmark = pytest.mark.postgres

MODULE = """
import pytest_asyncio
from agentsessions_conformance import SessionManagerTests
from agentsessions_postgres import PostgresSessionManager


class OutageAsAbsence(PostgresSessionManager):
    async def _load(self, session_id, last_events, now):
        try:
            return await super()._load(session_id, last_events, now)
        except Exception:
            return None  # the bug: a reset connection reads as a missing session


class TestOutageAsAbsence(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self):
        async with OutageAsAbsence.from_url({url!r}) as manager:
            yield manager
"""


def test_wire_clauses_catch_an_outage_read_as_absence(schema_url: str, tmp_path: Path) -> None:
    run = run_pytest(tmp_path, "-k", "wire_reset", module=MODULE.format(url=schema_url))
    assert run.report is not None, run.output[-3000:]
    (clause,) = run.report["clauses"]
    assert clause["test"] == "test_wire_reset_is_backend_unavailable_then_recovers"
    assert clause["outcome"] == "failed", clause
    assert "DID NOT RAISE" in clause["message"]


UNMAPPED = """
import pytest_asyncio
from agentsessions import DatabaseNotFoundError
from agentsessions_conformance import SessionManagerTests
from agentsessions_postgres import PostgresSessionManager


class UnmappedMissingDatabase(PostgresSessionManager):
    # The bug: no rule for a missing database, so it is a generic outage.
    driver_errors = tuple(
        rule for rule in PostgresSessionManager.driver_errors
        if rule.kind is not DatabaseNotFoundError
    )


class TestUnmapped(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self):
        async with UnmappedMissingDatabase.from_url({url!r}) as manager:
            yield manager
"""


def test_error_mapping_clause_catches_an_unmapped_missing_database(
    schema_url: str, tmp_path: Path
) -> None:
    run = run_pytest(tmp_path, "-k", "missing_database", module=UNMAPPED.format(url=schema_url))
    assert run.report is not None, run.output[-3000:]
    (clause,) = run.report["clauses"]
    assert clause["test"] == "test_missing_database_is_database_not_found"
    assert clause["outcome"] == "failed", clause
    assert "BackendUnavailableError" in clause["message"]
