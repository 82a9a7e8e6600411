"""Managers on fresh random namespaces of the Redis and Redis Cluster servers.

The machine's own Redis may be shared: nothing here flushes a database; each test
works in a random namespace and deletes every key under its prefix afterwards.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from agentsessions import connect
from agentsessions_redis import RedisSessionManager
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster


def new_namespace() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


async def keys_under(manager: RedisSessionManager, prefix: str | None = None) -> list[bytes]:
    """Every key under the namespace prefix, on every node of a cluster."""
    pattern = (prefix or manager.keys.prefix) + "*"
    client = manager.client
    return [key async for key in client.scan_iter(match=pattern, count=1000)]


async def drop_namespace(manager: RedisSessionManager) -> None:
    client: Redis | RedisCluster = manager.client
    for key in await keys_under(manager):
        await client.delete(key)  # one by one: keys of a cluster sit in different slots


def open_manager_factory(url: str) -> Callable[..., Any]:
    async def factory(**options: Any) -> RedisSessionManager:
        options.setdefault("namespace", new_namespace())
        manager = connect(url, **options)
        assert isinstance(manager, RedisSessionManager)
        await manager.open()
        return manager

    return factory


async def _managed(url: str) -> AsyncIterator[Callable[..., Any]]:
    opened: list[RedisSessionManager] = []
    make = open_manager_factory(url)

    async def factory(**options: Any) -> RedisSessionManager:
        manager: RedisSessionManager = await make(**options)
        opened.append(manager)
        return manager

    yield factory
    for manager in opened:
        if manager._closed:  # the test closed it: clean up through a fresh one
            manager = manager.with_options()
            await manager.open()
        await drop_namespace(manager)
        await manager.close()


@pytest_asyncio.fixture
async def standalone(redis_url: str) -> AsyncIterator[Callable[..., Any]]:
    """``await standalone(ttl=...)``: an opened manager on a fresh namespace."""
    async for factory in _managed(redis_url):
        yield factory


@pytest_asyncio.fixture
async def cluster(redis_cluster_url: str) -> AsyncIterator[Callable[..., Any]]:
    async for factory in _managed(redis_cluster_url):
        yield factory


@pytest_asyncio.fixture
async def sentinel(redis_sentinel_url: str) -> AsyncIterator[Callable[..., Any]]:
    """Managers on the primary a Sentinel deployment names (``redis+sentinel://``)."""
    async for factory in _managed(redis_sentinel_url):
        yield factory


@pytest.fixture(params=["standalone", "cluster"])
def deployment(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Both kinds of deployment, one after the other."""
    factory: Callable[..., Any] = request.getfixturevalue(request.param)
    return factory
