"""The agentsessions conformance kit: check any backend against the SessionManager contract.

Subclass `SessionManagerTests` in a test module and give it one async ``manager``
fixture, or run ``pytest -p agentsessions_conformance --session-url URL``. See the
README for capabilities, ``known_divergences`` and the JSON report.

The suite is imported on first access: pytest loads this package's plugin in every
run of a project that has the kit installed, and that must stay cheap and must not
import the clause modules before assertion rewriting is set up for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._clock import FrozenClock
from ._faults import WRITE_HOOKS, LostReplies, lost_replies
from ._inventory import Inventory, memory_inventory
from ._plugins import (
    INVENTORY_GROUP,
    InventoryHook,
    WireRoute,
    WireRouteHook,
    find_inventory,
    find_wire_route,
    find_write_lock,
    hookimpl,
)
from ._proxy import FaultProxy, ProxyMode
from ._state import BackendInfo, ClauseResult
from ._version import __version__

# ``-p agentsessions_conformance`` registers this package itself as the plugin (and the
# pytest11 entry point, registered under the same name, then steps aside), so the
# hooks must be visible here as well as in `plugin`.
from .plugin import pytest_addoption as pytest_addoption
from .plugin import pytest_collection_finish as pytest_collection_finish
from .plugin import pytest_collection_modifyitems as pytest_collection_modifyitems
from .plugin import pytest_configure as pytest_configure
from .plugin import pytest_report_header as pytest_report_header
from .plugin import pytest_sessionfinish as pytest_sessionfinish
from .plugin import pytest_terminal_summary as pytest_terminal_summary

if TYPE_CHECKING:
    from ._runner import ConformanceRun, run
    from ._suite import SessionManagerTests

__all__ = [
    "BackendInfo",
    "ClauseResult",
    "ConformanceRun",
    "FaultProxy",
    "INVENTORY_GROUP",
    "FrozenClock",
    "Inventory",
    "InventoryHook",
    "LostReplies",
    "ProxyMode",
    "SessionManagerTests",
    "WRITE_HOOKS",
    "__version__",
    "WireRoute",
    "WireRouteHook",
    "find_inventory",
    "find_wire_route",
    "find_write_lock",
    "hookimpl",
    "lost_replies",
    "memory_inventory",
    "run",
]


def __getattr__(name: str) -> Any:
    if name == "SessionManagerTests":
        from ._suite import SessionManagerTests

        return SessionManagerTests
    if name in ("ConformanceRun", "run"):
        from . import _runner

        return getattr(_runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
