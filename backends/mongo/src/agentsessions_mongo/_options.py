"""The options of a MongoDB URL (``?namespace=app&ttl=3600&server_selection_timeout=5``).

Driver options (``replicaSet``, ``authSource``, ``tls``, ``w``, ``readPreference``...)
are not ours: they stay in the URL and pymongo reads them exactly as documented for
every MongoDB driver. Ours are in seconds, like every other agentsessions option; left
unset, each is the ``timeout`` option (the deadline of a whole call), and none is ever
longer than it. A ``...MS`` parameter in the URL is passed to pymongo as it is.
"""

from __future__ import annotations

from agentsessions import InvalidOptionError
from agentsessions.backend import ManagerOptions, Timeout, parse_server_url
from pydantic import Field

__all__ = ["MongoOptions", "database_name"]

DEFAULT_DATABASE = "agentsessions"
# What MongoDB refuses in a database name on some platform (so on any, portably).
_BAD_DATABASE_CHARS = frozenset('/\\. "$*<>:|?\x00')
_MAX_DATABASE_BYTES = 63


class MongoOptions(ManagerOptions):
    """Options of the MongoDB backend, on top of ``ttl`` and ``namespace``.

    ``namespace`` prefixes the collection names (``NS_sessions``, ``NS_events``).
    """

    server_selection_timeout: Timeout | None = Field(
        default=None,
        description="seconds to wait for a usable server before an operation fails with "
        "BackendTimeoutError (default: connect_timeout if given, else the timeout)",
    )
    connect_timeout: Timeout | None = Field(
        default=None, description="seconds to open one connection (default: the timeout)"
    )
    socket_timeout: Timeout | None = Field(
        default=None,
        description="seconds to wait for a reply on an open connection (default: the timeout)",
    )


def database_name(url: str) -> str:
    """The database a ``mongodb://`` URL names, after checking every part of the URL."""
    srv = url.partition("://")[0].lower() == "mongodb+srv"
    parts = parse_server_url(url, multi_host=not srv)
    if srv and parts.hosts[0][1] is not None:
        raise InvalidOptionError("URL port: a mongodb+srv:// URL takes no port")
    name = parts.path or DEFAULT_DATABASE
    bad = sorted(_BAD_DATABASE_CHARS.intersection(name))
    if bad:
        raise InvalidOptionError(
            f"URL path: MongoDB database name {name!r} holds {''.join(bad)!r}, which "
            "MongoDB refuses in database names"
        )
    if len(name.encode("utf-8", "surrogatepass")) > _MAX_DATABASE_BYTES:
        raise InvalidOptionError(
            f"URL path: a MongoDB database name is at most {_MAX_DATABASE_BYTES} bytes"
        )
    return name
