"""The conformance kit's storage inventory of Redis, registered for URL mode.

Loaded only by the kit (entry point group ``agentsessions_conformance``): it reads the
keys with plain commands (``EXISTS``, ``LLEN``, ``SCAN``), past the manager's scripts,
on one server, a Sentinel primary or every node of a Cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentsessions import SessionManager
    from agentsessions_conformance import Inventory

    from ._manager import RedisSessionManager

__all__ = ["agentsessions_conformance_inventory", "redis_inventory"]

hookimpl = pluggy.HookimplMarker("agentsessions_conformance")


async def _keys(manager: RedisSessionManager, prefix: str) -> list[bytes]:
    # scan_iter visits every node of a cluster. A prefix holds no glob character:
    # namespaces are [A-Za-z0-9_]* and the id sits in the key as base64url.
    return [key async for key in manager.client.scan_iter(match=prefix + "*", count=1000)]


async def redis_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The session's hash and event list, and every other key or index entry naming it."""
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
    return Inventory(records=records, events=list(range(length)), other=other, archived=archived)


@hookimpl
def agentsessions_conformance_inventory(
    manager: SessionManager,
) -> Callable[[SessionManager, str], Awaitable[Inventory]] | None:
    from ._manager import RedisSessionManager

    return redis_inventory if isinstance(manager, RedisSessionManager) else None
