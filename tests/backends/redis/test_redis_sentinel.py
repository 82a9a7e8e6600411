"""What only a Sentinel URL does: its parsing, the Sentinels' own password, masking, and
``wait_replicas`` (WAIT after every write). Failover itself is drilled in tests/ha."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agentsessions import (
    BackendAuthenticationError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidOptionError,
    SessionConflictError,
    SessionExistsError,
    connect,
)
from agentsessions_redis import RedisSessionManager
from agentsessions_testservers import (
    RedisSentinelServer,
    ServerUnavailable,
    redis_command,
    start_redis_sentinel,
)
from conftest import REQUIRE_SERVERS
from redis.asyncio import Redis
from redis.asyncio.sentinel import SentinelConnectionPool

pytestmark = [pytest.mark.redis]

_PRIMARY_PW = "pr1m@ry-pw"
_SENTINEL_PW = "s3nt:nel-pw"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("redis+sentinel://127.0.0.1:26379", "names the service"),
        ("redis+sentinel://127.0.0.1:26379/", "names the service"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/0/x", "/service or /service/db"),
        ("redis+sentinel://127.0.0.1:26379/mymaster/zero", "option 'db'"),
        ("redis+sentinel:///mymaster/0", "names no Sentinel"),
        ("redis://127.0.0.1:6379/0?sentinel_password=x", r"only to redis\+sentinel"),
        ("redis+cluster://127.0.0.1:7000?wait_replicas=1", "not supported in a Redis Cluster"),
        ("redis+sentinel://h:26379/mymaster?wait_replicas=-1", "wait_replicas"),
        ("redis+sentinel://h:26379/mymaster?wait_timeout=0", "wait_timeout"),
    ],
)
def test_bad_sentinel_urls_fail_at_connect(url: str, problem: str) -> None:
    with pytest.raises(InvalidOptionError, match=problem):
        connect(url)


def test_service_database_and_hosts_are_read_from_the_url() -> None:
    manager = connect("rediss+sentinel://h1,h2:26380/cache/3?wait_replicas=1&wait_timeout=0.5")
    assert isinstance(manager, RedisSessionManager)
    assert manager.db == 3
    assert manager.options.wait_replicas == 1
    assert manager.options.wait_timeout == 0.5
    assert not manager.cluster


def test_both_passwords_are_masked_in_the_url_and_repr() -> None:
    manager = connect(
        f"redis+sentinel://app:{_quote(_PRIMARY_PW)}@h:26379/mymaster/0"
        f"?sentinel_password={_quote(_SENTINEL_PW)}&namespace=n"
    )
    for text in (manager.url, repr(manager)):
        for secret in (_PRIMARY_PW, _SENTINEL_PW, _quote(_PRIMARY_PW), _quote(_SENTINEL_PW)):
            assert secret not in text
    assert manager.url.count("***") == 2


def _quote(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


@pytest.fixture(scope="module")
def guarded() -> Iterator[RedisSentinelServer]:
    """A deployment whose data nodes and Sentinels each require their own password."""
    try:
        server = start_redis_sentinel(password=_PRIMARY_PW, sentinel_password=_SENTINEL_PW)
    except ServerUnavailable as exc:
        if REQUIRE_SERVERS:
            raise
        pytest.skip(f"no Redis Sentinel deployment: {exc}")
    assert isinstance(server, RedisSentinelServer)
    yield server
    server.close()


async def test_the_primary_and_the_sentinels_get_their_own_passwords(
    guarded: RedisSentinelServer,
) -> None:
    manager = connect(guarded.url, namespace="pw")
    assert isinstance(manager, RedisSessionManager)
    try:
        session = await manager.create("s")
        session.add_event("user", "hi")
        await manager.save(session)
        client = manager.client
        assert isinstance(client, Redis)
        pool = client.connection_pool
        assert isinstance(pool, SentinelConnectionPool)
        # The connection went to the primary the Sentinels name.
        assert pool.master_address == ("127.0.0.1", guarded.primary_port())
        assert await client.exists(manager.keys.session("s").hash) == 1
        await manager.delete("s")
    finally:
        await manager.close()


@pytest.mark.parametrize("which", ["sentinel", "primary", "none"])
async def test_a_refused_password_is_an_authentication_error_that_names_neither(
    guarded: RedisSentinelServer, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = guarded.url
    if which == "sentinel":
        url = url.replace(_quote(_SENTINEL_PW), "wrong")
    elif which == "primary":
        url = url.replace(_quote(_PRIMARY_PW), "wrong")
    else:
        url = url.split("?")[0].replace(f":{_quote(_PRIMARY_PW)}@", "")
    manager = connect(url, namespace="pw", timeout=5)
    began = time.monotonic()
    with caplog.at_level(logging.DEBUG), pytest.raises(BackendAuthenticationError) as caught:
        await manager.get("s")
    assert time.monotonic() - began < 4.5  # refused at once, not at the deadline
    await manager.close()
    shown = [str(caught.value), caught.value.url, caplog.text]
    for text in shown:
        for secret in (_PRIMARY_PW, _SENTINEL_PW, _quote(_PRIMARY_PW), _quote(_SENTINEL_PW)):
            assert secret not in text


async def test_wait_replicas_raises_when_too_few_replicas_acknowledge(
    sentinel: Callable[..., Any],
) -> None:
    enough = await sentinel(wait_replicas=1)
    too_many = enough.with_options(wait_replicas=2, wait_timeout=0.2)
    try:
        await enough.create("kept")
        began = time.monotonic()
        with pytest.raises(BackendUnavailableError, match=r"only 1 of 2 replicas") as caught:
            await too_many.create("unsure")
        assert not isinstance(caught.value, BackendAuthenticationError)
        assert time.monotonic() - began < 2  # wait_timeout bounds the wait
        # It did reach the primary: the error says "may be lost", not "not written".
        assert await enough.get("unsure") is not None
        # A write the script refused gets its own answer, whatever the replicas did.
        with pytest.raises(SessionExistsError):
            await too_many.create("kept")
        stale = await enough.get("kept")
        fresh = await enough.get("kept")
        assert stale is not None and fresh is not None
        fresh.add_event("user", "first")
        await enough.save(fresh)
        stale.add_event("user", "second")
        with pytest.raises(SessionConflictError):
            await too_many.save(stale)
    finally:
        await too_many.close()


async def test_min_replicas_to_write_refusals_are_unavailability_and_write_nothing(
    guarded: RedisSentinelServer,
) -> None:
    primary = guarded.primary_port()
    assert primary is not None
    manager = connect(guarded.url, namespace="norepl", timeout=2)

    def require(replicas: int) -> None:
        redis_command(
            primary, "CONFIG", "SET", "min-replicas-to-write", str(replicas), password=_PRIMARY_PW
        )

    try:
        await manager.create("s")
        require(2)  # the deployment has one replica
        try:
            with pytest.raises(BackendUnavailableError, match="NOREPLICAS"):
                await manager.create("refused")
            # update() re-sends a save without a definite answer until its deadline.
            with pytest.raises(BackendTimeoutError):
                await manager.update("s", lambda s: s.add_event("user", "refused"))
        finally:
            require(0)
        assert await manager.get("refused") is None
        stored = await manager.get("s")
        assert stored is not None and stored.events == [] and stored.version == 1
        await manager.delete("s")
    finally:
        await manager.close()


async def test_a_replica_refuses_writes_as_read_only_and_keeps_nothing(
    guarded: RedisSentinelServer,
) -> None:
    primary = guarded.primary_port()
    (replica,) = (port for port in guarded.data_ports if port != primary)
    direct = connect(f"redis://:{_quote(_PRIMARY_PW)}@127.0.0.1:{replica}/0", namespace="ro")
    try:
        with pytest.raises(BackendReadOnlyError) as caught:
            await direct.create("s")
        assert _PRIMARY_PW not in str(caught.value)
        assert await direct.get("s") is None  # reads still work on the replica
    finally:
        await direct.close()
