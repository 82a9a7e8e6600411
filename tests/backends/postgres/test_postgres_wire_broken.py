"""The kit's wire-fault clauses catch a server backend that misreads an outage: a
PostgreSQL manager whose loads turn a lost connection into "no such session"."""

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
