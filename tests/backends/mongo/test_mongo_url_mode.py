"""URL mode on MongoDB (SecantusDB here): the clauses that read storage, on a bare URL
with no adopter code, are green through the inventory agentsessions-mongo registers
(the subclass runs every clause; SecantusDB is too slow to run them all twice in CI)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from conformance._run import STORAGE_CLAUSES, assert_url_mode_green, run_url_mode
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo


def test_url_mode_storage_clauses_green(
    mongo_url: str, raw_db: AsyncDatabase[dict[str, Any]], tmp_path: Path
) -> None:
    # raw_db drops the collections the run made; a fresh namespace keeps them apart.
    url = f"{mongo_url}{'&' if '?' in mongo_url else '?'}namespace=u_{uuid.uuid4().hex[:12]}"
    run = run_url_mode(tmp_path, url, keyword=STORAGE_CLAUSES)
    assert_url_mode_green(run, least=8)
