"""Which stores to measure: every engine whose backend is installed and server reachable.

Servers come from the project's test-server tooling (``agentsessions_testservers``, in
tools/testservers: an ``AGENTSESSIONS_*_URL`` variable, else a private server on
loopback). Everything a run writes is isolated: a
fresh PostgreSQL database and MongoDB database per run (dropped at the end), random
Redis key prefixes and namespaces, SQLite files in a temporary directory.
"""

from __future__ import annotations

import contextlib
import functools
import shutil
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agentsessions_testservers import Kind
from agentsessions_testservers import find as find_server

from ._adapters import AdkAdapterStore, SdkAdapterStore
from ._floors import floor_for
from ._ours import OurStore, engine_of_url
from ._peers import (
    AdkDatabaseStore,
    AdkInMemoryStore,
    SdkMongoStore,
    SdkRedisStore,
    SdkSqlAlchemyStore,
    SdkSqliteStore,
)
from ._runner import Settle
from ._store import Store

__all__ = ["ENGINES", "Plan", "plan_for_url", "plan_suite"]

ENGINES = ("memory", "sqlite", "postgres", "redis", "redis-cluster", "mongo", "mysql")
_SCHEMES = {
    "memory": "memory",
    "sqlite": "sqlite",
    "postgres": "postgresql",
    "redis": "redis",
    "redis-cluster": "redis+cluster",
    "mongo": "mongodb",
    "mysql": "mysql",
}
_SERVER_KIND: dict[str, Kind] = {
    "postgres": "postgres",
    "redis": "redis",
    "redis-cluster": "redis-cluster",
    "mongo": "mongo",
    "mysql": "mysql",
}

Factory = Callable[[], Store]

# The MongoDB server of the tests is written in Python and shares the client's cores:
# under load, contended calls outlast the default 10 s deadline, which the floor and
# the peer do not have. A longer one keeps the comparison about cost, not deadlines.
_MONGO_OPTIONS: dict[str, Any] = {"timeout": 120}


@dataclass
class Plan:
    """The stores of one run, and what was left out and why."""

    factories: list[Factory] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    servers: dict[str, str] = field(default_factory=dict)
    #: engine -> a URL for our store (the instrumentation case connects its own).
    urls: dict[str, str] = field(default_factory=dict)
    #: engine -> what runs between writing a phase's sessions and timing them.
    settle: dict[str, Settle] = field(default_factory=dict)


def _backend_ready(engine: str) -> str | None:
    """Why our backend for *engine* cannot be used, or None if it can."""
    from agentsessions import installed_backends

    try:
        backends = installed_backends()
    except Exception as exc:
        return f"backend discovery failed: {exc}"
    if _SCHEMES[engine] not in backends:
        return f"no installed backend serves {_SCHEMES[engine]}:// (not written yet?)"
    return None


def _with_database(url: str, database: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + database, parts.query, parts.fragment))


async def _pg_execute(url: str, statement: str) -> None:
    """Run one statement on a connection of its own to *url*."""
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


async def _create_pg_database(url: str, name: str) -> None:
    await _pg_execute(url, f'CREATE DATABASE "{name}"')


async def analyze_postgres(url: str) -> None:
    """ANALYZE the database of *url*: every store's tables, as autovacuum would.

    The stores' tables start empty in each run and fill or empty within seconds, well
    inside autovacuum's pace (it wakes once a minute by default). A connection that
    has run a prepared statement five times keeps the generic plan made then, and a
    plan made while a table held a few rows scans it whole, long after it holds
    thousands: until an ANALYZE invalidates it. A store that has been up for a while
    has had that ANALYZE; the bench times that state, the same way for every store on
    the server (pgbench vacuums before each run for the same reason).
    """
    await _pg_execute(url, "ANALYZE")


async def _drop_pg_database(url: str, name: str) -> None:
    await _pg_execute(url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _drop_mongo_database(url: str, name: str) -> None:
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, object]] = AsyncMongoClient(
        url, serverSelectionTimeoutMS=5000
    )
    try:
        await client.drop_database(name)
    finally:
        await client.close()


@contextlib.asynccontextmanager
async def plan_suite(
    engines: tuple[str, ...] = ENGINES, *, peers: bool = True
) -> AsyncIterator[Plan]:
    """Plan a run over *engines*; on exit, remove every file and database it made."""
    plan = Plan()
    workdir = Path(tempfile.mkdtemp(prefix="agentsessions-bench-"))
    cleanups: list[Callable[[], Awaitable[None]]] = []
    run_id = uuid.uuid4().hex[:10]

    def sqlite_file(tag: str) -> str:
        return str(workdir / f"{tag}-{uuid.uuid4().hex[:8]}.db")

    try:
        for engine in engines:
            problem = _backend_ready(engine)
            where = ""
            if engine in _SERVER_KIND:
                try:
                    where = find_server(_SERVER_KIND[engine])
                except Exception as exc:
                    plan.skipped.append({"engine": engine, "reason": f"no server: {exc}"})
                    continue
                plan.servers[engine] = where
            if engine == "postgres":
                database = f"agentsessions_bench_{run_id}"
                try:
                    await _create_pg_database(where, database)
                except Exception as exc:
                    plan.skipped.append({"engine": engine, "reason": f"PostgreSQL: {exc}"})
                    continue
                cleanups.append(functools.partial(_drop_pg_database, where, database))
                where = _with_database(where, database)
                plan.settle[engine] = functools.partial(analyze_postgres, where)
            if engine == "mongo":
                database = f"agentsessions_bench_{run_id}"
                cleanups.append(functools.partial(_drop_mongo_database, where, database))
                where = _with_database(where, database)
            _add_engine(plan, engine, where, problem, sqlite_file, peers)
        yield plan
    finally:
        for cleanup in reversed(cleanups):
            try:
                await cleanup()
            except Exception as exc:
                print(f"cleanup failed: {exc}", file=sys.stderr)
        shutil.rmtree(workdir, ignore_errors=True)


