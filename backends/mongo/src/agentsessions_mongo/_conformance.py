"""The conformance kit's storage inventory of MongoDB, registered for URL mode.

Loaded only by the kit (entry point group ``agentsessions_conformance``): it counts the
documents of the session's collections directly, published or not, expired or not.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentsessions import SessionManager
    from agentsessions_conformance import Inventory

__all__ = ["agentsessions_conformance_inventory", "mongo_inventory"]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")


async def mongo_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """Every document of the session: its session document, events and archive."""
    from agentsessions_conformance import Inventory

    from ._manager import MongoSessionManager

    assert isinstance(manager, MongoSessionManager)
    await manager.open()
    sessions, events, archive = manager._sessions, manager._events, manager._archive
    records = await sessions.count_documents({"_id": session_id})
    doc = await sessions.find_one({"_id": session_id}, {"first": 1})
    # Relative to the first position a compaction moved (0 for an erased id).
    base = doc.get("first", 0) if doc else 0
    cursor = events.find({"session": session_id}, {"pos": 1})
    positions = [item["pos"] - base async for item in cursor]
    archived = await archive.count_documents({"session": session_id})
    return Inventory(records=records, events=positions, archived=archived)


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import MongoSessionManager

    return mongo_inventory if isinstance(manager, MongoSessionManager) else None
