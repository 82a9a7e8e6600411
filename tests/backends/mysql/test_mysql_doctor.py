"""The MySQL/MariaDB doctor against a private MariaDB: each hazard provoked with
``SET GLOBAL`` (or a start option) and reported, and a well-configured server quiet.
Encryption at rest both ways for real: a MariaDB that encrypts its tables and logs with
the file_key_management plugin and a key generated here, and one that does not; MySQL
8's variables on recorded readings; a user without PROCESS, refused the tablespace
views, for real.

Never the shared server: its settings belong to the other tests."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncmy
import pytest
import pytest_asyncio
from agentsessions import Diagnosis, Finding, connect
from agentsessions_mysql._diagnosis import TABLES, durability, encryption, packet, read_only
from agentsessions_mysql._options import connect_arguments
from agentsessions_testservers import ManagedServer, ServerUnavailable, start_mysql

pytestmark = pytest.mark.mysql

#: The durable settings, with the binary log on (so sync_binlog is judged).
DURABLE = ("--log-bin=binlog", "--server-id=1", "--sync-binlog=1")
CHECKS = (
    "mysql.flush_log_at_trx_commit",
    "mysql.sync_binlog",
    "mysql.doublewrite",
    "mysql.max_allowed_packet",
    "mysql.read_only",
    "mysql.pool_size",
    "mysql.schema_version",
    "common.clock_skew",
)


def _start(*args: str) -> ManagedServer:
    try:
        return start_mysql(args=args)
    except ServerUnavailable as exc:  # pragma: no cover - mariadbd is installed in CI
        pytest.skip(f"no mariadbd to start: {exc}")


@pytest.fixture(scope="module")
def server() -> Iterator[ManagedServer]:
    with _start(*DURABLE) as started:
        yield started


async def set_global(url: str, name: str, value: str) -> None:
    args = connect_arguments(url)
    connection = await asyncmy.connect(**args, autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(f"SET GLOBAL {name} = {value}")
    finally:
        connection.close()


@pytest_asyncio.fixture
async def setting(server: ManagedServer) -> AsyncIterator[Any]:
    """``await setting(name, value)`` sets a global variable, restored after the test."""
    changed: dict[str, str] = {}

    async def change(name: str, value: str, restore: str) -> None:
        changed.setdefault(name, restore)
        await set_global(server.url, name, value)

    yield change
    for name, value in changed.items():
        await set_global(server.url, name, value)


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


async def test_a_well_configured_server_reports_nothing_above_info(
    server: ManagedServer,
) -> None:
    report = await diagnose(server.url)
    assert report.at_least("warning") == (), report.at_least("warning")
    found = by_check(report)
    for check in CHECKS:
        assert found[check].severity == "ok", found[check]
    assert "sync_binlog = 1" in found["mysql.sync_binlog"].found


@pytest.mark.parametrize(("value", "severity"), [("2", "warning"), ("0", "error")])
async def test_flush_log_at_trx_commit_below_1(
    server: ManagedServer, setting: Any, value: str, severity: str
) -> None:
    await setting("innodb_flush_log_at_trx_commit", value, "1")
    found = by_check(await diagnose(server.url))["mysql.flush_log_at_trx_commit"]
    assert found.severity == severity
    assert f"= {value}" in found.found


async def test_sync_binlog_0_with_the_binary_log_on(server: ManagedServer, setting: Any) -> None:
    await setting("sync_binlog", "0", "1")
    found = by_check(await diagnose(server.url))["mysql.sync_binlog"]
    assert (found.severity, found.found) == ("warning", "binary log on, sync_binlog = 0")


async def test_a_read_only_server(server: ManagedServer, setting: Any) -> None:
    await setting("read_only", "ON", "OFF")
    assert by_check(await diagnose(server.url))["mysql.read_only"].severity == "error"


async def test_max_allowed_packet_lowered_after_the_manager_opened(
    server: ManagedServer, setting: Any
) -> None:
    async with connect(server.url) as manager:
        await manager.open()  # a new manager would refuse to open at all
        await setting("max_allowed_packet", "1048576", "16777216")
        found = by_check(await manager.diagnose())["mysql.max_allowed_packet"]
    assert found.severity == "error"
    assert "1048576" in found.found


async def test_a_pool_larger_than_the_server_admits(server: ManagedServer, setting: Any) -> None:
    await setting("max_connections", "20", "151")
    found = by_check(await diagnose(server.url, max_pool_size=25))["mysql.pool_size"]
    assert found.severity == "error"
    assert "admits 20" in found.found
    found = by_check(await diagnose(server.url, max_pool_size=10))["mysql.pool_size"]
    assert found.severity == "info"


def test_doublewrite_off() -> None:
    # innodb_doublewrite is not dynamic on every supported server: a start option.
    with _start("--skip-innodb-doublewrite") as started:
        found = by_check(asyncio.run(diagnose(started.url)))
    assert found["mysql.doublewrite"].severity == "error"
    # Without a binary log there is nothing for sync_binlog to lose.
    assert found["mysql.sync_binlog"].severity == "ok"
    assert found["mysql.sync_binlog"].found.startswith("binary log off")


def test_readings_judged_alone() -> None:
    by = {f.check: f.severity for f in durability({"log_bin": "OFF", "sync_binlog": "0"})}
    assert by == {
        "mysql.flush_log_at_trx_commit": "ok",
        "mysql.sync_binlog": "ok",
        "mysql.doublewrite": "ok",
    }
    assert packet(9 * 1024 * 1024, 9 * 1024 * 1024 + 1).severity == "error"
    assert read_only("0").severity == "ok"


def _encrypting(keys: Path, *extra: str) -> ManagedServer:
    """A MariaDB encrypting tables, redo log and binary log with a key of its own."""
    keys.write_text(f"1;{os.urandom(32).hex()}\n", encoding="utf-8")
    keys.chmod(0o600)
    return _start(
        "--plugin-load-add=file_key_management",
        f"--file-key-management-filename={keys}",
        "--innodb-encrypt-tables=ON",
        "--innodb-encrypt-log=ON",
        "--innodb-encryption-threads=1",
        "--encrypt-binlog=ON",
        *DURABLE,
        *extra,
    )


# With innodb_file_per_table off the tables live in the (encrypted) system tablespace.
@pytest.mark.parametrize("layout", [(), ("--innodb-file-per-table=OFF",)], ids=["own", "system"])
def test_a_server_encrypting_tables_and_logs(tmp_path: Path, layout: tuple[str, ...]) -> None:
    with _encrypting(tmp_path / "keys.txt", *layout) as started:
        found = by_check(asyncio.run(diagnose(started.url)))["mysql.encryption_at_rest"]
    assert found.severity == "ok"
    assert found.found == f"the session tables are encrypted ({', '.join(TABLES)})"


def test_encrypted_tables_with_the_binary_log_in_clear(tmp_path: Path) -> None:
    # The last of a repeated option wins: everything encrypted but the binary log.
    with _encrypting(tmp_path / "keys.txt", "--encrypt-binlog=OFF") as started:
        found = by_check(asyncio.run(diagnose(started.url)))["mysql.encryption_at_rest"]
    assert found.severity == "info"
    assert found.found.endswith(
        "but not the binary log (encrypt_binlog = OFF): recent saves sit there in clear"
    )


async def test_a_server_that_does_not_encrypt(server: ManagedServer) -> None:
    found = by_check(await diagnose(server.url))["mysql.encryption_at_rest"]
    assert found.severity == "info"
    assert found.found == f"not encrypted: {', '.join(TABLES)} (innodb_encrypt_tables = OFF)"
    assert "innodb_encrypt_tables" in found.fix
    # The client's encryption covers what the server leaves in clear.
    keyring = pytest.importorskip("agentsessions.encryption").Keyring({"k1": bytes(range(32))})
    found = by_check(await diagnose(server.url, encryption=keyring))["mysql.encryption_at_rest"]
    assert (found.severity, found.found.startswith("client-side encryption is on")) == ("ok", True)
    assert "not encrypted" in found.found  # the server's own answer, still told


def test_encryption_judged_on_recorded_readings() -> None:
    every = dict.fromkeys(TABLES, True)
    maria = {"innodb_encrypt_tables": "ON", "innodb_encrypt_log": "ON", "encrypt_binlog": "OFF"}
    # Tables encrypted, the binary log (on) not: its events hold the sessions in clear.
    found = encryption(maria, every, log_bin=True, client_side=False)
    assert found.severity == "info"
    assert "but not the binary log (encrypt_binlog = OFF)" in found.found
    assert encryption(maria, every, log_bin=False, client_side=False).severity == "ok"
    # MySQL 8's names; the redo log left in clear.
    mysql = {
        "default_table_encryption": "ON",
        "innodb_redo_log_encrypt": "OFF",
        "binlog_encryption": "ON",
    }
    found = encryption(mysql, every, log_bin=True, client_side=False)
    assert "not the redo log (innodb_redo_log_encrypt = OFF)" in found.found
    mysql["innodb_redo_log_encrypt"] = "ON"
    assert encryption(mysql, every, log_bin=True, client_side=False).severity == "ok"
    # One table still in clear (a key rotation thread not done, or ENCRYPTED=NO).
    partial = {**every, "agentsessions_events": False}
    found = encryption(mysql, partial, log_bin=True, client_side=False)
    assert found.severity == "info"
    assert found.found == "not encrypted: agentsessions_events (default_table_encryption = ON)"
    # The tablespace views refused (no PROCESS privilege): unknown, said so.
    found = encryption(maria, None, log_bin=True, client_side=False)
    assert (found.severity, "could not be read" in found.found) == ("info", True)
    assert found.fix.startswith("grant the doctor's user PROCESS")


async def _grant_all_but_process(url: str) -> None:
    """A user 'app' with every privilege on the test database, none on the server."""
    connection = await asyncmy.connect(**connect_arguments(url), autocommit=True)
    try:
        async with connection.cursor() as cursor:
            # The private server starts with --skip-grant-tables: this turns grants on.
            await cursor.execute("FLUSH PRIVILEGES")
            await cursor.execute("CREATE USER 'app'@'127.0.0.1' IDENTIFIED BY 'apppw'")
            await cursor.execute(
                "GRANT ALL PRIVILEGES ON agentsessions_test.* TO 'app'@'127.0.0.1'"
            )
    finally:
        connection.close()


def test_a_user_without_process_is_told_what_could_not_be_read() -> None:
    with _start() as started:
        asyncio.run(_grant_all_but_process(started.url))
        url = started.url.replace("mysql://root@", "mysql://app:apppw@", 1)
        found = by_check(asyncio.run(diagnose(url)))
    encrypted = found["mysql.encryption_at_rest"]
    assert encrypted.severity == "info"
    assert encrypted.found.startswith("the tablespaces' encryption could not be read")
    assert encrypted.found.endswith("the default for new tables: OFF")
    assert encrypted.fix.startswith("grant the doctor's user PROCESS")
    assert found["mysql.schema_version"].severity == "ok"  # the rest of the run went on
