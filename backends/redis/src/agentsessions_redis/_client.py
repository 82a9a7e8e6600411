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
from agentsessions.backend import mask_url
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster

__all__ = ["CLUSTER_SCHEMES", "SOCKET_SCHEMES", "make_client", "split_cluster_url"]

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SOCKET_SCHEMES = ("redis+unix", "unix")


def _host_port(text: str, url: str) -> tuple[str, int]:
    if text.startswith("["):  # [IPv6]:port
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.rpartition(":")
        if not host:
            host, port_text = text, ""
    try:
        port = int(port_text) if port_text else 6379
    except ValueError:
        raise InvalidOptionError(f"bad port {port_text!r} in {mask_url(url)}") from None
    if not host:
        raise InvalidOptionError(f"empty host in {mask_url(url)}")
    return host, port


def split_cluster_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """A plain ``redis[s]://`` URL for the first node, and every node's address."""
    scheme, _, rest = url.partition("://")
    netloc, sep, tail = rest.partition("/")
    if "?" in netloc:
        netloc, _, query = netloc.partition("?")
        tail = f"?{query}"
        sep = ""
    userinfo, at, hosts = netloc.rpartition("@")
    nodes = [_host_port(part.strip(), url) for part in hosts.split(",") if part.strip()]
    if not nodes:
        raise InvalidOptionError(f"{mask_url(url)} names no cluster node")
    first = hosts.split(",")[0].strip()
    plain = "rediss" if scheme.lower().startswith("rediss") else "redis"
    return f"{plain}://{userinfo}{at}{first}{sep}{tail}", nodes


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
