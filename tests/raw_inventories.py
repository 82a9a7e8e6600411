"""What a backend really stored, read past its manager: the kit's `raw_inventory` for the
PostgreSQL kit runs (one server, or a primary and standby through a multi-host URL)."""

from __future__ import annotations

from agentsessions import SessionManager
from agentsessions_conformance import Inventory
from agentsessions_postgres import PostgresSessionManager
from agentsessions_postgres._schema import quote_ident


async def postgres_inventory(manager: SessionManager, session_id: str) -> Inventory:
    assert isinstance(manager, PostgresSessionManager)
    schema = quote_ident(manager.options.schema)
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
