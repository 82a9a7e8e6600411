"""MongoDB backend for agentsessions: ``connect("mongodb://host/db")``.

The manager class is imported lazily (module ``__getattr__``) because the entry-point
plugin lives in this package: importing the package must not import pymongo.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._options import MongoOptions
from ._version import __version__

if TYPE_CHECKING:
    from ._manager import MongoSessionManager

__all__ = ["MongoOptions", "MongoSessionManager", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "MongoSessionManager":
        from ._manager import MongoSessionManager

        return MongoSessionManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
