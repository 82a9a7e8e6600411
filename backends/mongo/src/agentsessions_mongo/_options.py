"""The options of a MongoDB URL (``?namespace=app&ttl=3600&server_selection_timeout=5``).

Driver options (``replicaSet``, ``authSource``, ``tls``, ``w``, ``readPreference``...)
are not ours: they stay in the URL and pymongo reads them exactly as documented for
every MongoDB driver. Ours are in seconds, like every other agentsessions option; left
unset, each is the ``timeout`` option (the deadline of a whole call), and none is ever
longer than it. A ``...MS`` parameter in the URL is passed to pymongo as it is.
"""

from __future__ import annotations

from agentsessions.backend import ManagerOptions
from pydantic import Field

__all__ = ["MongoOptions"]


class MongoOptions(ManagerOptions):
    """Options of the MongoDB backend, on top of ``ttl`` and ``namespace``.

    ``namespace`` prefixes the collection names (``NS_sessions``, ``NS_events``).
    """

    server_selection_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds to wait for a usable server before an operation fails with "
        "BackendTimeoutError (default: connect_timeout if given, else the timeout)",
    )
    connect_timeout: float | None = Field(
        default=None, gt=0, description="seconds to open one connection (default: the timeout)"
    )
    socket_timeout: float | None = Field(
        default=None,
        gt=0,
        description="seconds to wait for a reply on an open connection (default: the timeout)",
    )
