"""Servers that die, restart, drop our connections or freeze, under a concurrent load.

Each scenario starts its own private server on loopback (never the machine's), runs a
`Load` on ONE manager through the fault and after it, and asserts: every call ended
within its deadline + margin; only documented errors; the same manager recovered;
no acknowledged write lost; no save applied twice. Processes are signalled by the PIDs
of the servers started here (and their children).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Callable

import agentsessions_testservers as servers
import asyncpg
import pytest
import pytest_asyncio
from agentsessions import connect

from faults._load import Load
from faults._tools import frozen, server_pids

pytestmark = pytest.mark.faults

TIMEOUT = 2.0
LOAD_SECONDS = 1.5


@contextlib.asynccontextmanager
async def _private(
    start: Callable[[], servers.ManagedServer],
) -> AsyncIterator[servers.ManagedServer]:
    try:
        server = await asyncio.to_thread(start)
    except servers.ServerUnavailable as exc:
        from conftest import REQUIRE_SERVERS

        if REQUIRE_SERVERS:
            pytest.fail(f"cannot start a private server: {exc}")
        pytest.skip(f"cannot start a private server: {exc}")
    try:
        yield server
    finally:
        await asyncio.to_thread(server.close)


def _kill(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


async def _exited(server: servers.ManagedServer) -> None:
    """Wait (bounded) until the server's processes are gone, then reap them."""
    for _ in range(300):
        if not server.is_running():
            break
        await asyncio.sleep(0.05)
    await asyncio.to_thread(server.stop)


async def test_redis_killed_and_restarted() -> None:
    async with _private(lambda: servers.start_redis(appendonly=True)) as server:
        async with connect(server.url, timeout=TIMEOUT) as manager:
            load = Load(manager, "redis kill -9 + restart (appendonly)")
            await asyncio.sleep(LOAD_SECONDS)
            for _ in range(2):
                _kill(server.pids, signal.SIGKILL)  # type: ignore[attr-defined]
                await _exited(server)
                await asyncio.sleep(0.5)  # calls meet a closed port meanwhile
                await asyncio.to_thread(server.start)
                await load.recovered()
                await asyncio.sleep(LOAD_SECONDS)
            await load.stop()
        load.check()


async def test_redis_cluster_master_killed_and_restarted() -> None:
    start = lambda: servers.start_redis_cluster(appendonly=True)  # noqa: E731
    async with _private(start) as server:
        async with connect(server.url, timeout=TIMEOUT) as manager:
            load = Load(manager, "redis-cluster kill -9 of one master + restart (appendonly)")
            await asyncio.sleep(LOAD_SECONDS)
            node = server.processes[-1]  # type: ignore[attr-defined]
            for _ in range(2):
                _kill([node.pid], signal.SIGKILL)
                await asyncio.to_thread(node.stop)  # reaps it
                await asyncio.sleep(0.5)  # calls to its slots meet a closed port meanwhile
                await asyncio.to_thread(node.spawn)
                await asyncio.to_thread(node.wait_ready, time.monotonic() + 30)
                await load.recovered()
                await asyncio.sleep(LOAD_SECONDS)
            await load.stop()
        load.check()


def _durable(url: str) -> str:
    """*url* with commits that survive an immediate shutdown: the private server runs
    with synchronous_commit off (fast tests), which a session setting overrides."""
    return f"{url}?options=-c%20synchronous_commit%3Don"


async def test_postgres_stopped_immediately_and_restarted() -> None:
    async with _private(servers.start_postgres) as server:
        async with connect(_durable(server.url), timeout=TIMEOUT, max_pool_size=4) as manager:
            load = Load(manager, "postgres immediate stop + restart")
            await asyncio.sleep(LOAD_SECONDS)
            for _ in range(2):
                # SIGQUIT: PostgreSQL's "immediate" shutdown, no checkpoint, like a crash.
                _kill(server.pids, signal.SIGQUIT)  # type: ignore[attr-defined]
                await _exited(server)
                await asyncio.sleep(0.5)
                await asyncio.to_thread(server.start)
                await load.recovered()
                await asyncio.sleep(LOAD_SECONDS)
            await load.stop()
        load.check()


async def test_postgres_pool_backends_terminated() -> None:
    async with _private(servers.start_postgres) as server:
        admin = await asyncpg.connect(server.url)
        try:
            async with connect(server.url, timeout=TIMEOUT, max_pool_size=4) as manager:
                load = Load(manager, "postgres pg_terminate_backend")
                for _ in range(4):
                    await asyncio.sleep(LOAD_SECONDS / 2)
                    terminated = await admin.fetchval(
                        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' "
                        "AND datname = current_database()"
                    )
                    assert terminated >= 1
                    await load.recovered()
                await asyncio.sleep(LOAD_SECONDS / 2)
                await load.stop()
        finally:
            await admin.close()
        load.check()


async def test_mysql_killed_and_restarted() -> None:
    async with _private(servers.start_mysql) as server:
        async with connect(server.url, timeout=TIMEOUT, max_pool_size=4) as manager:
            load = Load(manager, "mysql kill -9 + restart")
            await asyncio.sleep(LOAD_SECONDS)
            for _ in range(2):
                _kill(server.pids, signal.SIGKILL)  # type: ignore[attr-defined]
                await _exited(server)
                await asyncio.sleep(0.5)  # calls meet a closed port meanwhile
                await asyncio.to_thread(server.start)  # InnoDB crash recovery
                await load.recovered()
                await asyncio.sleep(LOAD_SECONDS)
            await load.stop()
        load.check()


FREEZABLE = {
    "postgres": servers.start_postgres,
    "redis": servers.start_redis,
    "redis-cluster": servers.start_redis_cluster,
    "mongo": servers.start_mongo,
    "mysql": servers.start_mysql,
}


@pytest_asyncio.fixture(params=sorted(FREEZABLE))
async def freezable(request: pytest.FixtureRequest) -> AsyncIterator[servers.ManagedServer]:
    async with _private(FREEZABLE[request.param]) as server:
        yield server


async def test_server_frozen_and_thawed(freezable: servers.ManagedServer) -> None:
    async with connect(freezable.url, timeout=TIMEOUT) as manager:
        load = Load(manager, f"{freezable.kind} SIGSTOP {TIMEOUT * 2:g} s + SIGCONT")
        await asyncio.sleep(LOAD_SECONDS)
        assert server_pids(freezable.pids)  # type: ignore[attr-defined]
        with frozen(freezable.pids):  # type: ignore[attr-defined]
            await asyncio.sleep(TIMEOUT * 2)  # every call in flight meets its deadline
        await load.recovered()
        await asyncio.sleep(LOAD_SECONDS)
        await load.stop()
    load.check()
    assert load.report.errors["BackendTimeoutError"] > 0, load.report.line()
