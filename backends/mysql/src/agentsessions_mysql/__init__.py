"""MySQL and MariaDB backend for agentsessions: ``connect("mysql://user@host/db")``.

The manager class is imported lazily (module ``__getattr__``) because the entry-point
plugin lives in this package: importing the package must not import asyncmy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._options import MySQLOptions
from ._version import __version__

if TYPE_CHECKING:
    from ._manager import MySQLSessionManager

__all__ = ["MySQLOptions", "MySQLSessionManager", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "MySQLSessionManager":
        from ._manager import MySQLSessionManager

        return MySQLSessionManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
