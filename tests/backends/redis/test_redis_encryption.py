"""With encryption on, no Redis key holds the plaintext of content, metadata or state."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from encryption_params import assert_no_plaintext, make_keyring, write_secrets

pytestmark = pytest.mark.redis


async def test_redis_keys_hold_no_plaintext(deployment: Callable[..., Any]) -> None:
    manager = await deployment()
    manager.encryption = make_keyring()
    ids = await write_secrets(manager)
    client = manager.client
    dump: list[str] = []
    pattern = manager.keys.prefix + "*"
    for key in [key async for key in client.scan_iter(match=pattern, count=1000)]:
        kind = (await client.type(key)).decode()
        if kind == "hash":
            value: object = await client.hgetall(key)
        elif kind == "list":
            value = await client.lrange(key, 0, -1)
        elif kind == "zset":
            value = await client.zrange(key, 0, -1, withscores=True)
        elif kind == "set":
            value = await client.smembers(key)
        else:
            assert kind == "string", f"unexpected key type {kind} of {key!r}"
            value = await client.get(key)
        dump.append(f"{key!r} {kind} {value!r}")
    assert len(dump) >= 4  # two sessions' hashes and event lists, at least
    assert_no_plaintext("\n".join(dump), ids)
