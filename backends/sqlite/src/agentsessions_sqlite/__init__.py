"""agentsessions-sqlite: sessions in a SQLite file, via aiosqlite.

Use it through ``agentsessions.connect("sqlite:///sessions.db")``. The names below are
imported lazily, so that discovering the ``sqlite`` entry point (which imports this
package to reach `_plugin`) does not import aiosqlite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._manager import SQLiteSessionManager
    from ._options import SQLiteOptions

__all__ = ["SQLiteOptions", "SQLiteSessionManager", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "SQLiteSessionManager":
        from ._manager import SQLiteSessionManager

        return SQLiteSessionManager
    if name == "SQLiteOptions":
        from ._options import SQLiteOptions

        return SQLiteOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
