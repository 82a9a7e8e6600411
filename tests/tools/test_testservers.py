"""Self-test of agentsessions_testservers: each kind starts, answers a driver, restarts in place.

Each test owns its server (``start_*``), so stopping it cannot disturb other tests.
When a server cannot be had, the test is skipped, but fails when
AGENTSESSIONS_REQUIRE_SERVERS=1 (as CI sets it, like tests/conftest.py does).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import agentsessions_testservers as servers
import pytest
from agentsessions_testservers import ManagedServer, ServerUnavailable
from agentsessions_testservers._process import (
    PortInUse,
    Process,
    ProcessServer,
    make_workdir,
    process_gone,
)

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"
T = TypeVar("T")


def _start(factory: Callable[[], T]) -> T:
    try:
        return factory()
    except ServerUnavailable as exc:
        if REQUIRE_SERVERS:
            raise
        pytest.skip(f"server unavailable: {exc}")


@pytest.fixture
def owned() -> Iterator[list[ManagedServer]]:
    """Servers a test started; closed afterwards even if the test fails."""
    started: list[ManagedServer] = []
    yield started
    for server in started:
        server.close()


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _restart(server: ManagedServer) -> None:
    url = server.url
    server.stop()
    assert not server.is_running()
    server.start()
    assert server.is_running()
    assert server.url == url


def test_free_port_is_bindable() -> None:
    port = servers.free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_startup_failure_reports_log_tail() -> None:
    workdir = make_workdir("fake")
    process = Process(
        name="fake-server",
        argv=["sh", "-c", "echo boom-marker; exit 3"],
        log_path=workdir / "server.log",
        ready=lambda: False,
        cwd=workdir,
    )
    server = ProcessServer(kind="fake", url="fake://", workdir=workdir, processes=[process])
    with pytest.raises(ServerUnavailable, match=r"(?s)exit code 3.*boom-marker"):
        server.start()
    assert not server.is_running()
    server.close()
    assert not workdir.exists()


def test_taken_port_is_detected_before_spawning() -> None:
    workdir = make_workdir("fake")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        process = Process(
            name="fake-server",
            argv=["sh", "-c", "sleep 30"],
            log_path=workdir / "server.log",
            ready=lambda: True,  # would wrongly "succeed" against the foreign listener
            cwd=workdir,
            port=port,
        )
        server = ProcessServer(kind="fake", url="fake://", workdir=workdir, processes=[process])
        with pytest.raises(PortInUse):
            server.start()
        assert not server.is_running()
        server.close()


def test_env_var_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTSESSIONS_REDIS_URL", "redis://example.invalid:1/0")
    assert servers.find_redis() == "redis://example.invalid:1/0"


@pytest.mark.postgres
def test_postgres_roundtrip_and_restart(owned: list[ManagedServer]) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    server = _start(servers.start_postgres)
    owned.append(server)
    assert server.url.startswith("postgresql://postgres@127.0.0.1:")

    async def write_read() -> None:
        conn = await asyncpg.connect(server.url)
        try:
            await conn.execute("CREATE TABLE t (k text PRIMARY KEY, v int)")
            await conn.execute("INSERT INTO t VALUES ('a', 1)")
            assert await conn.fetchval("SELECT v FROM t WHERE k = 'a'") == 1
        finally:
            await conn.close()

    async def read_after_restart() -> None:
        conn = await asyncpg.connect(server.url)
        try:  # PostgreSQL keeps its data directory across stop()/start()
            assert await conn.fetchval("SELECT v FROM t WHERE k = 'a'") == 1
        finally:
            await conn.close()

    asyncio.run(write_read())
    _restart(server)
    asyncio.run(read_after_restart())


@pytest.mark.postgres
def test_postgres_pair_streams_and_fails_over(owned: list[ManagedServer]) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    pair = _start(servers.start_postgres_pair)
    owned.append(pair)
    primary, standby = pair.primary.port, pair.standby.port
    assert pair.url == (
        f"postgresql://postgres@127.0.0.1:{primary},127.0.0.1:{standby}/postgres"
        "?target_session_attrs=read-write"
    )
    assert len(pair.pids) == 2

    async def write(url: str, value: int) -> None:
        conn = await asyncpg.connect(url)
        try:
            await conn.execute("CREATE TABLE IF NOT EXISTS t (v int)")
            await conn.execute("INSERT INTO t VALUES ($1)", value)
        finally:
            await conn.close()

    async def on_standby() -> tuple[bool, list[int]]:
        conn = await asyncpg.connect(pair.standby_url)
        try:
            with pytest.raises(asyncpg.ReadOnlySQLTransactionError):
                await conn.execute("INSERT INTO t VALUES (0)")
            rows = await conn.fetch("SELECT v FROM t ORDER BY v")
            return await conn.fetchval("SELECT pg_is_in_recovery()"), [r[0] for r in rows]
        finally:
            await conn.close()

    asyncio.run(write(pair.url, 1))
    pair.wait_replayed()
    assert asyncio.run(on_standby()) == (True, [1])

    backends = servers._postgres._children_of(pair.primary.pid or 0)
    assert backends  # the postmaster's children, killed with it
    pair.kill_primary()
    assert not pair.primary.is_running() and not _port_open(primary or 0)
    assert all(process_gone(pid) for pid in backends)
    pair.promote()
    asyncio.run(write(pair.url, 2))  # the multi-host URL finds the promoted standby

    async def read_promoted() -> list[int]:
        conn = await asyncpg.connect(pair.standby_url)
        try:
            assert await conn.fetchval("SELECT pg_is_in_recovery()") is False
            return [r[0] for r in await conn.fetch("SELECT v FROM t ORDER BY v")]
        finally:
            await conn.close()

    assert asyncio.run(read_promoted()) == [1, 2]
    workdir = pair.workdir
    pair.close()
    assert not workdir.exists() and pair.pids == []


@pytest.mark.postgres
def test_postgres_pair_synchronous_standby(owned: list[ManagedServer]) -> None:
    asyncpg = pytest.importorskip("asyncpg")
    pair = _start(lambda: servers.start_postgres_pair(synchronous=True))
    owned.append(pair)

    async def settings() -> tuple[str, str]:
        conn = await asyncpg.connect(pair.primary_url)
        try:
            names = await conn.fetchval("SHOW synchronous_standby_names")
            state = await conn.fetchval("SELECT sync_state FROM pg_stat_replication")
            return names, state
        finally:
            await conn.close()

    assert asyncio.run(settings()) == ("*", "sync")


@pytest.mark.redis
def test_redis_roundtrip_and_restart(owned: list[ManagedServer]) -> None:
    redis_asyncio = pytest.importorskip("redis.asyncio")
    server = _start(servers.start_redis)
    owned.append(server)

    async def write_read(key: str) -> None:
        client = redis_asyncio.Redis.from_url(server.url)
        try:
            await client.set(key, "v")
            assert await client.get(key) == b"v"
        finally:
            await client.aclose()

    asyncio.run(write_read("before"))
    _restart(server)
    asyncio.run(write_read("after"))


@pytest.mark.redis_cluster
def test_redis_cluster_roundtrip_and_restart(owned: list[ManagedServer]) -> None:
    cluster = pytest.importorskip("redis.asyncio.cluster")
    server = _start(servers.start_redis_cluster)
    owned.append(server)
    assert server.url.startswith("redis+cluster://127.0.0.1:")
    plain_url = "redis://" + server.url.removeprefix("redis+cluster://")

    async def write_read() -> int:
        client = cluster.RedisCluster.from_url(plain_url)
        try:
            keys = [f"key-{i}" for i in range(30)]  # spread over all three masters
            for key in keys:
                await client.set(key, key)
            for key in keys:
                assert await client.get(key) == key.encode()
            return len(client.get_primaries())
        finally:
            await client.aclose()

    assert asyncio.run(write_read()) == 3
    _restart(server)
    assert asyncio.run(write_read()) == 3


@pytest.mark.redis
def test_redis_sentinel_names_the_primary_and_restarts(owned: list[ManagedServer]) -> None:
    sentinel = pytest.importorskip("redis.asyncio.sentinel")
    server = _start(servers.start_redis_sentinel)
    owned.append(server)
    assert isinstance(server, servers.RedisSentinelServer)
    assert server.url.startswith("redis+sentinel://127.0.0.1:")
    assert server.url.endswith(f"/{servers.SENTINEL_SERVICE}/0")
    primary, replica = server.data_ports

    async def write_read() -> tuple[str, int]:
        finder = sentinel.Sentinel([("127.0.0.1", port) for port in server.sentinel_ports])
        client = finder.master_for(servers.SENTINEL_SERVICE)
        try:
            await client.set("key", "value")
            assert await client.get("key") == b"value"
            # Three Sentinels, each knowing the replica and the two others.
            host, port = await finder.discover_master(servers.SENTINEL_SERVICE)
            return host, port
        finally:
            await client.aclose()
            for each in finder.sentinels:
                await each.aclose()

    assert asyncio.run(write_read()) == ("127.0.0.1", primary)
    assert server.primary_port() == primary
    assert "role:slave" in servers.redis_command(replica, "INFO", "replication")
    _restart(server)
    assert asyncio.run(write_read()) == ("127.0.0.1", primary)


@pytest.mark.mongo
def test_mongo_roundtrip_and_restart(owned: list[ManagedServer]) -> None:
    pymongo = pytest.importorskip("pymongo")
    server = _start(servers.start_mongo)
    owned.append(server)

    def write_read(doc_id: str) -> None:
        client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=5000)
        try:
            coll = client.get_default_database()["things"]
            coll.insert_one({"_id": doc_id, "n": 1})
            assert coll.find_one({"_id": doc_id}) == {"_id": doc_id, "n": 1}
        finally:
            client.close()

    write_read("before")
    _restart(server)
    write_read("after")  # storage is :memory:, so "before" is gone; same _id would work too


@pytest.mark.mongo
def test_mongo_transactions_work(owned: list[ManagedServer]) -> None:
    """The MongoDB backend relies on this (see tools/testservers/README.md)."""
    pymongo = pytest.importorskip("pymongo")
    server = _start(servers.start_mongo)
    owned.append(server)
    client = pymongo.MongoClient(server.url, serverSelectionTimeoutMS=5000)
    try:
        assert client.admin.command("hello").get("setName") == "secantus"
        coll = client.get_default_database()["tx"]
        with client.start_session() as session:
            session.with_transaction(lambda s: coll.insert_one({"_id": 1}, session=s))
            session.start_transaction()
            coll.insert_one({"_id": 2}, session=session)
            session.abort_transaction()
        assert [d["_id"] for d in coll.find()] == [1]
    finally:
        client.close()


@pytest.mark.redis
def test_finder_caches_and_revives(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTSESSIONS_REDIS_URL", raising=False)
    url = _start(servers.find_redis)
    assert servers.find_redis() == url  # one server per kind per process
    server = servers.started_server("redis")
    assert server is not None
    assert server.url == url
    server.stop()  # e.g. a restart test that forgot to restart it
    assert servers.find_redis() == url
    assert server.is_running()


@pytest.mark.redis
def test_main_module_prints_urls_and_stops_on_sigterm(tmp_path: Path) -> None:
    env_file = tmp_path / "servers.env"
    env = dict(os.environ)
    env.pop("AGENTSESSIONS_REDIS_URL", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentsessions_testservers", "redis", "--env-file", str(env_file)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not env_file.exists():
            if proc.poll() is not None:
                _, err = proc.communicate()
                if "no redis server available" in err and not REQUIRE_SERVERS:
                    pytest.skip(err)
                pytest.fail(f"python -m agentsessions_testservers exited early: {err}")
            assert time.monotonic() < deadline, (
                "python -m agentsessions_testservers did not get ready"
            )
            time.sleep(0.1)
        line = env_file.read_text().strip()
        assert line.startswith("export AGENTSESSIONS_REDIS_URL=redis://127.0.0.1:")
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert _port_open(port)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0
        assert out.strip() == line
        assert not env_file.exists()
        assert not _port_open(port)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
