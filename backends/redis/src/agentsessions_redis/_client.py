"""Building the redis-py client a URL asks for: one server, or a Redis Cluster.

``redis://`` and ``rediss://`` go to `redis.asyncio.Redis.from_url` unchanged, and
``redis+unix://`` (or its deprecated name ``unix://``) as the ``unix://`` URL redis-py
knows. ``redis+cluster://[user:password@]host:port[,host:port...]`` (and
``rediss+cluster://`` for TLS) becomes a `redis.asyncio.cluster.RedisCluster` whose
startup nodes are all the listed hosts; driver parameters in the query string (TLS
files, client_name...) are passed through as redis-py parses them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from agentsessions import InvalidOptionError
from agentsessions.backend import parse_server_url
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

__all__ = ["CLUSTER_SCHEMES", "SOCKET_SCHEMES", "check_url", "make_client", "split_cluster_url"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SOCKET_SCHEMES = ("redis+unix", "unix")
_DEFAULT_PORT = 6379


def _db_number(text: str, where: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise InvalidOptionError(f"option 'db' ({where}) must be a database number, not {text!r}")
    return int(text)


def check_url(url: str) -> int:
    """Parse every part of *url* now (hosts, ports, database); the database number."""
    scheme = url.partition("://")[0].lower()
    parts = parse_server_url(url, multi_host=scheme in CLUSTER_SCHEMES)
    db = 0
    if parts.path and scheme not in SOCKET_SCHEMES:  # there it is the socket's path
        db = _db_number(parts.path, "the URL's path")
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


def make_client(url: str, settings: dict[str, Any]) -> Redis | RedisCluster:
    """The client for *url*; *settings* are redis-py keyword arguments (timeouts, pool)."""
    scheme = urlsplit(url).scheme.lower()
    if scheme in CLUSTER_SCHEMES:
        first, nodes = split_cluster_url(url)
        if "max_connections" in settings and settings["max_connections"] is None:
            settings = {k: v for k, v in settings.items() if k != "max_connections"}
        return RedisCluster.from_url(
            first,
            startup_nodes=[ClusterNode(host, port) for host, port in nodes[1:]],
            **settings,
        )
    if scheme in SOCKET_SCHEMES:
        url = "unix://" + url.partition("://")[2]
    return Redis.from_url(url, **settings)
