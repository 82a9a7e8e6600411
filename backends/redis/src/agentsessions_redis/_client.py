"""Building the redis-py client a URL asks for: one server, or a Redis Cluster.

``redis://`` and ``rediss://`` go to `redis.asyncio.Redis.from_url` unchanged, and
``redis+unix://`` (or its deprecated name ``unix://``) as the ``unix://`` URL redis-py
knows. ``redis+cluster://[user:password@]host:port[,host:port...]`` (and
``rediss+cluster://`` for TLS) becomes a `redis.asyncio.cluster.RedisCluster` whose
startup nodes are all the listed hosts; driver parameters in the query string (TLS
files, client_name...) are passed through as redis-py parses them.
``redis+sentinel://[user:password@]host:port[,host:port...]/service[/db]`` (and
``rediss+sentinel://``) asks the listed Sentinels where the primary of *service* is,
through `redis.asyncio.sentinel.Sentinel.master_for`: the client asks again after a
failover. The URL's user and password are the data nodes'; ``sentinel_username`` and
``sentinel_password`` in the query string are the Sentinels' own, if they have any.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlencode, urlsplit

from agentsessions import InvalidOptionError
from agentsessions.backend import parse_server_url
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel
from redis.backoff import NoBackoff

__all__ = [
    "CLUSTER_SCHEMES",
    "AddressMap",
    "SENTINEL_PARAMS",
    "SENTINEL_SCHEMES",
    "SOCKET_SCHEMES",
    "check_url",
    "make_client",
    "split_cluster_url",
]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
SOCKET_SCHEMES = ("redis+unix", "unix")
#: Query parameters meant for the Sentinels rather than the data nodes.
SENTINEL_PARAMS = ("sentinel_username", "sentinel_password")
_DEFAULT_PORT = 6379
#: Announced (host, port) -> the (host, port) to connect to instead.
AddressMap = dict[tuple[str, int], tuple[str, int]]
_DEFAULT_SENTINEL_PORT = 26379


def _db_number(text: str, where: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise InvalidOptionError(f"option 'db' ({where}) must be a database number, not {text!r}")
    return int(text)


def _sentinel_path(path: str) -> tuple[str, str]:
    """The service name and the database number's text of a Sentinel URL's path."""
    service, _, db = path.partition("/")
    if not service:
        raise InvalidOptionError(
            "URL path: a redis+sentinel:// URL names the service the Sentinels monitor, "
            "as in redis+sentinel://host:26379/mymaster/0"
        )
    if "/" in db:
        raise InvalidOptionError(
            "URL path: a redis+sentinel:// URL's path is /service or /service/db, not more"
        )
    return service, db


def check_url(url: str) -> int:
    """Parse every part of *url* now (hosts, ports, database); the database number."""
    scheme = url.partition("://")[0].lower()
    sentinel = scheme in SENTINEL_SCHEMES
    parts = parse_server_url(url, multi_host=scheme in CLUSTER_SCHEMES or sentinel)
    db = 0
    if sentinel:
        _, db_text = _sentinel_path(parts.path)
        if db_text:
            db = _db_number(db_text, "the URL's path")
        if not parts.hosts[0][0]:
            raise InvalidOptionError("URL host: the Redis Sentinel URL names no Sentinel")
    else:
        if parts.path and scheme not in SOCKET_SCHEMES:  # there it is the socket's path
            db = _db_number(parts.path, "the URL's path")
        for name in SENTINEL_PARAMS:
            if name in parts.query:
                raise InvalidOptionError(f"option {name!r} applies only to redis+sentinel:// URLs")
    if "db" in parts.query:
        db = _db_number(parts.query["db"], "in the query")
    if scheme in CLUSTER_SCHEMES:
        if db != 0:
            raise InvalidOptionError(f"option 'db': a Redis Cluster has only database 0, not {db}")
        if not parts.hosts[0][0]:
            raise InvalidOptionError("URL host: the Redis Cluster URL names no cluster node")
    return db


def split_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A plain ``redis[s]://`` URL for the first node, and every node's address."""
    parts = parse_server_url(url, multi_host=True)
    nodes = [(host, port or _DEFAULT_PORT) for host, port in parts.hosts]
    scheme, _, rest = url.partition("://")
    authority_end = min((rest.find(c) for c in "/?" if c in rest), default=len(rest))
    authority, tail = rest[:authority_end], rest[authority_end:]
    userinfo, at, hosts = authority.rpartition("@")
    plain = "rediss" if scheme.lower().startswith("rediss") else "redis"
    return f"{plain}://{userinfo}{at}{hosts.split(',')[0]}{tail}", nodes


