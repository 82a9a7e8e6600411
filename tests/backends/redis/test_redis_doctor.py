"""The Redis doctor against private servers configured to lose sessions, and configured not to."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from agentsessions import Diagnosis, Finding, connect
from agentsessions_testservers import (
    SENTINEL_SERVICE,
    ManagedServer,
    RedisSentinelServer,
    redis_command,
    start_redis,
    start_redis_sentinel,
)
from redis.asyncio import Redis

PASSWORD = "doc7pw"


def _port(server: ManagedServer) -> int:
    return int(server.url.rsplit(":", 1)[1].split("/")[0])


@pytest.fixture(scope="module")
def bare() -> Iterator[ManagedServer]:
    """No persistence at all: what the test servers (and this project's CI Redis) run."""
    with start_redis() as server:
        yield server


@pytest.fixture(scope="module")
def durable() -> Iterator[ManagedServer]:
    """appendonly yes, appendfsync always, noeviction: configured to keep sessions."""
    with start_redis(appendonly=True) as server:
        yield server


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


@asynccontextmanager
async def policy(server: ManagedServer, value: str) -> AsyncIterator[None]:
    redis_command(_port(server), "CONFIG", "SET", "maxmemory-policy", value)
    try:
        yield
    finally:
        redis_command(_port(server), "CONFIG", "SET", "maxmemory-policy", "noeviction")


async def test_no_persistence_is_an_error(bare: ManagedServer) -> None:
    found = by_check(await diagnose(bare.url))
    assert found["redis.persistence"].severity == "error"
    assert "restart loses every one" in found["redis.persistence"].consequence


async def test_a_well_configured_server_reports_nothing_above_info(durable: ManagedServer) -> None:
    report = await diagnose(durable.url)
    assert report.at_least("warning") == (), report.at_least("warning")
    found = by_check(report)
    assert found["redis.persistence"].severity == "ok"
    assert found["redis.eviction"].severity == "ok"
    # Measured against the server's TIME on this machine: one clock, no skew.
    assert found["common.clock_skew"].severity == "ok"


async def test_everysec_and_snapshots_are_reported_for_what_they_lose(
    durable: ManagedServer,
) -> None:
    port = _port(durable)
    redis_command(port, "CONFIG", "SET", "appendfsync", "everysec")
    try:
        assert by_check(await diagnose(durable.url))["redis.persistence"].severity == "info"
    finally:
        redis_command(port, "CONFIG", "SET", "appendfsync", "always")
    redis_command(port, "CONFIG", "SET", "appendonly", "no")
    redis_command(port, "CONFIG", "SET", "save", "3600 1")
    try:
        assert by_check(await diagnose(durable.url))["redis.persistence"].severity == "warning"
    finally:
        redis_command(port, "CONFIG", "SET", "save", "")
        redis_command(port, "CONFIG", "SET", "appendonly", "yes")


async def test_an_allkeys_policy_evicting_sessions_is_critical(durable: ManagedServer) -> None:
    async with policy(durable, "allkeys-lru"):
        found = by_check(await diagnose(durable.url))
    assert found["redis.eviction"].severity == "critical"
    assert "allkeys-lru" in found["redis.eviction"].found


async def test_a_volatile_policy_matters_only_with_a_ttl(durable: ManagedServer) -> None:
    async with policy(durable, "volatile-lru"):
        without = by_check(await diagnose(durable.url))["redis.eviction"]
        with_ttl = by_check(await diagnose(durable.url, ttl=3600))["redis.eviction"]
    assert without.severity == "info"
    assert with_ttl.severity == "critical"


async def test_replicas_against_wait_replicas(durable: ManagedServer) -> None:
    with start_redis() as replica:
        port = _port(replica)
        redis_command(port, "REPLICAOF", "127.0.0.1", str(_port(durable)))
        try:
            for _ in range(200):  # bounded: the link comes up within a few seconds
                if "connected_slaves:1" in redis_command(_port(durable), "INFO", "replication"):
                    break
                await asyncio.sleep(0.05)
            assert by_check(await diagnose(durable.url))["redis.replication"].severity == (
                "warning"
            )
            found = by_check(await diagnose(durable.url, wait_replicas=1))
            assert found["redis.replication"].severity == "ok"
            found = by_check(await diagnose(durable.url, wait_replicas=2))
            assert found["redis.replication"].severity == "error"
            found = by_check(await diagnose(replica.url))
            assert found["redis.replication"].severity == "error"
            assert "replica" in found["redis.replication"].found
        finally:
            redis_command(port, "REPLICAOF", "NO", "ONE")
    alone = by_check(await diagnose(durable.url))["redis.replication"]
    assert alone.severity == "info"


async def test_config_refused_is_a_warning_and_the_password_stays_hidden(
    durable: ManagedServer,
) -> None:
    port = _port(durable)
    redis_command(port, "ACL", "SETUSER", "doc", "on", f">{PASSWORD}", "~*", "+@all", "-config")
    try:
        url = durable.url.replace("redis://", f"redis://doc:{PASSWORD}@")
        report = await diagnose(url)
    finally:
        redis_command(port, "ACL", "DELUSER", "doc")
    found = by_check(report)
    assert found["redis.config"].severity == "warning"
    assert "redis.persistence" not in found
    assert found["common.password"].severity == "info"
    assert PASSWORD not in report.model_dump_json()


async def test_a_cluster_without_replicas(redis_cluster_url: str) -> None:
    found = by_check(await diagnose(redis_cluster_url))
    assert found["redis.cluster_slots"].severity == "ok"
    assert found["redis.cluster_replicas"].severity == "warning"
    assert "3 of 3 primaries" in found["redis.cluster_replicas"].found


def test_cluster_slots_judged_from_recorded_cluster_info() -> None:
    from agentsessions_redis._diagnosis import cluster_findings

    slots, replicas = cluster_findings(
        {"cluster_state": "fail", "cluster_slots_ok": "10923"}, {"a:1": 1, "b:2": 1}
    )
    assert slots.severity == "critical"
    assert "10923 of 16384" in slots.found
    assert replicas.severity == "ok"


async def test_sentinels_and_the_replicas_they_know(redis_sentinel_url: str) -> None:
    found = by_check(await diagnose(redis_sentinel_url, wait_replicas=1))
    assert found["redis.sentinel_quorum"].severity == "ok"
    assert found["redis.sentinel_replicas"].severity == "ok"
    assert "know 3 Sentinels, quorum 2" in found["redis.sentinel_quorum"].found
    found = by_check(await diagnose(redis_sentinel_url, wait_replicas=2, timeout=5))
    assert found["redis.sentinel_replicas"].severity == "error"


async def test_a_quorum_the_sentinels_cannot_reach_is_an_error() -> None:
    with start_redis_sentinel() as deployment:
        assert isinstance(deployment, RedisSentinelServer)
        for port in deployment.sentinel_ports:
            redis_command(port, "SENTINEL", "SET", SENTINEL_SERVICE, "quorum", "4")
        found = by_check(await diagnose(deployment.url))["redis.sentinel_quorum"]
    assert found.severity == "error"
    assert "NOQUORUM" in found.found


def test_sentinels_judged_from_recorded_replies() -> None:
    from agentsessions_redis._diagnosis import sentinel_findings

    view = {"num-other-sentinels": 1, "quorum": 2, "num-slaves": 0}
    quorum, replicas = sentinel_findings("m", [view, view], [], 0)
    assert quorum.severity == "warning"  # two Sentinels: one more loss stops failovers
    assert replicas.severity == "warning"  # nothing to promote
    (down,) = sentinel_findings("m", [None, None, None], [], 0)
    assert down.severity == "critical"


async def test_the_suites_own_redis_is_judged_by_its_real_settings(redis_url: str) -> None:
    # The server the suite runs on (CI's, which keeps nothing, or a private one, which
    # neither does) is read back independently: the doctor's verdict must match it.
    raw = Redis.from_url(redis_url, decode_responses=True)
    try:
        config = {**await raw.config_get("appendonly"), **await raw.config_get("save")}
    finally:
        await raw.aclose()
    found = by_check(await diagnose(redis_url))["redis.persistence"]
    keeps_nothing = config["appendonly"] == "no" and not config["save"].strip()
    assert (found.severity == "error") == keeps_nothing, (config, found)


async def test_encryption_at_rest_is_the_clients_to_give(durable: ManagedServer) -> None:
    # Redis cannot encrypt its own files: off, the finding says so and names the
    # disk; the client's encryption, on, makes it ok.
    url = durable.url
    found = by_check(await diagnose(url))["redis.encryption_at_rest"]
    assert found.severity == "info"
    assert found.found.startswith("Redis does not encrypt its RDB snapshots")
    assert "encrypt the disk" in found.fix and "Keyring" in found.fix
    keyring = pytest.importorskip("agentsessions.encryption").Keyring({"k1": bytes(range(32))})
    found = by_check(await diagnose(url, encryption=keyring))["redis.encryption_at_rest"]
    assert found.severity == "ok"
    assert found.found.startswith("client-side encryption is on")
