"""The PostgreSQL doctor against a private server configured to lose data, then fixed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from agentsessions import Diagnosis, Finding, connect
from agentsessions_postgres._diagnosis import replication, version
from agentsessions_testservers import ManagedServer, start_postgres

DURABLE = {"fsync": "on", "full_page_writes": "on", "synchronous_commit": "on"}


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedServer]:
    """The test server: fsync, full_page_writes and synchronous_commit all off."""
    with start_postgres() as started:
        yield started


@pytest.fixture(scope="module")
def durable() -> Iterator[ManagedServer]:
    """A private server with the durability settings PostgreSQL ships with."""
    with start_postgres(settings=DURABLE) as started:
        yield started


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


async def test_each_setting_that_loses_data_is_reported(server: ManagedServer) -> None:
    found = by_check(await diagnose(server.url))
    assert found["postgres.fsync"].severity == "critical"
    assert found["postgres.full_page_writes"].severity == "error"
    assert found["postgres.synchronous_commit"].severity == "warning"


async def test_a_well_configured_server_reports_nothing_above_info(
    durable: ManagedServer,
) -> None:
    report = await diagnose(durable.url)
    assert report.at_least("warning") == (), report.at_least("warning")
    found = by_check(report)
    for check in ("postgres.fsync", "postgres.full_page_writes", "postgres.synchronous_commit"):
        assert found[check].severity == "ok", found[check]
    assert found["postgres.schema_version"].severity == "ok"
    assert found["postgres.version"].severity == "ok"
    assert found["common.clock_skew"].severity == "ok"
    assert found["postgres.replication"].severity == "info"


async def test_synchronous_commit_off_for_one_database_is_seen(durable: ManagedServer) -> None:
    admin = await asyncpg.connect(durable.url)
    try:
        await admin.execute("DROP DATABASE IF EXISTS doctor_async")
        await admin.execute("CREATE DATABASE doctor_async")
        await admin.execute("ALTER DATABASE doctor_async SET synchronous_commit = off")
    finally:
        await admin.close()
    url = durable.url.rsplit("/", 1)[0] + "/doctor_async"
    assert by_check(await diagnose(url))["postgres.synchronous_commit"].severity == "warning"


async def test_a_multi_host_url_without_a_synchronous_standby_is_an_error(
    server: ManagedServer,
) -> None:
    host = server.url.split("@", 1)[1].split("/", 1)[0]
    url = server.url.replace(host, f"{host},{host}")
    found = by_check(await diagnose(url))["postgres.replication"]
    assert found.severity == "error"
    assert "2 hosts" in found.found


async def test_a_pool_larger_than_the_server_admits(server: ManagedServer) -> None:
    # The test server runs with max_connections 200.
    found = by_check(await diagnose(server.url, max_pool_size=500))["postgres.pool_size"]
    assert found.severity == "error"
    assert by_check(await diagnose(server.url, max_pool_size=5))["postgres.pool_size"].severity == (
        "ok"
    )


def test_standby_and_versions_judged_from_recorded_readings() -> None:
    # A standby and an old server are not started here: recorded readings instead.
    assert replication(1, True, "", "on").severity == "error"
    assert replication(2, False, "ANY 1 (s1, s2)", "on").severity == "ok"
    assert replication(2, False, "ANY 1 (s1, s2)", "local").severity == "error"
    assert version(120022).severity == "warning"
    assert version(170002).severity == "ok"


async def test_encryption_at_rest_is_the_clients_to_give(durable: ManagedServer) -> None:
    # PostgreSQL cannot encrypt its own files: off, the finding says so and names the
    # disk; the client's encryption, on, makes it ok.
    url = durable.url
    found = by_check(await diagnose(url))["postgres.encryption_at_rest"]
    assert found.severity == "info"
    assert found.found.startswith("PostgreSQL does not encrypt its files")
    assert "encrypt the disk" in found.fix and "Keyring" in found.fix
    keyring = pytest.importorskip("agentsessions.encryption").Keyring({"k1": bytes(range(32))})
    found = by_check(await diagnose(url, encryption=keyring))["postgres.encryption_at_rest"]
    assert found.severity == "ok"
    assert found.found.startswith("client-side encryption is on")
