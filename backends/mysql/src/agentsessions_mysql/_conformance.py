"""The conformance kit's storage inventory of MySQL/MariaDB, registered for URL mode.

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

__all__ = ["agentsessions_conformance_inventory", "mysql_inventory"]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")

# The key columns are binary: compare bytes, as the manager's statements do.
_RECORDS = "SELECT count(*) FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s"
_FIRST = (
    "SELECT first_position FROM agentsessions_sessions WHERE namespace = %s AND session_id = %s"
)
_POSITIONS = "SELECT position FROM agentsessions_events WHERE namespace = %s AND session_id = %s"
_ARCHIVED = "SELECT count(*) FROM agentsessions_archive WHERE namespace = %s AND session_id = %s"


async def mysql_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The session's row, its event rows' positions and its archived rows, by plain SQL."""
    from agentsessions_conformance import Inventory

    from ._manager import MySQLSessionManager

    assert isinstance(manager, MySQLSessionManager)
    await manager.open()
    key = (manager.options.namespace.encode(), session_id.encode())
    async with manager._connection() as connection, connection.cursor() as cursor:
        await cursor.execute(_RECORDS, key)
        records = int((await cursor.fetchone())[0])
        # Relative to the first position a compaction moved (0 for an erased id).
        await cursor.execute(_FIRST, key)
        first = await cursor.fetchone()
        await cursor.execute(_POSITIONS, key)
        positions = [int(row[0]) for row in await cursor.fetchall()]
        await cursor.execute(_ARCHIVED, key)
        archived = int((await cursor.fetchone())[0])
    base = int(first[0]) if first else 0
    return Inventory(
        records=records, events=[position - base for position in positions], archived=archived
    )


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import MySQLSessionManager

    return mysql_inventory if isinstance(manager, MySQLSessionManager) else None
