"""The conformance kit against MySQL/MariaDB, one fresh database per test; again encrypted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_mysql import MySQLSessionManager
from agentsessions_mysql._conformance import mysql_inventory
from encryption_params import make_keyring

pytestmark = pytest.mark.mysql


class TestMySQLConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, database_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(database_url)
        assert isinstance(manager, MySQLSessionManager)
        await manager.open()
        yield manager
        await manager.close()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await mysql_inventory(manager, session_id)


class TestMySQLEncryptedConformance(TestMySQLConformance):
    @pytest_asyncio.fixture
    async def manager(self, database_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(database_url, encryption=make_keyring())
        await manager.open()
        yield manager
        await manager.close()
