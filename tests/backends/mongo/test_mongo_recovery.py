"""A server that goes away and comes back: calls fail cleanly, then work again.

These run against a private SecantusDB from ``servers.start_mongo()`` (in-memory, so a
restart comes back empty: that is fine, what is checked is the manager itself), with a
user and password so that the error messages can be checked for leaks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import agentsessions_testservers as servers
import pytest
from agentsessions import BackendUnavailableError, connect
from agentsessions_mongo import MongoSessionManager
from pymongo import AsyncMongoClient

pytestmark = [pytest.mark.mongo, pytest.mark.slow]

PASSWORD = "s3cr3t-pw"


@pytest.fixture
def private_server() -> Iterator[servers.ManagedServer]:
    try:
        server = servers.start_mongo()
    except servers.ServerUnavailable as exc:
        pytest.skip(f"cannot start a private SecantusDB: {exc}")
    try:
        yield server
    finally:
        server.close()


async def add_user(server: servers.ManagedServer) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        server.url, serverSelectionTimeoutMS=10_000
    )
    try:
        await client.admin.command("createUser", "alice", pwd=PASSWORD, roles=["root"])
    finally:
        await client.close()


def url_with_password(server: servers.ManagedServer) -> str:
    url = server.url.replace("mongodb://", f"mongodb://alice:{PASSWORD}@", 1)
    return f"{url}{'&' if '?' in url else '?'}authSource=admin"


async def test_manager_recovers_after_the_server_restarts(
    private_server: servers.ManagedServer,
) -> None:
    await add_user(private_server)
    manager = connect(
        url_with_password(private_server), server_selection_timeout=1.5, connect_timeout=1
    )
    assert isinstance(manager, MongoSessionManager)
    async with manager:
        session = await manager.create("survivor")
        session.add_event("user", "before")
        await manager.save(session)
        await asyncio.gather(*(manager.get("survivor") for _ in range(8)))

        loaded = await manager.get("survivor")
        assert loaded is not None
        loaded.add_event("user", "during")

        await asyncio.to_thread(private_server.stop)
        for call in (
            manager.get("survivor"),
            manager.create("during"),
            manager.save(loaded),
            manager.list_sessions(),
            manager.delete("survivor"),
        ):
            with pytest.raises(BackendUnavailableError) as caught:
                await call
            assert PASSWORD not in str(caught.value)
            assert "***" in caught.value.url
            assert caught.value.__cause__ is None and caught.value.__suppress_context__

        await asyncio.to_thread(private_server.start)
        # In-memory storage: the restarted server is empty, its user included.
        await add_user(private_server)
        # The same manager, not recreated, works again (pymongo reconnected by itself).
        assert await manager.get("survivor") is None
        again = await manager.create("survivor")
        again.add_event("user", "after")
        await manager.save(again)
        stored = await manager.get("survivor")
        assert stored is not None and [e.content for e in stored.events] == ["after"]


async def test_wrong_password_is_unavailable_and_masked(
    private_server: servers.ManagedServer,
) -> None:
    await add_user(private_server)
    url = url_with_password(private_server).replace(PASSWORD, "wrong-pw")
    manager = connect(url, server_selection_timeout=3)
    with pytest.raises(BackendUnavailableError) as caught:
        await manager.open()
    assert "wrong-pw" not in str(caught.value)
    await manager.close()
