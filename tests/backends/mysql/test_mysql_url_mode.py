"""URL mode on MySQL/MariaDB: the whole kit on a bare URL, with no adopter code, is green,
its storage clauses read through the inventory agentsessions-mysql registers."""

from __future__ import annotations

from pathlib import Path

import pytest
from agentsessions import connect
from agentsessions_conformance import find_inventory
from agentsessions_mysql._conformance import mysql_inventory
from conformance._run import assert_url_mode_green, run_url_mode

pytestmark = pytest.mark.mysql


def test_the_registered_inventory_is_mysqls(mysql_url: str) -> None:
    # Found through the entry point, as URL mode finds it; nothing connects.
    assert find_inventory(connect(mysql_url)) is mysql_inventory


async def test_url_mode_runs_every_clause_green(fresh_database_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, fresh_database_url)
    assert_url_mode_green(run, least=220)
