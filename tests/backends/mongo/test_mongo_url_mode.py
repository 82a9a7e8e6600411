"""URL mode on MongoDB (SecantusDB here): the whole kit on a bare URL, with no adopter
code, is green: the storage clauses through the inventory agentsessions-mongo registers,
the wire and lost-reply clauses through the fault proxy (``directConnection=true`` added)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from conformance._run import assert_url_mode_green, run_url_mode
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo


def test_url_mode_runs_every_clause_green(
    mongo_url: str, raw_db: AsyncDatabase[dict[str, Any]], tmp_path: Path
) -> None:
    # raw_db drops the collections the run made; a fresh namespace keeps them apart.
    url = f"{mongo_url}{'&' if '?' in mongo_url else '?'}namespace=u_{uuid.uuid4().hex[:12]}"
    run = run_url_mode(tmp_path, url)
    assert_url_mode_green(run, least=220)
    assert run.report is not None
    wire = {c["test"]: c["outcome"] for c in run.report["clauses"] if "_wire_" in c["test"]}
    assert len(wire) >= 6 and set(wire.values()) == {"passed"}, wire
