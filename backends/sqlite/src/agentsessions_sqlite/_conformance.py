"""The conformance kit's view of SQLite, registered for the kit (entry point group
``agentsessions_conformance``) like every other backend's: the storage inventory, by
plain SQL on the tables past the manager's logic, and how another process holds the
file's write lock.

Loaded only by the kit; nothing here is imported by the backend itself.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Awaitable, Callable

    from agentsessions import SessionManager
    from agentsessions_conformance import Inventory

__all__ = [
    "agentsessions_conformance_inventory",
    "agentsessions_conformance_write_lock",
    "sqlite_inventory",
]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")

# Takes SQLite's write lock (BEGIN IMMEDIATE), says so, and keeps it until stdin closes.
_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def _rows(conn: sqlite3.Connection, namespace: str, session_id: str) -> Inventory:
    from agentsessions_conformance import Inventory

    key = (namespace, session_id)
    (records,) = conn.execute(
        "SELECT count(*) FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?", key
    ).fetchone()
    # Relative to the session's first position (moved by compactions); orphans of an
    # erased session count from 0.
    first = conn.execute(
        "SELECT first_position FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?",
        key,
    ).fetchone()
    base = first[0] if first else 0
    rows = conn.execute(
        "SELECT position FROM agentsessions_events WHERE namespace = ? AND session_id = ?", key
    ).fetchall()
    (archived,) = conn.execute(
        "SELECT count(*) FROM agentsessions_archive WHERE namespace = ? AND session_id = ?", key
    ).fetchone()
    return Inventory(
        records=records, events=[position - base for (position,) in rows], archived=archived
    )


async def sqlite_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """`Inventory` of the SQLite backend, by plain SQL on its tables."""
    from ._manager import SQLiteSessionManager

    if not isinstance(manager, SQLiteSessionManager):
        raise TypeError(f"sqlite_inventory needs a SQLiteSessionManager, not {manager!r}")
    await manager.open()
    # Through the manager's own connection: a :memory: database exists nowhere else.
    writer: Any = manager._writer
    result: Inventory = await writer.call(_rows, manager.options.namespace, session_id)
    return result


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import SQLiteSessionManager

    return sqlite_inventory if isinstance(manager, SQLiteSessionManager) else None


@hookimpl
def agentsessions_conformance_write_lock(
    manager: SessionManager, lock_wait: float
) -> tuple[list[str], dict[str, Any]] | str | None:
    """A process holding the file's write lock, and the options setting SQLite's lock
    wait (``busy_timeout``) to *lock_wait* seconds."""
    from ._manager import SQLiteSessionManager

    if not isinstance(manager, SQLiteSessionManager):
        return None
    if manager.in_memory:
        return "sqlite:///:memory: lives inside this process: no other process can lock it"
    return [sys.executable, "-c", _HOLDER, manager.path], {"busy_timeout": lock_wait}
