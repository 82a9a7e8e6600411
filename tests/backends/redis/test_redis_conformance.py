"""The conformance kit against one Redis server, a Redis Cluster and a Sentinel deployment
(with and without waiting for the replica's acknowledgement of each write)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from agentsessions import SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_redis._conformance import redis_inventory
from encryption_params import make_keyring


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
