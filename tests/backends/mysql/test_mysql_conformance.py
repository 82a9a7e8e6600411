"""The conformance kit against MySQL/MariaDB, one fresh database per test; again encrypted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_mysql import MySQLSessionManager
from encryption_params import make_keyring

pytestmark = pytest.mark.mysql


async def mysql_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """What the tables hold for *session_id*, read with plain SQL past the manager."""
    assert isinstance(manager, MySQLSessionManager)
    key = (manager.options.namespace.encode(), session_id.encode())
    where = "WHERE namespace = %s AND session_id = %s"
    async with manager._connection() as connection, connection.cursor() as cursor:
        await cursor.execute(f"SELECT count(*) FROM agentsessions_sessions {where}", key)
        records = (await cursor.fetchone())[0]
        # Relative to the first position a compaction moved (0 for an erased id).
        await cursor.execute(f"SELECT first_position FROM agentsessions_sessions {where}", key)
        first = await cursor.fetchone()
        await cursor.execute(f"SELECT position FROM agentsessions_events {where}", key)
        positions = [row[0] for row in await cursor.fetchall()]
        await cursor.execute(f"SELECT count(*) FROM agentsessions_archive {where}", key)
        archived = (await cursor.fetchone())[0]
    base = first[0] if first else 0
    return Inventory(
        records=records, events=[position - base for position in positions], archived=archived
    )


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
