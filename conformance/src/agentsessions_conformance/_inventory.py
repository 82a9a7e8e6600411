"""`Inventory`: what an adopter's storage hook reports about one session id."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentsessions import SessionManager

__all__ = ["Inventory", "memory_inventory"]


@dataclass(frozen=True)
class Inventory:
    """What storage really holds under one session id, expired or not, read from the engine.

    ``records``: how many session rows / hashes / documents carry the id (0 or 1).
    ``events``: the position of every stored event row / list entry / document of it,
    in any order (a list's indexes are its positions), orphans of earlier lives included.
    A backend that keeps an offset instead of renumbering the events a compaction keeps
    reports positions relative to it (the first event at 0).
    ``other``: anything else that still names the session (index entries, user sets),
    one short description each; it must be empty once the session is erased.
    ``archived``: how many events compactions archived for the session (rows, list
    entries, documents of the archive); 0 for a backend without compaction.
    """

    records: int
    events: list[int] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    archived: int = 0

    @property
    def erased(self) -> bool:
        return self.records == 0 and not self.events and not self.other and not self.archived


def memory_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """`Inventory` of the in-memory backend (``memory://``), read from its store directly."""
    from agentsessions import MemorySessionManager

    if not isinstance(manager, MemorySessionManager):
        raise TypeError(f"memory_inventory needs a MemorySessionManager, not {manager!r}")
    store = manager._store
    with store.lock:
        stored = store.spaces.get(manager.options.namespace, {}).get(session_id)
        if stored is None:
            return Inventory(records=0)
        return Inventory(
            records=1, events=list(range(len(stored.events))), archived=len(stored.archive)
        )
