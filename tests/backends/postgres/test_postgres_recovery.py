"""A server that goes away and comes back: calls fail cleanly, then work again.

These run against a private server from ``servers.start_postgres()`` (never the
machine's own), because they stop and restart it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import agentsessions_testservers as servers
import pytest
from agentsessions import BackendUnavailableError, connect
from agentsessions_postgres import PostgresSessionManager

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PASSWORD = "s3cr3t-pw"


@pytest.fixture
def private_server() -> Iterator[servers.ManagedServer]:
    try:
        server = servers.start_postgres()
    except servers.ServerUnavailable as exc:
        pytest.skip(f"cannot start a private PostgreSQL: {exc}")
    try:
        yield server
    finally:
        server.close()


def url_with_password(server: servers.ManagedServer) -> str:
    # The private server trusts loopback, so any password is accepted; what matters is
    # that it is in the URL the manager holds and never shows up in an error.
    return server.url.replace("postgres@", f"postgres:{PASSWORD}@", 1)


async def test_manager_recovers_after_the_server_restarts(
    private_server: servers.ManagedServer,
) -> None:
    manager = connect(url_with_password(private_server), connect_timeout=3, max_pool_size=4)
    assert isinstance(manager, PostgresSessionManager)
    async with manager:
        session = await manager.create("survivor")
        session.add_event("user", "before")
        await manager.save(session)
        # Several pooled connections exist when the server goes away.
        await asyncio.gather(*(manager.get("survivor") for _ in range(8)))

        await asyncio.to_thread(private_server.stop)
        for call in (manager.get("survivor"), manager.create("during")):
            with pytest.raises(BackendUnavailableError) as caught:
                await call
            assert PASSWORD not in str(caught.value)
            assert "***" in caught.value.url

        await asyncio.to_thread(private_server.start)
        # The same manager, not recreated: every call works again.
        for _ in range(8):
            stored = await manager.get("survivor")
            assert stored is not None
            assert [event.content for event in stored.events] == ["before"]
        stored.add_event("user", "after")
        await manager.save(stored)
        again = await manager.get("survivor")
        assert again is not None
        assert [event.content for event in again.events] == ["before", "after"]


async def test_first_use_while_the_server_is_down_recovers_later(
    private_server: servers.ManagedServer,
) -> None:
    await asyncio.to_thread(private_server.stop)
    manager = connect(url_with_password(private_server), connect_timeout=3)
    try:
        with pytest.raises(BackendUnavailableError) as caught:
            await manager.create("early")
        assert PASSWORD not in str(caught.value)

        await asyncio.to_thread(private_server.start)
        await manager.create("early")
        assert await manager.get("early") is not None
    finally:
        await manager.close()


async def test_stale_connections_after_a_restart_cost_reads_nothing_and_writes_one_error(
    private_server: servers.ManagedServer,
) -> None:
    # stop() and start() without yielding to the event loop in between: the pool only
    # learns that its connections died when it uses one.
    manager = connect(private_server.url, min_pool_size=3, max_pool_size=3)
    async with manager:
        await manager.create("blind")
        await asyncio.gather(*(manager.get("blind") for _ in range(6)))

        private_server.stop()
        private_server.start()
        # A read on a dead connection is retried once on a fresh one: no error at all.
        for _ in range(4):
            assert await manager.get("blind") is not None

        private_server.stop()
        private_server.start()
        # A write is never retried (it may have landed): at most one error, the one on
        # the first dead connection; the pool then replaces all of them.
        failures = 0
        for index in range(4):
            try:
                await manager.create(f"after-{index}")
            except BackendUnavailableError:
                failures += 1
        assert failures <= 1
        assert await manager.get("after-3") is not None
