"""The conformance kit against PostgreSQL, one fresh schema per test."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions import SessionManager, connect
from agentsessions_conformance import SessionManagerTests
from agentsessions_postgres import PostgresSessionManager
from agentsessions_postgres._schema import quote_ident

pytestmark = pytest.mark.postgres


class TestPostgresConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, schema_url: str) -> AsyncIterator[SessionManager]:
        manager = connect(schema_url)
        assert isinstance(manager, PostgresSessionManager)
        await manager.open()
        yield manager
        await manager.close()

    async def raw_event_positions(
        self, manager: SessionManager, session_id: str
    ) -> list[int] | None:
        assert isinstance(manager, PostgresSessionManager)
        async with manager._connection() as connection:
            rows = await connection.fetch(
                f"SELECT position FROM {quote_ident(manager.options.schema)}"  # type: ignore[attr-defined]
                ".agentsessions_events WHERE namespace = $1 AND session_id = $2",
                manager.options.namespace,
                session_id,
            )
        return [row[0] for row in rows]
