"""Storage inventories registered by backend distributions, found by URL mode through pluggy.

A backend distribution declares one entry point in the group ``agentsessions_conformance``
naming a light module that implements `agentsessions_conformance_inventory` (marked with
`hookimpl`): given an opened manager, it returns the backend's `InventoryHook` when the
manager is one of its own, else None. URL mode asks every registered module and uses the
first answer, so ``agentsessions conformance URL`` runs the storage clauses on any
installed backend without adopter code. The kit registers memory and SQLite itself.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from agentsessions import SessionManager

    from ._inventory import Inventory

__all__ = [
    "INVENTORY_GROUP",
    "InventoryHook",
    "WireRoute",
    "WireRouteHook",
    "find_inventory",
    "find_wire_route",
    "hookimpl",
    "hookspec",
]

#: The entry-point group (and pluggy project name) of inventory registrations.
INVENTORY_GROUP = "agentsessions_conformance"
hookspec = pluggy.HookspecMarker(INVENTORY_GROUP)
hookimpl = pluggy.HookimplMarker(INVENTORY_GROUP)

#: ``async (manager, session_id) -> Inventory``: what the storage clauses call.
InventoryHook = Callable[["SessionManager", str], Awaitable["Inventory"]]
#: The (host, port) of every server a manager talks to, and the function from one proxy
#: port per server (in that order) to the URL that reaches them all through the proxies;
#: or why there is none (a string).
WireRoute = tuple[list[tuple[str, int]], Callable[[list[int]], str]] | str
#: ``async (opened manager) -> WireRoute``: how the wire clauses put a proxy before every
#: server of a deployment whose clients follow addresses the servers announce.
WireRouteHook = Callable[["SessionManager"], Awaitable[WireRoute]]


class _Specs:
    @hookspec(firstresult=True)
    def agentsessions_conformance_inventory(self, manager: SessionManager) -> InventoryHook | None:
        """*manager*'s storage inventory if it is this plugin's backend, else None."""

    @hookspec(firstresult=True)
    def agentsessions_conformance_wire_route(self, manager: SessionManager) -> WireRouteHook | None:
        """How to route *manager*'s traffic through the kit's fault proxies, if this
        plugin's backend needs more than the URL's hosts rewritten, else None."""


class _Builtin:
    """The backends the kit knows itself: memory (core) and SQLite."""

    @hookimpl(trylast=True)
    def agentsessions_conformance_inventory(self, manager: SessionManager) -> InventoryHook | None:
        from agentsessions import MemorySessionManager

        from ._inventory import memory_inventory, sqlite_inventory

        if isinstance(manager, MemorySessionManager):

            async def memory(manager: SessionManager, session_id: str) -> Inventory:
                return memory_inventory(manager, session_id)

            return memory
        # By module name: SQLite's backend need not be installed to run the kit.
        kinds = type(manager).__mro__
        if any(kind.__module__.startswith("agentsessions_sqlite") for kind in kinds):
            return sqlite_inventory
        return None


_lock = threading.Lock()
_manager: list[pluggy.PluginManager] = []


def _plugins() -> pluggy.PluginManager:
    with _lock:
        if not _manager:
            pm = pluggy.PluginManager(INVENTORY_GROUP)
            pm.add_hookspecs(_Specs)
            pm.register(_Builtin(), "agentsessions_conformance.builtin")
            pm.load_setuptools_entrypoints(INVENTORY_GROUP)
            _manager.append(pm)
        return _manager[0]


def find_inventory(manager: SessionManager) -> InventoryHook | None:
    """The registered storage inventory for *manager*'s backend, or None if none is."""
    hook: Any = _plugins().hook.agentsessions_conformance_inventory
    found: InventoryHook | None = hook(manager=manager)
    return found


def find_wire_route(manager: SessionManager) -> WireRouteHook | None:
    """The registered wire route for *manager*'s backend, or None (the URL's hosts do)."""
    hook: Any = _plugins().hook.agentsessions_conformance_wire_route
    found: WireRouteHook | None = hook(manager=manager)
    return found
