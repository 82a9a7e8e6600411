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
    """Every document of the session: its session document (and tail), buckets and archive."""
    from agentsessions_conformance import Inventory

    from ._buckets import stored_positions
    from ._manager import MongoSessionManager

    assert isinstance(manager, MongoSessionManager)
    await manager.open()
    sessions, events, archive = manager._sessions, manager._events, manager._archive
    records = await sessions.count_documents({"_id": session_id})
    doc = await sessions.find_one({"_id": session_id}, {"first": 1, "tail": 1, "tail_start": 1})
    docs = await events.find({"session": session_id}, {"pos": 1, "data": 1}).to_list(None)
    archived = await archive.count_documents({"session": session_id})
    # Every event of every bucket and of the tail, relative to the first position a
    # compaction moved (0 for an erased id).
    return Inventory(records=records, events=stored_positions(doc, docs), archived=archived)


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import MongoSessionManager

    return mongo_inventory if isinstance(manager, MongoSessionManager) else None
