"""Storage inventories registered by backend distributions, found by URL mode through pluggy.

A backend distribution declares one entry point in the group ``agentsessions_conformance``
naming a light module that implements `agentsessions_conformance_inventory` (marked with
`hookimpl`): given an opened manager, it returns the backend's `InventoryHook` when the
manager is one of its own, else None. URL mode asks every registered module and uses the
first answer, so ``agentsessions conformance URL`` runs the storage clauses on any
installed backend without adopter code. A file engine's module may also implement
`agentsessions_conformance_write_lock` (how another process holds its write lock), and a
multi-host one `agentsessions_conformance_wire_route`. The kit registers memory itself;
SQLite registers through its distribution like every other backend.
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
    "WriteLock",
    "find_inventory",
    "find_wire_route",
    "find_write_lock",
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
#: A process holding a file engine's write lock: its command and the manager options
#: setting the engine's lock wait; or why there is none (a string).
WriteLock = tuple[list[str], dict[str, Any]] | str
#: ``async (opened manager) -> WireRoute``: how the wire clauses put a proxy before every
#: server of a deployment whose clients follow addresses the servers announce.
WireRouteHook = Callable[["SessionManager"], Awaitable[WireRoute]]


class _Specs:
    @hookspec(firstresult=True)
    def agentsessions_conformance_inventory(self, manager: SessionManager) -> InventoryHook | None:
        """*manager*'s storage inventory if it is this plugin's backend, else None."""

    @hookspec(firstresult=True)
    def agentsessions_conformance_write_lock(
        self, manager: SessionManager, lock_wait: float
    ) -> WriteLock | None:
        """For a file engine of this plugin's: the command of a process that holds
        *manager*'s write lock (printing one line once it does, keeping it until its
        stdin closes) and the manager options that set the engine's lock wait to
        *lock_wait* seconds; or why no process can (a string); None if *manager* is
        not this plugin's backend."""

    @hookspec(firstresult=True)
    def agentsessions_conformance_wire_route(self, manager: SessionManager) -> WireRouteHook | None:
        """How to route *manager*'s traffic through the kit's fault proxies, if this
        plugin's backend needs more than the URL's hosts rewritten, else None."""


class _Builtin:
    """The backend the kit knows itself: memory (core's)."""

    @hookimpl(trylast=True)
    def agentsessions_conformance_inventory(self, manager: SessionManager) -> InventoryHook | None:
        from agentsessions import MemorySessionManager

        from ._inventory import memory_inventory

        if isinstance(manager, MemorySessionManager):

            async def memory(manager: SessionManager, session_id: str) -> Inventory:
                return memory_inventory(manager, session_id)

            return memory
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


def find_write_lock(manager: SessionManager, lock_wait: float) -> WriteLock | None:
    """The registered write-lock holder for *manager*'s file engine (or why there is
    none), or None if no installed distribution registers one for its backend."""
    hook: Any = _plugins().hook.agentsessions_conformance_write_lock
    found: WriteLock | None = hook(manager=manager, lock_wait=lock_wait)
    return found


def find_wire_route(manager: SessionManager) -> WireRouteHook | None:
    """The registered wire route for *manager*'s backend, or None (the URL's hosts do)."""
    hook: Any = _plugins().hook.agentsessions_conformance_wire_route
    found: WireRouteHook | None = hook(manager=manager)
    return found
