"""The conformance kit's storage inventory of PostgreSQL, registered for URL mode.

Loaded only by the kit (entry point group ``agentsessions_conformance``): it reads the
tables with plain SQL, past the manager's logic, so erasure and orphans show.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentsessions import SessionManager
    from agentsessions_conformance import Inventory

__all__ = ["agentsessions_conformance_inventory", "postgres_inventory"]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")


async def postgres_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The session's row, its event rows' positions and its archived rows, by plain SQL."""
    from agentsessions_conformance import Inventory

    from ._manager import PostgresSessionManager
    from ._schema import quote_ident

    assert isinstance(manager, PostgresSessionManager)
    await manager.open()
    # Only the quoted schema name is interpolated (S608); the values are parameters.
    schema = quote_ident(manager.options.schema)
    key = (manager.options.namespace, session_id)
    where = "WHERE namespace = $1 AND session_id = $2"
    sessions = f"{schema}.agentsessions_sessions {where}"
    async with manager._connection() as connection:
        records = await connection.fetchval(f"SELECT count(*) FROM {sessions}", *key)  # noqa: S608
        # Relative to the first position a compaction moved (0 for an erased id).
        first = await connection.fetchval(f"SELECT first_position FROM {sessions}", *key)  # noqa: S608
        events = f"SELECT position FROM {schema}.agentsessions_events {where}"  # noqa: S608
        rows = await connection.fetch(events, *key)
        archive = f"SELECT count(*) FROM {schema}.agentsessions_archive {where}"  # noqa: S608
        archived = await connection.fetchval(archive, *key)
    base = first or 0
    return Inventory(records=records, events=[row[0] - base for row in rows], archived=archived)


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import PostgresSessionManager

    return postgres_inventory if isinstance(manager, PostgresSessionManager) else None
