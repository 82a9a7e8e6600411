"""PostgreSQL backend for agentsessions: ``connect("postgresql://user@host/db")``.

The manager class is imported lazily (module ``__getattr__``) because the entry-point
plugin lives in this package: importing the package must not import asyncpg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._options import PostgresOptions
from ._version import __version__

if TYPE_CHECKING:
    from ._manager import PostgresSessionManager

__all__ = ["PostgresOptions", "PostgresSessionManager", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "PostgresSessionManager":
        from ._manager import PostgresSessionManager

        return PostgresSessionManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
