"""Redis-specific behaviour: key layout, expiry of every key, listing upkeep, outages,
round trips, URL handling. The contract itself is checked by the conformance kit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import agentsessions_testservers as servers
import pytest
import pytest_asyncio
from agentsessions import (
    BackendUnavailableError,
    InvalidOptionError,
    Session,
    SessionConflictError,
    connect,
)
from agentsessions.backend import TOKENS_KEPT, SaveRequest
from agentsessions_conformance import FrozenClock
from agentsessions_redis import RedisSessionManager
from agentsessions_redis import _manager as redis_manager
from agentsessions_redis._client import split_cluster_url
from agentsessions_redis._conformance import redis_inventory
from agentsessions_redis._keys import global_member
from redis.asyncio.connection import Connection
from redis.crc import key_slot

Factory = Callable[..., Any]


async def keys_under(manager: RedisSessionManager) -> set[bytes]:
    """Every key of the namespace, from every node of a cluster (SCAN, not KEYS)."""
    pattern = manager.keys.prefix + "*"
    return {key async for key in manager.client.scan_iter(match=pattern, count=1000)}


def session_keys(manager: RedisSessionManager, session_id: str) -> list[str]:
    """The keys a session has once saved: hash, events and token ring (no archive)."""
    keys = manager.keys.session(session_id)
    return [keys.hash, keys.events, keys.tokens]


# -- key layout ---------------------------------------------------------------------------

AWKWARD_IDS = ["a", "{a}", "a}", "{a", "a:b", "a:{b}:c", "*", "a*b", "line\nbreak", "}{", "é{ü}"]


async def test_awkward_ids_are_distinct_sessions_each_on_one_slot(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment()
    for index, session_id in enumerate(AWKWARD_IDS):
        session = await manager.create(session_id, state={"n": index})
        session.add_event("user", session_id)
        await manager.save(session)
    for index, session_id in enumerate(AWKWARD_IDS):
        loaded = await manager.get(session_id)
        assert loaded is not None
        assert loaded.session_id == session_id
        assert loaded.state == {"n": index}
        assert [event.content for event in loaded.events] == [session_id]
        slots = {key_slot(key.encode()) for key in session_keys(manager, session_id)}
        assert len(slots) == 1, f"keys of {session_id!r} span slots {slots}"
    stored = await keys_under(manager)
    # Three keys per saved session (hash, events, tokens), none shared between two ids.
    expected = {key.encode() for sid in AWKWARD_IDS for key in session_keys(manager, sid)}
    assert expected <= stored
    assert len(expected) == 3 * len(AWKWARD_IDS)
    listed = await manager.list_sessions(limit=100)
    assert sorted(item.session_id for item in listed.items) == sorted(AWKWARD_IDS)


async def test_namespaces_use_disjoint_prefixes(standalone: Factory) -> None:
    first: RedisSessionManager = await standalone()
    second: RedisSessionManager = await standalone()
    await first.create("same")
    assert await second.get("same") is None
    assert all(key.startswith(first.keys.prefix.encode()) for key in await keys_under(first))
    assert await keys_under(second) == set()


# -- time to live -------------------------------------------------------------------------


async def pexpiretimes(manager: RedisSessionManager, session_id: str) -> list[int]:
    client = manager.client
    return [int(await client.pexpiretime(key)) for key in session_keys(manager, session_id)]


async def test_every_key_expires_together_and_save_refreshes_them(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment(ttl=1.5)
    session = await manager.create("short", "someone")
    session.add_event("user", "hello")
    await manager.save(session)
    first = await pexpiretimes(manager, "short")
    assert first[0] > 0 and len(set(first)) == 1, "every key must expire at one instant"
    await asyncio.sleep(0.3)
    session.add_event("user", "again")
    await manager.save(session)
    second = await pexpiretimes(manager, "short")
    assert len(set(second)) == 1
    assert second[0] >= first[0] + 250, "a save must push back the expiry of every key"

    deadline = asyncio.get_running_loop().time() + 10
    while await manager.client.exists(*session_keys(manager, "short")):
        assert asyncio.get_running_loop().time() < deadline, "Redis never expired the keys"
        await asyncio.sleep(0.2)
    assert await manager.get("short") is None
    # Only the listing index entries are left; purge removes them and counts the session.
    manager.cluster_index_grace_us = 0
    assert await manager.purge_expired() == 1
    assert await keys_under(manager) == set()


async def test_save_without_ttl_makes_every_key_persistent(deployment: Factory) -> None:
    short: RedisSessionManager = await deployment(ttl=60)
    session = await short.create("kept")
    session.add_event("user", "x")
    await short.save(session)
    forever = short.with_options(ttl=None)
    async with forever:
        session = await forever.get("kept")
        assert session is not None
        session.add_event("user", "y")
        await forever.save(session)
        assert await pexpiretimes(forever, "kept") == [-1, -1, -1]
        await forever.delete("kept")


async def test_expired_by_client_clock_is_purged_even_if_redis_still_holds_it(
    standalone: Factory,
) -> None:
    manager: RedisSessionManager = await standalone(ttl=0.2)
    await manager.create("late", "u1")
    # As if the server's clock lagged ours: Redis would drop the key only much later.
    await manager.client.pexpire(session_keys(manager, "late")[0], 60_000)
    await asyncio.sleep(0.3)
    assert await manager.get("late") is None
    assert await manager.purge_expired() == 1
    assert await keys_under(manager) == set()


# -- listing upkeep -------------------------------------------------------------------------


async def test_stale_index_entries_are_filtered_and_purged(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment()
    await manager.create("real", "u1")
    # What a crash between a cluster create's index write and its session write leaves.
    client = manager.client
    ghost_entries = [
        (manager.keys.index, global_member("ghost", "u1")),
        (manager.keys.user_index("u1"), b"ghost"),
    ]

    async def haunt() -> None:
        for index, member in ghost_entries:
            await client.zadd(index, {member: 1_000_000})

    async def ghost_scores() -> list[Any]:
        return [await client.zscore(index, member) for index, member in ghost_entries]

    await haunt()
    assert [item.session_id for item in (await manager.list_sessions()).items] == ["real"]
    listed = await manager.list_sessions(user_id="u1")
    assert [item.session_id for item in listed.items] == ["real"]
    assert await manager.get("ghost") is None
    assert await ghost_scores() == [None, None], "readers drop stale entries they meet"
    await haunt()
    assert await manager.purge_expired() == 1
    assert await ghost_scores() == [None, None]
    assert await client.zscore(manager.keys.user_index("u1"), b"real") is not None


async def test_an_id_reused_by_another_user_is_not_listed_or_deleted_for_the_first(
    deployment: Factory,
) -> None:
    short: RedisSessionManager = await deployment(ttl=0.2)
    await short.create("reused", "alice")
    await asyncio.sleep(0.3)
    manager = short.with_options(ttl=None)
    async with manager:
        await manager.create("reused", "bob")
        assert (await manager.list_sessions(user_id="alice")).items == []
        bobs = await manager.list_sessions(user_id="bob")
        assert [item.session_id for item in bobs.items] == ["reused"]
        assert await manager.delete_user("alice") == 0
        stored = await manager.get("reused")
        assert stored is not None and stored.user_id == "bob"
        assert await manager.delete_user("bob") == 1
        assert await manager.get("reused") is None


async def test_listing_pages_through_equal_creation_times(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment()
    ids = [f"tie-{index:02d}" for index in range(7)]
    for session_id in ids:
        await manager.create(session_id)
    # Force equal created_at (and so equal scores) on all of them.
    client = manager.client
    for session_id in ids:
        await client.hset(manager.keys.session(session_id).hash, "c", 42_000_000)
        await client.zadd(manager.keys.index, {global_member(session_id, None): 42_000_000})
    seen: list[str] = []
    cursor = None
    while True:
        page = await manager.list_sessions(limit=3, cursor=cursor)
        seen.extend(item.session_id for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == sorted(ids, reverse=True)


# -- atomicity and round trips --------------------------------------------------------------


@pytest.fixture(scope="module")
def private_redis() -> Iterator[servers.ManagedServer]:
    """A Redis of our own: tests here flush scripts, reset stats and restart it."""
    try:
        server = servers.start_redis()
    except servers.ServerUnavailable as exc:
        pytest.skip(f"cannot start a private redis-server: {exc}")
    yield server
    server.stop()


@pytest_asyncio.fixture
async def private(private_redis: servers.ManagedServer) -> AsyncIterator[RedisSessionManager]:
    if not private_redis.is_running():
        private_redis.start()
    manager = connect(private_redis.url, namespace="private", retries=1)
    assert isinstance(manager, RedisSessionManager)
    yield manager
    await manager.close()


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The first word of every request written to any Redis connection (one per round
    trip: a pipeline is written at once)."""
    written: list[bytes] = []
    original = Connection.send_packed_command

    async def spy(self: Connection, command: Any, check_health: bool = True) -> None:
        chunks = [command] if isinstance(command, (bytes, str)) else list(command)
        head = b"".join(c if isinstance(c, bytes) else bytes(c) for c in chunks)
        written.append(head.split(b"\r\n")[2])
        await original(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", spy)
    return written


async def test_one_round_trip_per_save_and_per_load(deployment: Factory, sent: list[bytes]) -> None:
    manager: RedisSessionManager = await deployment()
    session = await manager.create("trips")
    await manager.save(session)  # the first call of each script may load it (NOSCRIPT)
    await manager.get("trips")
    sent.clear()
    session.add_event("user", "one")
    session.add_event("user", "two")
    await manager.save(session)
    assert sent == [b"EVALSHA"]
    sent.clear()
    loaded = await manager.get("trips")
    assert loaded is not None and len(loaded.events) == 2
    tail = await manager.get("trips", last_events=1)
    assert tail is not None and [event.content for event in tail.events] == ["two"]
    assert sent == [b"EVALSHA", b"EVALSHA"]


async def test_a_load_of_more_events_than_the_script_returns_reads_them_in_one_transaction(
    deployment: Factory, sent: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a single server; in a cluster the script returns every event (no transactions
    # in the cluster pipelines of the oldest redis-py supported).
    monkeypatch.setattr(redis_manager, "INLINE_EVENTS", 3)
    manager: RedisSessionManager = await deployment()
    plain = [] if manager.cluster else [b"MULTI"]
    session = await manager.create("plain")
    for index in range(5):
        session.add_event("user", index)
    await manager.save(session)
    await manager.get("plain")  # the first call of the script may load it (NOSCRIPT)
    sent.clear()
    loaded = await manager.get("plain")
    assert loaded is not None and [event.content for event in loaded.events] == [0, 1, 2, 3, 4]
    assert sent == [b"EVALSHA", *plain]
    sent.clear()
    tail = await manager.get("plain", last_events=4)
    assert tail is not None and [event.content for event in tail.events] == [1, 2, 3, 4]
    window = await manager.get("plain", last_events=3)
    assert window is not None and [event.content for event in window.events] == [2, 3, 4]
    assert sent == [b"EVALSHA", *plain, b"EVALSHA"]
    # What the plain read loaded saves like any other load: appended, then rewritten.
    tail.add_event("user", 5)
    await manager.save(tail)
    assert loaded.version == 2
    loaded.events[0] = loaded.events[0].model_copy(update={"content": "first"})
    with pytest.raises(SessionConflictError):
        await manager.save(loaded)
    again = await manager.get("plain")
    assert again is not None
    assert [event.content for event in again.events] == [0, 1, 2, 3, 4, 5]
    assert again.version == 3


async def test_the_plain_read_checks_again_that_the_session_is_there_and_live(
    standalone: Factory,
) -> None:
    # The load script found the session; by the time the plain read runs it may have
    # expired or been deleted, which the read must report as absent like the script.
    manager: RedisSessionManager = await standalone(ttl=60)
    session = await manager.create("checked")
    session.add_event("user", "one")
    await manager.save(session)
    keys = manager.keys.session("checked")
    now = manager.clock.now()
    live = await manager._load_plainly(keys.hash, keys.events, -1, now)
    assert live is not None and live.record.version == 2 and len(live.events) == 1
    later = now + timedelta(seconds=61)
    assert await manager._load_plainly(keys.hash, keys.events, -1, later) is None
    assert await manager.delete("checked")
    assert await manager._load_plainly(keys.hash, keys.events, -1, now) is None


async def test_scripts_flushed_from_the_server_are_reloaded(private: RedisSessionManager) -> None:
    await private.open()
    session = await private.create(f"flush-{uuid.uuid4().hex}")
    await private.client.script_flush()
    session.add_event("user", "after flush")
    await private.save(session)
    loaded = await private.get(session.session_id)
    assert loaded is not None and [event.content for event in loaded.events] == ["after flush"]


async def test_stale_save_writes_nothing(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment()
    first = await manager.create("race")
    second = await manager.get("race")
    assert second is not None
    first.add_event("user", "winner")
    await manager.save(first)
    second.add_event("user", "loser")
    second.state["loser"] = True
    with pytest.raises(SessionConflictError):
        await manager.save(second)
    stored = await manager.get("race")
    assert stored is not None
    assert [event.content for event in stored.events] == ["winner"]
    assert stored.state == {} and stored.version == 2
    assert await manager.client.llen(manager.keys.session("race").events) == 1


async def test_a_retried_save_that_already_landed_is_not_a_conflict(
    standalone: Factory,
) -> None:
    # redis-py resends a command after a dropped connection; the write token makes the
    # resent script see its own write instead of a version conflict.
    manager: RedisSessionManager = await standalone()
    session = await manager.create("retry")
    keys = manager.keys.session("retry").every
    token = b"0123456789abcdef0123456789abcdef"
    lineage = "0123456789abcdef"
    expected = (await manager.client.hget(keys[0], "l")).rpartition(b":")[0]  # create's
    assert expected
    event = '{"id":"e","author":"a"}'
    args = [1, 1, token, 0, "{}", 2, 2_000_000, "", lineage, expected, event]
    assert await manager._link.save(keys, args) == 1
    assert await manager._link.save(keys, args) == 1
    assert await manager.client.llen(keys[1]) == 1
    assert session.version == 1


def _old_tokens(count: int) -> list[bytes]:
    return [f"{index:032x}".encode() for index in range(count)]


async def test_tokens_kept_in_the_hash_by_an_earlier_release_still_dedupe(
    deployment: Factory,
) -> None:
    # A release before the token ring kept every token in the hash's 't', newest first
    # (the i-th made the stored version minus i), and had no ring key.
    manager: RedisSessionManager = await deployment()
    session = await manager.create("old")
    for index in range(40):
        session.add_event("user", index)
        await manager.save(session)
    assert session.version == 41
    keys = manager.keys.session("old")
    client = manager.client
    old = _old_tokens(32)  # old[i] made version 41 - i
    await client.hset(keys.hash, "t", b"".join(old))
    await client.delete(keys.tokens)
    lineage = (await client.hget(keys.hash, "l")).rpartition(b":")[0]

    async def retry(i: int) -> int:
        """Resend the save that made version 41 - i; nothing may be written."""
        version = 41 - i
        args = [1, version - 1, old[i], version - 1, "{}", version, 1, "", "", lineage, "{}"]
        return int(await manager._link.save(keys.every, args))

    assert await retry(0) == 1 and await retry(31) == 1  # read from 't'
    session.add_event("user", "after the upgrade")
    await manager.save(session)  # version 42: the old tokens move into the ring
    assert len(await client.hget(keys.hash, "t")) == 32
    assert await client.strlen(keys.tokens) == 32 * TOKENS_KEPT
    # The window is exact: the latest TOKENS_KEPT writes (versions 11-42) are kept.
    assert await retry(0) == 1 and await retry(30) == 1
    assert await retry(31) == -1
    session.add_event("user", "one more")
    await manager.save(session)  # version 43: version 11's token leaves the window
    assert await retry(29) == 1 and await retry(30) == -1
    loaded = await manager.get("old")
    assert loaded is not None and loaded.version == 43
    assert [event.content for event in loaded.events] == [
        *range(40),
        "after the upgrade",
        "one more",
    ]


async def test_a_save_that_landed_before_the_upgrade_is_retried_once(
    deployment: Factory,
) -> None:
    manager: RedisSessionManager = await deployment()
    session = await manager.create("upgraded")
    session.add_event("user", "first")
    await manager.save(session)
    session.add_event("user", "second")
    real = manager._save

    async def lands_then_drops(request: SaveRequest, now: datetime) -> None:
        manager._save = real  # type: ignore[method-assign]
        await real(request, now)
        raise BackendUnavailableError(manager.url, "connection dropped after the save")

    manager._save = lands_then_drops  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailableError):
        await manager.save(session)
    # Rewrite what landed as a release before the token ring stored it: its token first
    # in 't', then older ones, and no ring key.
    keys = manager.keys.session("upgraded")
    client = manager.client
    landed = await client.hget(keys.hash, "t")
    await client.hset(keys.hash, "t", landed + b"".join(_old_tokens(2)))
    await client.delete(keys.tokens)
    await manager.save(session)  # the core resends the same request: recognised
    loaded = await manager.get("upgraded")
    assert loaded is not None and loaded.version == 3
    assert [event.content for event in loaded.events] == ["first", "second"]
    assert await client.llen(keys.events) == 2


@pytest.mark.parametrize(("others", "recognised"), [(TOKENS_KEPT - 1, True), (TOKENS_KEPT, False)])
async def test_the_token_ring_keeps_exactly_the_latest_writes(
    standalone: Factory, others: int, recognised: bool
) -> None:
    manager: RedisSessionManager = await standalone()
    mine = await manager.create("ring")
    mine.add_event("user", "mine")
    real = manager._save

    async def lands_then_drops(request: SaveRequest, now: datetime) -> None:
        manager._save = real  # type: ignore[method-assign]
        await real(request, now)
        raise BackendUnavailableError(manager.url, "connection dropped after the save")

    manager._save = lands_then_drops  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailableError):
        await manager.save(mine)
    other = await manager.get("ring")
    assert other is not None
    for index in range(others):
        other.add_event("user", index)
        await manager.save(other)
    if recognised:
        await manager.save(mine)  # the retry: its token is still in the ring
    else:
        with pytest.raises(SessionConflictError):
            await manager.save(mine)  # pushed out of the ring: a stale copy now
    loaded = await manager.get("ring")
    assert loaded is not None
    assert [event.content for event in loaded.events] == ["mine", *range(others)]


async def test_large_append_is_pushed_in_slices(standalone: Factory) -> None:
    manager: RedisSessionManager = await standalone()
    session = await manager.create("big")
    for index in range(2500):
        session.add_event("user", index)
    await manager.save(session)
    loaded = await manager.get("big")
    assert loaded is not None
    assert [event.content for event in loaded.events] == list(range(2500))
    tail = await manager.get("big", last_events=3)
    assert tail is not None and [event.content for event in tail.events] == [2497, 2498, 2499]


# -- outages ----------------------------------------------------------------------------------


async def test_restart_raises_unavailable_then_recovers(
    private_redis: servers.ManagedServer, private: RedisSessionManager
) -> None:
    await private.open()
    session_id = f"outage-{uuid.uuid4().hex}"
    await private.create(session_id)
    private_redis.stop()
    try:
        with pytest.raises(BackendUnavailableError) as caught:
            await private.get(session_id)
        assert caught.value.url == private.url
    finally:
        private_redis.start()
    # Same manager, no reopen: redis-py reconnects. The server kept nothing (no persistence).
    assert await private.get(session_id) is None
    session = await private.create(session_id)
    session.add_event("user", "back")
    await private.save(session)
    loaded = await private.get(session_id)
    assert loaded is not None and [event.content for event in loaded.events] == ["back"]


async def test_unavailable_error_masks_the_password() -> None:
    port = servers.free_port()
    manager = connect(f"redis://user:s3cr3t-pw@127.0.0.1:{port}/0", retries=0)
    with pytest.raises(BackendUnavailableError) as caught:
        await manager.open()
    assert "s3cr3t-pw" not in str(caught.value)
    assert "***" in caught.value.url
    await manager.close()


async def test_cluster_unavailable_error_masks_the_password() -> None:
    port = servers.free_port()
    manager = connect(f"redis+cluster://user:s3cr3t-pw@127.0.0.1:{port}", retries=0)
    with pytest.raises(BackendUnavailableError) as caught:
        await manager.open()
    assert "s3cr3t-pw" not in str(caught.value)
    await manager.close()


# -- URLs and options -------------------------------------------------------------------------


def test_query_options_are_ours_and_driver_parameters_stay_in_the_url() -> None:
    manager = connect(
        "redis://:pw@127.0.0.1:6379/3?namespace=app&ttl=30&socket_timeout=2"
        "&connect_timeout=1&max_connections=7&client_name=me"
    )
    assert isinstance(manager, RedisSessionManager)
    options = manager.options.model_dump()
    assert options["namespace"] == "app" and options["ttl"] == 30
    assert options["socket_timeout"] == 2 and options["connect_timeout"] == 1
    assert options["max_connections"] == 7
    assert manager.url == "redis://:***@127.0.0.1:6379/3?client_name=me"
    assert manager.keys.prefix == "agentsessions:app:"


@pytest.mark.parametrize(
    "query", ["bogus=1", "ttl=-1", "max_connections=0", "namespace=a:b", "socket_timeout=x"]
)
def test_bad_options_name_the_problem(query: str) -> None:
    with pytest.raises(InvalidOptionError) as caught:
        connect(f"redis://127.0.0.1:6379/0?{query}")
    assert query.split("=")[0] in str(caught.value)


@pytest.mark.parametrize(
    ("url", "first", "nodes"),
    [
        ("redis+cluster://h1:7000", "redis://h1:7000", [("h1", 7000)]),
        (
            "redis+cluster://u:p@h1:7000,h2:7001,[::1]:7002/0?client_name=x",
            "redis://u:p@h1:7000/0?client_name=x",
            [("h1", 7000), ("h2", 7001), ("::1", 7002)],
        ),
        ("rediss+cluster://h1", "rediss://h1", [("h1", 6379)]),
        ("redis+cluster://h1:7000?client_name=x", "redis://h1:7000?client_name=x", [("h1", 7000)]),
    ],
)
def test_cluster_urls_name_every_startup_node(
    url: str, first: str, nodes: list[tuple[str, int]]
) -> None:
    assert split_cluster_url(url) == (first, nodes)


def test_bad_cluster_url_fails_at_connect() -> None:
    with pytest.raises(InvalidOptionError, match="port"):
        connect("redis+cluster://:pw@h1:notaport")
    with pytest.raises(InvalidOptionError, match="no cluster node"):
        connect("redis+cluster://:pw@")


def test_cluster_refuses_a_database_number(redis_cluster_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="'db'"):
        connect(redis_cluster_url + "/2")


def test_plugin_module_does_not_import_redis() -> None:
    code = (
        "import sys, agentsessions_redis._plugin as p;"
        "specs = p.agentsessions_backends();"
        "assert 'redis' not in sys.modules, 'redis imported';"
        "print(sorted(specs[0].schemes))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "redis+cluster" in done.stdout


def test_redis_unix_is_the_socket_scheme_and_unix_is_deprecated(tmp_path: Path) -> None:
    socket = tmp_path / "absent.sock"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        manager = connect(f"redis+unix://{socket}?connect_timeout=2")
    assert isinstance(manager, RedisSessionManager) and not manager.cluster
    with pytest.warns(DeprecationWarning, match=r"use redis\+unix://"):
        old = connect(f"unix://{socket}")
    assert isinstance(old, RedisSessionManager)

    async def open_it() -> None:
        async with manager:
            pass

    # No server on that socket: redis-py was handed a Unix socket path, not a host.
    with pytest.raises(BackendUnavailableError, match=r"absent\.sock|No such file"):
        asyncio.run(open_it())


async def test_the_archive_expires_with_the_session(deployment: Factory) -> None:
    manager: RedisSessionManager = await deployment(ttl=60)
    session = await manager.create("archived", "someone")
    for index in range(5):
        session.add_event("user", index)
    await manager.save(session)
    await manager.compact(session, session.events[2].id, [], archive=True)
    keys = manager.keys.session("archived")
    client = manager.client
    times = [int(await client.pexpiretime(key)) for key in keys.every]
    assert times[0] > 0 and len(set(times)) == 1, "the archive must expire with the session"
    await asyncio.sleep(0.01)
    session.add_event("user", "later")
    await manager.save(session)
    later = [int(await client.pexpiretime(key)) for key in keys.every]
    assert later[0] > times[0] and len(set(later)) == 1, "a save must refresh the archive too"
    assert [event.content for event in await manager.archived_events("archived")] == [0, 1, 2]


async def test_connections_have_no_socket_timeout_unless_one_is_asked_for(
    standalone: Callable[..., Any], cluster: Callable[..., Any]
) -> None:
    # Every call runs under its deadline already; a socket timeout makes redis-py wrap
    # each send in a task and each read in a timer, and redis-py 8 sets one by default.
    plain = await standalone()
    assert plain.client.connection_pool.connection_kwargs["socket_timeout"] is None
    asked = await standalone(socket_timeout=2)
    assert asked.client.connection_pool.connection_kwargs["socket_timeout"] == 2
    longer = await standalone(socket_timeout=60, timeout=10)  # the deadline comes first
    assert longer.client.connection_pool.connection_kwargs["socket_timeout"] is None
    nodes = (await cluster()).client.get_nodes()
    assert nodes and all(node.connection_kwargs["socket_timeout"] is None for node in nodes)


async def test_more_concurrent_calls_than_redis_pys_default_pool_all_succeed(
    standalone: Callable[..., Any], cluster: Callable[..., Any]
) -> None:
    # redis-py's pools stop at 100 connections (per node) and raise instead of waiting.
    for make in (standalone, cluster):
        manager = await make()
        await manager.create("busy")
        found = await asyncio.gather(*(manager.get("busy") for _ in range(150)))
        assert all(session is not None for session in found)
        limited = await make(max_connections=7)
        pool_size = (
            limited.client.connection_pool.max_connections
            if not limited.cluster
            else limited.client.get_nodes()[0].max_connections
        )
        assert pool_size == 7


# -- address_map ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["10.0.0.5:6379", "10.0.0.5=127.0.0.1:1", "a:1=b:99999", "a:x=b:1", "=b:1"],
)
def test_a_malformed_address_map_is_refused_at_connect(value: str) -> None:
    with pytest.raises(InvalidOptionError, match="address_map"):
        connect("redis+cluster://127.0.0.1:7000", address_map=value)


def test_address_map_is_refused_on_one_server() -> None:
    with pytest.raises(InvalidOptionError, match="only to redis\\+cluster:// and redis\\+sentinel"):
        connect("redis://127.0.0.1:6379/0?address_map=10.0.0.5:6379=127.0.0.1:6379")


def test_address_map_parses_announced_to_reachable() -> None:
    from agentsessions_redis._options import parse_address_map

    assert parse_address_map("10.0.0.5:6379=127.0.0.1:16379, [::1]:7000=127.0.0.1:7001") == {
        ("10.0.0.5", 6379): ("127.0.0.1", 16379),
        ("::1", 7000): ("127.0.0.1", 7001),
    }


async def test_a_cluster_is_reached_through_the_address_map(
    redis_cluster_url: str,
) -> None:
    """Every node announced, mapped to an address that refuses: the client follows the map
    (so the map is what routes the kit's fault proxies), and says it cannot connect."""
    async with connect(redis_cluster_url) as manager:
        assert isinstance(manager, RedisSessionManager)
        nodes = [(node.host, node.port) for node in manager.client.get_nodes()]
    from agentsessions_testservers import free_port

    dead = free_port()
    address_map = ",".join(f"{host}:{port}=127.0.0.1:{dead}" for host, port in nodes)
    mapped = connect(redis_cluster_url, address_map=address_map, timeout=3)
    assert isinstance(mapped, RedisSessionManager)
    try:
        with pytest.raises(BackendUnavailableError):
            await _open_and_create(mapped)
    finally:
        await mapped.close()


async def _open_and_create(manager: RedisSessionManager) -> None:
    await manager.open()
    await manager.create("s")


@pytest.mark.parametrize("how", ["create", "restore"])
async def test_a_new_life_over_an_expired_id_drops_the_old_owners_index_entries(
    deployment: Factory, how: str
) -> None:
    """A create or restore that replaces an expired session of another owner removes that
    owner's index entries (global index member, user index), on one server and in a
    cluster, where the script cannot reach the indexes and the client drops them: the id
    is then erased whole by one delete."""
    manager: RedisSessionManager = await deployment(ttl=60.0)
    clock = FrozenClock()
    manager.clock = clock
    await manager.create("b*", "u1")
    clock.advance(61)
    if how == "create":
        await manager.create("b*", "u2")
    else:
        await manager.restore(
            Session(
                session_id="b*",
                user_id="u2",
                events=[],
                state={},
                created_at=clock.now(),
                updated_at=clock.now(),
                version=3,
            )
        )
    held = await redis_inventory(manager, "b*")
    assert not [entry for entry in held.other if "u1" in entry or "dTE" in entry], (
        f"{how} over the expired id must drop the old owner's index entries: {held.other}"
    )
    listed = await manager.list_sessions(user_id="u1")
    assert listed.items == [], f"the old owner still lists the id: {listed.items}"
    assert await manager.delete("b*") is True, "delete() of the new life must return True"
    held = await redis_inventory(manager, "b*")
    assert held.erased, f"one delete() must erase the id whole, storage still holds {held}"
