"""Redis and Redis Cluster backend for agentsessions.

Use it through ``agentsessions.connect("redis://host:6379/0")`` (or ``rediss://``,
``redis+unix://``, ``redis+cluster://host:port,host:port``,
``redis+sentinel://host:26379,host:26379/mymaster/0``). The manager class is exported
lazily so that importing this package (which the entry point does) never imports
redis-py.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from ._manager import RedisSessionManager
    from ._options import RedisOptions

__all__ = ["RedisOptions", "RedisSessionManager", "__version__"]


def __getattr__(name: str) -> Any:
    if name == "RedisOptions":
        from ._options import RedisOptions

        return RedisOptions
    if name == "RedisSessionManager":
        from ._manager import RedisSessionManager

        return RedisSessionManager
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