def _add_engine(
    plan: Plan,
    engine: str,
    where: str,
    problem: str | None,
    sqlite_file: Callable[[str], str],
    peers: bool,
) -> None:
    factories = plan.factories
    if problem is None:
        if engine == "memory":
            plan.urls[engine] = "memory://"
        elif engine == "sqlite":
            plan.urls[engine] = "sqlite:///" + sqlite_file("overhead")
        else:
            plan.urls[engine] = where
        if engine == "memory":
            factories.append(lambda: OurStore("memory://"))
        elif engine == "sqlite":
            factories.append(lambda: OurStore("sqlite:///" + sqlite_file("ours")))
        elif engine in ("postgres", "mysql"):
            # The same pool as the floor (asyncpg's default 10, opened up front), so
            # throughput compares the code, not how many connections each may open.
            factories.append(lambda: OurStore(where, min_pool_size=10, max_pool_size=10))
        elif engine == "mongo":
            factories.append(lambda: OurStore(where, **_MONGO_OPTIONS))
        else:
            factories.append(lambda: OurStore(where))
    else:
        plan.skipped.append({"engine": engine, "store": "agentsessions", "reason": problem})
    if engine == "sqlite":
        factories.append(lambda: floor_for("sqlite", sqlite_file("floor")))
    else:
        factories.append(lambda: floor_for(engine, where))
    if not peers:
        return
    if problem is None:
        factories += _adapters(engine, plan.urls[engine], sqlite_file)
    if engine == "memory":
        factories.append(AdkInMemoryStore)
    elif engine == "sqlite":
        factories.append(lambda: SdkSqliteStore(sqlite_file("sdk")))
        factories.append(lambda: SdkSqlAlchemyStore("sqlite", sqlite_file("sdk-sa")))
        factories.append(lambda: AdkDatabaseStore("sqlite", sqlite_file("adk")))
    elif engine == "postgres":
        factories.append(lambda: SdkSqlAlchemyStore("postgres", where))
        factories.append(lambda: AdkDatabaseStore("postgres", where))
    elif engine == "mysql":
        factories.append(lambda: SdkSqlAlchemyStore("mysql", where))
        factories.append(lambda: AdkDatabaseStore("mysql", where))
    elif engine == "redis":
        factories.append(lambda: SdkRedisStore(where))
    elif engine == "mongo":
        factories.append(lambda: SdkMongoStore(where))


def _adapters(engine: str, url: str, sqlite_file: Callable[[str], str]) -> list[Factory]:
    """Our adapters on our backend, for the engines where the stores they replace run."""
    options: dict[str, object] = {}
    if engine == "postgres":
        options = {"min_pool_size": 10, "max_pool_size": 10}
    elif engine == "mongo":
        options = dict(_MONGO_OPTIONS)
    found: list[Factory] = []
    if engine in ("sqlite", "postgres", "redis", "mongo"):
        if engine == "sqlite":
            found.append(lambda: SdkAdapterStore("sqlite:///" + sqlite_file("oa")))
        else:
            found.append(lambda: SdkAdapterStore(url, **options))
    if engine in ("memory", "sqlite", "postgres"):
        if engine == "sqlite":
            found.append(lambda: AdkAdapterStore("sqlite:///" + sqlite_file("adk-a")))
        else:
            found.append(lambda: AdkAdapterStore(url, **options))
    return found


def _driver_url(url: str) -> str:
    """*url* without our options (``?namespace=..``), which a raw driver would reject."""
    from agentsessions import connect

    try:
        base: str = connect(url)._url
    except Exception:
        return url.partition("?")[0]
    return base


@contextlib.asynccontextmanager
async def plan_for_url(url: str, *, peers: bool = False) -> AsyncIterator[Plan]:
    """A run of our store on *url* against its engine's floor (and peers if asked)."""
    engine = engine_of_url(url)
    plan = Plan()
    workdir = Path(tempfile.mkdtemp(prefix="agentsessions-bench-"))

    def sqlite_file(tag: str) -> str:
        return str(workdir / f"{tag}-{uuid.uuid4().hex[:8]}.db")

    try:
        plan.factories.append(lambda: OurStore(url))
        if engine == "postgres":
            plan.settle[engine] = functools.partial(analyze_postgres, _driver_url(url))
        if engine in _SCHEMES:
            if engine == "sqlite":
                plan.factories.append(lambda: floor_for("sqlite", sqlite_file("floor")))
            else:
                plan.factories.append(lambda: floor_for(engine, _driver_url(url)))
            if peers:
                scratch = Plan()
                _add_engine(scratch, engine, url, "", sqlite_file, True)
                plan.factories.extend(scratch.factories[1:])  # past the floor
                plan.factories.extend(_adapters(engine, url, sqlite_file))
        yield plan
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