# redis-py names each Sentinel that failed by its client's repr, a few hundred
# characters of connection settings: the host and port are what a reader needs.
_SENTINEL_REPR = re.compile(
    r"<redis\.asyncio\.client\.Redis\(.*?host=([^,]+),port=(\d+),.*?\)>\)>\)>"
)


class _Sentinel(Sentinel):
    """redis-py's Sentinel client, with a readable error when no Sentinel names a primary,
    and the primary reached where the address map says (the Sentinels announce it)."""

    def __init__(self, *args: Any, address_map: AddressMap, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        self.address_map = address_map

    async def discover_master(self, service_name: str) -> Any:
        try:
            found = await super().discover_master(service_name)
        except MasterNotFoundError as exc:
            raise MasterNotFoundError(_SENTINEL_REPR.sub(r"\1:\2", str(exc))) from None
        return self.address_map.get((found[0], int(found[1])), found)


def _sentinel_client(url: str, settings: dict[str, Any], address_map: AddressMap) -> Redis:
    """The primary's client for a Sentinel URL; redis-py finds the primary, and again
    after a failover (a connection to a demoted primary is dropped on READONLY)."""
    parts = parse_server_url(url, multi_host=True)
    sentinels = [(host, port or _DEFAULT_SENTINEL_PORT) for host, port in parts.hosts]
    service, db = _sentinel_path(parts.path)
    query = {k: v for k, v in parts.query.items() if k not in SENTINEL_PARAMS}
    tls = parts.scheme.startswith("rediss")
    # redis-py's own parsing of the credentials and the query string, on a URL of the
    # form it knows; its host is a placeholder (the Sentinels name the primary).
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
    userinfo, at, _ = authority.rpartition("@")
    plain = f"{'rediss' if tls else 'redis'}://{userinfo}{at}primary/{db or 0}"
    if query:
        plain += "?" + urlencode(query)
    node_settings: dict[str, Any] = dict(parse_url(plain))
    for name in ("host", "port", "connection_class"):
        node_settings.pop(name, None)
    node_settings.update(settings)
    # No retries of its own: a Sentinel that fails is skipped for the next one, and the
    # primary's connection retries the whole discovery (redis-py's default would retry
    # each Sentinel ten times, refused passwords included).
    # A Sentinel that does not answer must not use up the call: without a socket timeout
    # of our own, its probes keep redis-py's default one and the next Sentinel is tried.
    sentinel_settings: dict[str, Any] = {
        k: v for k, v in settings.items() if k.startswith("socket_") and v is not None
    }
    sentinel_settings["retry"] = Retry(NoBackoff(), 0)
    if parts.query.get("sentinel_username"):
        sentinel_settings["username"] = parts.query["sentinel_username"]
    if parts.query.get("sentinel_password"):
        sentinel_settings["password"] = parts.query["sentinel_password"]
    if tls:
        node_settings["ssl"] = True
        sentinel_settings["ssl"] = True
        sentinel_settings.update({k: v for k, v in node_settings.items() if k.startswith("ssl_")})
    manager = _Sentinel(sentinels, sentinel_kwargs=sentinel_settings, address_map=address_map)
    client: Redis = manager.master_for(service, **node_settings)
    return client


def make_client(
    url: str, settings: dict[str, Any], address_map: AddressMap | None = None
) -> Redis | RedisCluster:
    """The client for *url*; *settings* are redis-py keyword arguments (timeouts, pool);
    *address_map* where to reach the nodes a Cluster or the Sentinels announce."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in CLUSTER_SCHEMES:
        first, nodes = split_cluster_url(url)
        remap = dict(address_map or {})
        return RedisCluster.from_url(
            first,
            startup_nodes=[ClusterNode(host, port) for host, port in nodes[1:]],
            # redis-py's own hook: every address the cluster announces goes through it.
            address_remap=(lambda found: remap.get(found, found)) if remap else None,
            **settings,
        )
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_client(url, settings, dict(address_map or {}))
    if scheme in SOCKET_SCHEMES:
        url = "unix://" + url.partition("://")[2]
    return Redis.from_url(url, **settings)
