"""The conformance kit's storage inventory of Redis, and its wire route, registered for URL mode.

Loaded only by the kit (entry point group ``agentsessions_conformance``): the inventory
reads the keys with plain commands (``EXISTS``, ``LLEN``, ``SCAN``), past the manager's
scripts, on one server, a Sentinel primary or every node of a Cluster. The wire route
puts one fault proxy before every node of a Cluster (or every Sentinel and the primary
they name) and reaches the announced addresses through them with ``address_map``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import pluggy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentsessions import SessionManager
    from agentsessions_conformance import Inventory

    from ._manager import RedisSessionManager

__all__ = [
    "agentsessions_conformance_inventory",
    "agentsessions_conformance_wire_route",
    "redis_inventory",
    "redis_wire_route",
]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")


async def _keys(manager: RedisSessionManager, prefix: str) -> list[bytes]:
    # scan_iter visits every node of a cluster. A prefix holds no glob character:
    # namespaces are [A-Za-z0-9_]* and the id sits in the key as base64url.
    return [key async for key in manager.client.scan_iter(match=prefix + "*", count=1000)]


async def redis_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The session's hash and event list, and every other key or index entry naming it
    (the global, user and fork indexes)."""
    from agentsessions_conformance import Inventory

    from ._keys import split_global_member
    from ._manager import RedisSessionManager

    assert isinstance(manager, RedisSessionManager)
    await manager.open()
    client = manager.client
    keys = manager.keys.session(session_id)
    records = int(await client.exists(keys.hash))
    # A list has no stored positions: its indexes are them. What could go wrong is its
    # length (orphaned or missing entries), which this exposes.
    length = int(await client.llen(keys.events))
    archived = int(await client.llen(keys.archive))
    other: list[str] = []
    base = keys.hash.removesuffix(":h")
    # The token ring belongs to a stored session; without one it is a leftover.
    own = (keys.hash, keys.events, keys.archive) + ((keys.tokens,) if records else ())
    for key in await _keys(manager, base):
        if key.decode() not in own:
            other.append(f"key {key!r}")
    wanted = session_id.encode()
    for member in await client.zrange(manager.keys.index, 0, -1):
        if isinstance(member, bytes) and split_global_member(member)[0] == wanted:
            other.append(f"index entry {member!r}")
    for key in await _keys(manager, manager.keys.prefix + "user:"):
        if await client.zscore(key, session_id) is not None:
            other.append(f"user index {key!r}")
    for key in await _keys(manager, manager.keys.prefix + "forks:"):
        if await client.zscore(key, session_id) is not None:
            other.append(f"fork index {key!r}")
    return Inventory(records=records, events=list(range(length)), other=other, archived=archived)


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import RedisSessionManager

    return redis_inventory if isinstance(manager, RedisSessionManager) else None


def _through(url: str, hosts: str, pairs: dict[tuple[str, int], int]) -> str:
    """*url* with *hosts* for its host list and an address map to the proxies' ports."""
    scheme, _, rest = url.partition("://")
    end = min((rest.find(c) for c in "/?" if c in rest), default=len(rest))
    userinfo, at, _ = rest[:end].rpartition("@")
    tail = rest[end:]
    address_map = ",".join(f"{host}:{port}=127.0.0.1:{to}" for (host, port), to in pairs.items())
    query = f"address_map={quote(address_map, safe=':,')}"
    return f"{scheme}://{userinfo}{at}{hosts}{tail}{'&' if '?' in tail else '?'}{query}"


async def redis_wire_route(manager: SessionManager) -> Any:
    """Every node of a Cluster, or every Sentinel and the primary, and the URL that
    reaches them through one proxy each (`agentsessions_conformance.WireRoute`)."""
    from agentsessions.backend import parse_server_url
    from redis.asyncio.cluster import RedisCluster

    from ._client import SENTINEL_SCHEMES
    from ._manager import RedisSessionManager

    assert isinstance(manager, RedisSessionManager)
    url = manager._url
    if manager.options.address_map:
        return "the URL has an address_map of its own, which the proxies' would replace"
    await manager.open()
    client = manager.client
    if isinstance(client, RedisCluster):
        nodes = [(node.host, int(node.port)) for node in client.get_nodes()]

        def cluster(ports: list[int]) -> str:
            return _through(url, f"127.0.0.1:{ports[0]}", dict(zip(nodes, ports, strict=True)))

        return nodes, cluster
    if url.partition("://")[0].lower() in SENTINEL_SCHEMES:
        parts = parse_server_url(url, multi_host=True)
        sentinels = [(host, port or 26379) for host, port in parts.hosts]
        found = await client.connection_pool.get_master_address()  # type: ignore[attr-defined]
        primary = (str(found[0]), int(found[1]))

        def sentinel(ports: list[int]) -> str:
            hosts = ",".join(f"127.0.0.1:{port}" for port in ports[:-1])
            return _through(url, hosts, {primary: ports[-1]})

        return [*sentinels, primary], sentinel
    return "one Redis server: its URL's host is rewritten"


@hookimpl
def agentsessions_conformance_wire_route(manager: SessionManager) -> Any:
    from ._client import CLUSTER_SCHEMES, SENTINEL_SCHEMES
    from ._manager import RedisSessionManager

    if not isinstance(manager, RedisSessionManager):
        return None
    scheme = manager._url.partition("://")[0].lower()
    return redis_wire_route if scheme in CLUSTER_SCHEMES + SENTINEL_SCHEMES else None
