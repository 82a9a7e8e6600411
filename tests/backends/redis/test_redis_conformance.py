"""The conformance kit against one Redis server and against a Redis Cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest_asyncio
from agentsessions import SessionManager
from agentsessions_conformance import SessionManagerTests
from agentsessions_redis import RedisSessionManager


async def _list_positions(manager: SessionManager, session_id: str) -> list[int]:
    # A list has no stored positions: its indexes are them. What could go wrong is its
    # length (orphaned or missing entries), which this exposes.
    assert isinstance(manager, RedisSessionManager)
    length = await manager.client.llen(manager.keys.session(session_id).events)
    return list(range(int(length)))


class TestRedisConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, standalone: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await standalone()

    async def raw_event_positions(
        self, manager: SessionManager, session_id: str
    ) -> list[int] | None:
        return await _list_positions(manager, session_id)


class TestRedisClusterConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, cluster: Callable[..., Any]) -> AsyncIterator[SessionManager]:
        yield await cluster()

    async def raw_event_positions(
        self, manager: SessionManager, session_id: str
    ) -> list[int] | None:
        return await _list_positions(manager, session_id)
