"""URL mode on PostgreSQL: the whole kit on a bare URL, with no adopter code, is green,
its storage clauses read through the inventory agentsessions-postgres registers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conformance._run import assert_url_mode_green, run_url_mode

pytestmark = pytest.mark.postgres


def test_url_mode_runs_every_clause_green(schema_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, schema_url)
    assert_url_mode_green(run, least=220)
