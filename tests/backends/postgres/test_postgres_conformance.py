"""The conformance kit against PostgreSQL, one fresh schema per test; again encrypted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_postgres import PostgresSessionManager
from agentsessions_postgres._schema import quote_ident
from encryption_params import make_keyring

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
        assert isinstance(manager, PostgresSessionManager)
        schema = quote_ident(manager.options.schema)  # type: ignore[attr-defined]
        key = (manager.options.namespace, session_id)
        where = "WHERE namespace = $1 AND session_id = $2"
        async with manager._connection() as connection:
            records = await connection.fetchval(
                f"SELECT count(*) FROM {schema}.agentsessions_sessions {where}", *key
            )
            # Relative to the first position a compaction moved (0 for an erased id).
            first = await connection.fetchval(
                f"SELECT first_position FROM {schema}.agentsessions_sessions {where}", *key
            )
            rows = await connection.fetch(
                f"SELECT position FROM {schema}.agentsessions_events {where}", *key
            )
            archived = await connection.fetchval(
                f"SELECT count(*) FROM {schema}.agentsessions_archive {where}", *key
            )
        base = first or 0
        return Inventory(records=records, events=[row[0] - base for row in rows], archived=archived)


class TestPostgresEncryptedConformance(TestPostgresConformance):
    @pytest_asyncio.fixture
    async def manager(self, schema_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(schema_url, encryption=make_keyring())
        await manager.open()
        yield manager
        await manager.close()
