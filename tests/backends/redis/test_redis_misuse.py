"""Redis URLs and options are checked at connect(); a full server is a documented error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentsessions import InvalidOptionError, StorageFullError, connect
from agentsessions_redis import RedisSessionManager
from agentsessions_testservers import start_redis
from redis.asyncio import Redis

PASSWORD = "zq9kw"


@pytest.mark.parametrize(
    ("url", "options", "named"),
    [
        ("redis://127.0.0.1/abc", {}, "'db'"),
        ("redis://127.0.0.1/0?db=x", {}, "'db'"),
        ("redis://127.0.0.1/-1", {}, "'db'"),
        ("unix:///tmp/r.sock?db=two", {}, "'db'"),
        ("redis://127.0.0.1:99999/0", {}, "port"),
        ("redis://127.0.0.1:abc/0", {}, "port"),
        ("redis://[::1/0", {}, "host"),
        (f"redis://:{PASSWORD}#x@127.0.0.1:6379/0", {}, "percent-encoded"),
        (f"redis://:{PASSWORD}/x@127.0.0.1:6379/0", {}, "percent-encoded"),
        (f"redis+cluster://:{PASSWORD}@127.0.0.1:7000/3", {}, "'db'"),
        ("redis://127.0.0.1/0", {"socket_timeout": float("inf")}, "'socket_timeout'"),
        ("redis://127.0.0.1/0", {"connect_timeout": 1e12}, "'connect_timeout'"),
        ("redis://127.0.0.1/0", {"max_connections": 10**9}, "'max_connections'"),
        ("redis://127.0.0.1/0", {"ttl": float("inf")}, "'ttl'"),
    ],
)
def test_bad_urls_and_options_fail_at_connect(
    url: str, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidOptionError, match=named) as caught:
        connect(url, **options)
    assert PASSWORD not in str(caught.value)


async def test_a_database_the_server_lacks_is_an_option_error(redis_url: str) -> None:
    base = redis_url.rsplit("/", 1)[0]
    manager = connect(f"{base}/4096")
    with pytest.raises(InvalidOptionError, match="'db'"):
        await manager.open()
    await manager.close()


async def test_a_full_server_is_storage_full_and_nothing_is_written() -> None:
    with start_redis() as server:
        raw = Redis.from_url(server.url)
        manager = connect(server.url)
        assert isinstance(manager, RedisSessionManager)
        try:
            await manager.open()
            session = await manager.create("full")
            session.add_event("user", "kept")
            await manager.save(session)
            await raw.config_set("maxmemory-policy", "noeviction")
            await raw.config_set("maxmemory", 1)
            session.add_event("user", "x" * 10_000)
            session.state["lost"] = True
            with pytest.raises(StorageFullError, match="maxmemory") as caught:
                await manager.save(session)
            assert "x" * 20 not in str(caught.value)
            with pytest.raises(StorageFullError):
                await manager.create("another")
            await raw.config_set("maxmemory", 0)
            stored = await manager.get("full")
            assert stored is not None
            assert [e.content for e in stored.events] == ["kept"] and stored.state == {}
            assert await manager.get("another") is None
        finally:
            await asyncio.wait_for(manager.close(), 30)
            await raw.aclose()
