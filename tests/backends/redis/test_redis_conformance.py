"""The conformance kit against one Redis server, a Redis Cluster and a Sentinel deployment
(with and without waiting for the replica's acknowledgement of each write)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from agentsessions import SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_redis import RedisSessionManager
from agentsessions_redis._keys import split_global_member
from encryption_params import make_keyring


async def _keys(manager: RedisSessionManager, prefix: str) -> list[bytes]:
    # scan_iter visits every node of a cluster. A prefix holds no glob character:
    # namespaces are [A-Za-z0-9_]* and the id sits in the key as base64url.
    return [key async for key in manager.client.scan_iter(match=prefix + "*", count=1000)]


async def redis_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The session's hash and event list, and every key or index entry naming it."""
    assert isinstance(manager, RedisSessionManager)
    client = manager.client
    keys = manager.keys.session(session_id)
    records = int(await client.exists(keys.hash))
    # A list has no stored positions: its indexes are them. What could go wrong is its
    # length (orphaned or missing entries), which this exposes.
    length = int(await client.llen(keys.events))
    archived = int(await client.llen(keys.archive))
    other: list[str] = []
    base = keys.hash.removesuffix(":h")
    for key in await _keys(manager, base):
        if key.decode() not in (keys.hash, keys.events, keys.archive):
            other.append(f"key {key!r}")
    wanted = session_id.encode()
    for member in await client.zrange(manager.keys.index, 0, -1):
        if split_global_member(member)[0] == wanted:
            other.append(f"index entry {member!r}")
    for key in await _keys(manager, manager.keys.prefix + "user:"):
        if await client.zscore(key, session_id) is not None:
            other.append(f"user index {key!r}")
    return Inventory(records=records, events=list(range(length)), other=other, archived=archived)


class TestRedisConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, standalone: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await standalone()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await redis_inventory(manager, session_id)


class TestRedisEncryptedConformance(TestRedisConformance):
    # The cluster's kit runs without encryption only: what encryption changes is what
    # the manager hands the backend, the same on one server as on a cluster.
    @pytest_asyncio.fixture
    async def manager(self, standalone: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        manager = await standalone()
        manager.encryption = make_keyring()
        yield manager


class TestRedisClusterConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, cluster: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await cluster()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await redis_inventory(manager, session_id)


class TestRedisSentinelConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, sentinel: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await sentinel()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await redis_inventory(manager, session_id)


class TestRedisSentinelWaitReplicasConformance(SessionManagerTests):
    """Every write followed by WAIT for the deployment's one replica."""

    @pytest_asyncio.fixture
    async def manager(self, sentinel: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await sentinel(wait_replicas=1)

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await redis_inventory(manager, session_id)
