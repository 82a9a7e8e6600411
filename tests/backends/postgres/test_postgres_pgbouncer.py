"""The doctor's ``postgres.pgbouncer`` check through a private PgBouncer in transaction
pooling, and straight on the server."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
from agentsessions import Finding, connect
from agentsessions_postgres._diagnosis import pgbouncer

#: Seconds PgBouncer gets to listen.
START_TIMEOUT = 10.0


def _pgbouncer_binary() -> str:
    found = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")
    if found is None:
        message = "pgbouncer is not installed (apt-get install pgbouncer)"
        if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1":
            pytest.fail(message + " (AGENTSESSIONS_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(message)
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def bouncer_url(postgres_url: str, schema: str, tmp_path: Path) -> Iterator[str]:
    """A URL through a PgBouncer of this test's own (pool_mode = transaction) in front
    of ``postgres_url``'s server, with the test's schema; stopped by its PID after."""
    binary = _pgbouncer_binary()
    server = urlsplit(postgres_url)
    user = unquote(server.username or "postgres")
    database = server.path.lstrip("/")
    target = f"host={server.hostname} port={server.port or 5432} dbname={database} user={user}"
    if server.password:
        target += f" password={unquote(server.password)}"
    port = _free_port()
    users = tmp_path / "users.txt"
    users.write_text(f'"{user}" ""\n')
    config = tmp_path / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n{database} = {target}\n"
        "[pgbouncer]\nlisten_addr = 127.0.0.1\n"
        f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\n"
        f"auth_file = {users}\npool_mode = transaction\n"
    )
    # PgBouncer refuses to run as root; it reads its config before switching user.
    as_user = ["-u", "postgres"] if os.geteuid() == 0 else []
    process = subprocess.Popen(
        [binary, *as_user, str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    _, err = process.communicate(timeout=5)
                    pytest.fail(f"pgbouncer did not start: {err.decode(errors='replace')}")
                time.sleep(0.05)
        yield f"postgresql://{user}@127.0.0.1:{port}/{database}?schema={schema}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        assert process.stderr is not None
        process.stderr.close()


async def check(url: str, **options: Any) -> Finding:
    async with connect(url, **options) as manager:
        report = await manager.diagnose()
    return {f.check: f for f in report.findings}["postgres.pgbouncer"]


async def test_transaction_pooling_without_the_option_is_an_error(bouncer_url: str) -> None:
    found = await check(bouncer_url)
    assert found.severity == "error", found
    assert "pgbouncer=true" in found.fix


async def test_transaction_pooling_with_the_option_is_ok(bouncer_url: str) -> None:
    found = await check(bouncer_url, pgbouncer=True)
    assert found.severity == "ok", found
    assert "transaction pooling" in found.found


async def test_straight_on_the_server_no_pooler_is_seen(schema_url: str) -> None:
    found = await check(schema_url)
    assert found.severity == "ok", found
    assert found.found == "no proxy in front of the server"
    found = await check(schema_url, pgbouncer=True)
    assert found.severity == "info", found
    assert "no proxy" in found.found


def test_a_proxy_without_transaction_pooling_judged_from_readings() -> None:
    # PgBouncer in session mode is not started here: the readings it gives instead.
    assert pgbouncer(False, False, True).severity == "ok"
    assert "a proxy without" in pgbouncer(True, False, True).found
