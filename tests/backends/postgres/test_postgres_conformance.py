"""The conformance kit against PostgreSQL, one fresh schema per test; again encrypted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_postgres import PostgresSessionManager
from encryption_params import make_keyring
from raw_inventories import postgres_inventory

pytestmark = pytest.mark.postgres


class TestPostgresConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, schema_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(schema_url)
        assert isinstance(manager, PostgresSessionManager)
        await manager.open()
        yield manager
        await manager.close()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await postgres_inventory(manager, session_id)


class TestPostgresEncryptedConformance(TestPostgresConformance):
    @pytest_asyncio.fixture
    async def manager(self, schema_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(schema_url, encryption=make_keyring())
        await manager.open()
        yield manager
        await manager.close()
