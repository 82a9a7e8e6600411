"""The kit catches the broken server backends of broken_servers.py, on real servers, and
the real managers pass the same clauses.

One child pytest process (as an adopter runs the kit) holds a suite per broken backend
and one per real manager, each keeping only the clauses in ``caught_by``; the servers
are the private ones the test tooling starts (a fresh schema, namespace or file each).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conformance._run import Run, run_pytest
from conformance.broken_servers import BROKEN_SERVERS

MODULE = """
import json
import os
import uuid

import pytest_asyncio
from agentsessions_conformance import SessionManagerTests

from conformance.broken_servers import BROKEN_SERVERS, REFERENCE_OF

URLS = json.loads(os.environ["BROKEN_SERVER_URLS"])


def suite(name, cls, url_of):
    class Suite(SessionManagerTests):
        @pytest_asyncio.fixture
        async def manager(self, tmp_path):
            async with cls.from_url(url_of(tmp_path)) as manager:
                yield manager

    Suite.__name__ = Suite.__qualname__ = f"Test{name}"
    return Suite


def url_of(name):
    kind = next(k for k in ("SQLite", "Postgres", "Redis", "Mongo") if name.startswith(k))
    if kind == "SQLite":
        return lambda tmp_path: f"sqlite:///{tmp_path / 'kit.db'}"
    return lambda tmp_path: URLS[kind]


for _name, _cls in BROKEN_SERVERS.items():
    globals()[f"Test{_name}"] = suite(_name, _cls, url_of(_name))
    globals()[f"TestReal{_name}"] = suite(f"Real{_name}", REFERENCE_OF[_name], url_of(_name))
"""

CONFTEST = """
from conformance.broken_servers import BROKEN_SERVERS


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        name = item.cls.__name__.removeprefix("Test").removeprefix("Real")
        (kept if item.originalname in BROKEN_SERVERS[name].caught_by else dropped).append(item)
    config.hook.pytest_deselected(items=dropped)
    items[:] = kept
"""


def _with(url: str, **params: str) -> str:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


async def _drop_schema(postgres_url: str, schema: str) -> None:
    import asyncpg
    from agentsessions_postgres._schema import quote_ident

    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
    finally:
        await connection.close()


async def _drop_collections(mongo_url: str, prefix: str) -> None:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_url)
    try:
        database = client.get_default_database("agentsessions_test")
        for name in await database.list_collection_names():
            if name.startswith(prefix):
                await database.drop_collection(name)
    finally:
        await client.close()


@pytest.fixture(scope="module")
def server_urls(redis_url: str, postgres_url: str, mongo_url: str) -> Iterator[dict[str, str]]:
    """A fresh namespace (Redis, MongoDB) or schema (PostgreSQL) per kind, dropped after."""
    tag = uuid.uuid4().hex[:12]
    yield {
        "Redis": _with(redis_url, namespace=f"kb_{tag}"),
        "Postgres": _with(postgres_url, schema=f"kb_{tag}"),
        # SecantusDB is one Python process: a busy machine must not decide the clauses.
        "Mongo": _with(mongo_url, namespace=f"kb_{tag}"),
    }
    asyncio.run(_drop_schema(postgres_url, f"kb_{tag}"))
    asyncio.run(_drop_collections(mongo_url, f"kb_{tag}"))


@pytest.fixture(scope="module")
def broken_run(tmp_path_factory: pytest.TempPathFactory, server_urls: dict[str, str]) -> Run:
    workdir = tmp_path_factory.mktemp("broken_servers")
    (workdir / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    return run_pytest(
        workdir,
        "-q",
        "--conformance-time-limit",
        "30",
        module=MODULE,
        env={"BROKEN_SERVER_URLS": json.dumps(server_urls)},
    )


@pytest.mark.parametrize("backend", sorted(BROKEN_SERVERS))
def test_kit_catches_the_broken_server_backend(broken_run: Run, backend: str) -> None:
    expected: frozenset[str] = BROKEN_SERVERS[backend].caught_by
    outcomes = broken_run.outcomes(f"::Test{backend}")
    assert set(outcomes) == set(expected), broken_run.output[-3000:]
    missed = {name for name, seen in outcomes.items() if not seen & {"failed", "error"}}
    assert not missed, f"the kit did not catch {backend} on {sorted(missed)}"
    # Each failure is reported under the clause that caught it (of a clause parametrised
    # over the operations, the cases that failed: the others pass on this backend too).
    assert broken_run.report is not None
    for clause in broken_run.report["clauses"]:
        if clause["suite"].endswith(f"::Test{backend}") and clause["outcome"] != "passed":
            assert clause["clause"], clause
            assert f"Test{backend}::{clause['test']}" in broken_run.output


@pytest.mark.parametrize("backend", sorted(BROKEN_SERVERS))
def test_the_real_backend_passes_those_clauses(broken_run: Run, backend: str) -> None:
    outcomes = broken_run.outcomes(f"::TestReal{backend}")
    assert set(outcomes) == set(BROKEN_SERVERS[backend].caught_by), broken_run.output[-3000:]
    bad = {name: seen for name, seen in outcomes.items() if seen != {"passed"}}
    assert not bad, (bad, broken_run.output[-3000:])


def test_the_catching_clauses_are_real_clauses() -> None:
    from agentsessions_conformance import SessionManagerTests

    clauses = {name for name in dir(SessionManagerTests) if name.startswith("test_")}
    for name, cls in BROKEN_SERVERS.items():
        assert cls.caught_by and cls.caught_by <= clauses, name
    assert Path(__file__).with_name("broken_servers.py").exists()
