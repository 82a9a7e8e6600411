"""PostgreSQL through a multi-host URL over a primary and a streaming standby.

``postgresql://h1,h2/db?target_session_attrs=read-write``: the conformance kit passes
through it; a standby is never written to (a URL naming only the standby refuses every
write with `BackendReadOnlyError` and writes nothing); after the primary dies and the
standby is promoted, the same manager writes to the new primary, migrating a schema
the new primary lacks; a primary fenced read-only hands its writes to the promoted
standby without an error. Each test that fails over has a pair of its own
(tools/testservers, `start_postgres_pair`).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import asyncpg
import pytest
import pytest_asyncio
from agentsessions import (
    BackendReadOnlyError,
    BackendUnavailableError,
    Session,
    SessionManager,
    connect,
)
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_postgres import PostgresSessionManager
from agentsessions_postgres._schema import LATEST_VERSION, quote_ident
from agentsessions_testservers import PostgresStandbyPair, ServerUnavailable, start_postgres_pair
from conformance._run import assert_url_mode_green, run_url_mode
from raw_inventories import postgres_inventory

pytestmark = [pytest.mark.postgres]

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"
#: Never printed anywhere: trust auth ignores it, and every message must mask it.
SECRET = "s3cret-pw"
#: A call's deadline here: short, so a test against a dead host fails fast.
TIMEOUT = 5


def _start_pair() -> PostgresStandbyPair:
    try:
        return start_postgres_pair()
    except ServerUnavailable as exc:
        if REQUIRE_SERVERS:
            raise
        pytest.skip(f"no PostgreSQL primary/standby pair: {exc}")


@pytest.fixture(scope="module")
def shared_pair() -> Iterator[PostgresStandbyPair]:
    """One pair for the tests that do not fail over."""
    pair = _start_pair()
    try:
        yield pair
    finally:
        pair.close()


@pytest.fixture
def own_pair() -> Iterator[PostgresStandbyPair]:
    """A pair for one test that kills its primary."""
    pair = _start_pair()
    try:
        yield pair
    finally:
        pair.close()


def _with(url: str, **params: object) -> str:
    query = "&".join(f"{key}={value}" for key, value in params.items())
    return f"{url}{'&' if '?' in url else '?'}{query}"


def _with_password(url: str) -> str:
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@", 1)


def _schema() -> str:
    return f"as_ha_{uuid.uuid4().hex[:16]}"


async def _fetch(url: str, sql: str, *args: object) -> list[asyncpg.Record]:
    connection = await asyncpg.connect(url)
    try:
        return await connection.fetch(sql, *args)
    finally:
        await connection.close()


async def _schema_exists(url: str, schema: str) -> bool:
    rows = await _fetch(url, "SELECT 1 FROM pg_namespace WHERE nspname = $1", schema)
    return bool(rows)


def _append(text: str) -> object:
    def apply(session: Session) -> None:
        session.add_event("user", text)

    return apply


async def _until_ok(call: Callable[[], Awaitable[object]]) -> list[str]:
    """*call* until it succeeds (bounded); returns the errors seen before."""
    errors: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        try:
            await call()
            return errors
        except BackendUnavailableError as exc:
            errors.append(f"{type(exc).__name__}: {exc} {exc!r}")
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


class TestPostgresMultiHostConformance(SessionManagerTests):
    """The kit through the pair's multi-host URL: every clause holds on the primary."""

    @pytest_asyncio.fixture
    async def manager(self, shared_pair: PostgresStandbyPair) -> AsyncIterator[SessionManager]:
        schema = _schema()
        manager = connect(_with(shared_pair.url, schema=schema))
        assert isinstance(manager, PostgresSessionManager)
        await manager.open()
        yield manager
        await manager.close()
        connection = await asyncpg.connect(shared_pair.url)
        try:
            await connection.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
        finally:
            await connection.close()

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await postgres_inventory(manager, session_id)


def test_url_mode_runs_every_clause_green(shared_pair: PostgresStandbyPair, tmp_path: Path) -> None:
    """`agentsessions conformance URL` on the pair's multi-host URL: every clause, the wire
    clauses through one fault proxy per host, with no adopter code."""
    schema = _schema()
    try:
        run = run_url_mode(tmp_path, _with(shared_pair.url, schema=schema))
        assert_url_mode_green(run, least=220)
        assert run.report is not None
        wire = {c["test"]: c["outcome"] for c in run.report["clauses"] if "_wire_" in c["test"]}
        assert len(wire) >= 6 and set(wire.values()) == {"passed"}, wire
    finally:
        asyncio.run(_drop(shared_pair.url, schema))


async def _drop(url: str, schema: str) -> None:
    connection = await asyncpg.connect(url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {quote_ident(schema)} CASCADE")
    finally:
        await connection.close()


async def test_multi_host_url_writes_to_the_primary(shared_pair: PostgresStandbyPair) -> None:
    # The standby first: the read-write attribute must skip it.
    standby_first = shared_pair.url.replace(
        f"127.0.0.1:{shared_pair.primary.port},127.0.0.1:{shared_pair.standby.port}",
        f"127.0.0.1:{shared_pair.standby.port},127.0.0.1:{shared_pair.primary.port}",
    )
    assert standby_first != shared_pair.url
    schema = _schema()
    async with connect(_with(standby_first, schema=schema), timeout=TIMEOUT) as manager:
        await manager.create("s")
        await manager.update("s", _append("hello"))  # type: ignore[arg-type]
    rows = await _fetch(
        shared_pair.primary_url,
        f"SELECT version FROM {quote_ident(schema)}.agentsessions_sessions",
    )
    assert [row[0] for row in rows] == [2]


async def test_standby_alone_refuses_writes_and_nothing_is_written(
    shared_pair: PostgresStandbyPair,
) -> None:
    schema = _schema()
    url = _with(
        _with_password(shared_pair.standby_url), target_session_attrs="read-write", schema=schema
    )
    manager = connect(url, timeout=TIMEOUT)
    with pytest.raises(BackendReadOnlyError) as raised:
        await manager.create("s")
    message = f"{raised.value} {raised.value!r} {raised.value.url} {manager!r} {manager.url}"
    assert "read-write" in str(raised.value)
    assert SECRET not in message
    await manager.close()
    # Not even the schema: the manager never got a connection it could write through.
    assert not await _schema_exists(shared_pair.primary_url, schema)
    assert not await _schema_exists(shared_pair.standby_url, schema)


async def test_standby_without_target_attrs_refuses_writes_and_keeps_reads(
    shared_pair: PostgresStandbyPair,
) -> None:
    schema = _schema()
    async with connect(_with(shared_pair.url, schema=schema), timeout=TIMEOUT) as primary:
        await primary.create("s")
    shared_pair.wait_replayed()
    # target_session_attrs=any (libpq's default): connected to the standby itself.
    standby = connect(_with(_with_password(shared_pair.standby_url), schema=schema))
    before = await standby.get("s")
    assert before is not None and before.version == 1
    writes: list[Callable[[], Awaitable[object]]] = [
        lambda: standby.create("t"),
        lambda: standby.update("s", _append("x")),  # type: ignore[arg-type]
        lambda: standby.delete("s"),
    ]
    for write in writes:
        with pytest.raises(BackendReadOnlyError) as raised:
            await write()
        assert SECRET not in f"{raised.value} {raised.value!r}"
    after = await standby.get("s")
    assert after is not None and after.version == 1 and after.events == []
    await standby.close()
    rows = await _fetch(
        shared_pair.primary_url,
        f"SELECT session_id, version FROM {quote_ident(schema)}.agentsessions_sessions",
    )
    assert [tuple(row) for row in rows] == [("s", 1)]


async def test_after_failover_the_same_manager_writes_to_the_promoted_standby(
    own_pair: PostgresStandbyPair,
) -> None:
    pair = own_pair
    url = _with_password(pair.url)
    schema, lost_schema, fresh_schema = _schema(), _schema(), _schema()
    manager = connect(_with(url, schema=schema), timeout=TIMEOUT)
    # Migrated on the old primary; its migration is then made to go missing on the new
    # one, as a migration that had not reached the standby would.
    other = connect(_with(url, schema=lost_schema), timeout=TIMEOUT)
    await manager.create("s")
    await manager.update("s", _append("before"))  # type: ignore[arg-type]
    await other.create("o")
    pair.wait_replayed()

    pair.kill_primary()
    pair.promote()
    connection = await asyncpg.connect(pair.standby_url)
    try:
        await connection.execute(f"DROP SCHEMA {quote_ident(lost_schema)} CASCADE")
    finally:
        await connection.close()

    errors = await _until_ok(lambda: manager.update("s", _append("after"), last_events=0))  # type: ignore[arg-type]
    # The dropped schema is migrated again by the connection that finds it missing.
    errors += await _until_ok(lambda: other.create("o"))
    assert all(SECRET not in error for error in errors)
    session = await manager.get("s")
    assert session is not None
    assert [event.content for event in session.events] == ["before", "after"]

    # Managers that first open now, all at once, migrate once, under the advisory lock
    # of the new primary.
    fresh = [connect(_with(url, schema=fresh_schema), timeout=TIMEOUT) for _ in range(4)]
    await asyncio.gather(*(m.create(f"f{i}") for i, m in enumerate(fresh)))
    for each in (manager, other, *fresh):
        await each.close()

    async def versions(name: str) -> list[int]:
        rows = await _fetch(
            pair.standby_url,
            f"SELECT version FROM {quote_ident(name)}.agentsessions_schema_version "
            "ORDER BY version",
        )
        return [row[0] for row in rows]

    expected = list(range(1, LATEST_VERSION + 1))
    assert await versions(schema) == expected
    assert await versions(lost_schema) == expected
    assert await versions(fresh_schema) == expected
    rows = await _fetch(
        pair.standby_url,
        f"SELECT session_id FROM {quote_ident(fresh_schema)}.agentsessions_sessions "
        "ORDER BY session_id",
    )
    assert [row[0] for row in rows] == ["f0", "f1", "f2", "f3"]


async def test_a_fenced_primary_hands_writes_to_the_promoted_standby(
    own_pair: PostgresStandbyPair,
) -> None:
    pair = own_pair
    schema = _schema()
    manager = connect(_with(pair.url, schema=schema), timeout=TIMEOUT)
    old_only = connect(_with(pair.primary_url, schema=schema), timeout=TIMEOUT)
    await manager.create("s")
    await old_only.get("s")  # a pooled connection to the old primary
    pair.wait_replayed()

    # Fencing, as an operator does before a switchover: the old primary turns read-only
    # (its open connections included), then the standby is promoted.
    connection = await asyncpg.connect(pair.primary_url)
    try:
        await connection.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        await connection.execute("SELECT pg_reload_conf()")
    finally:
        await connection.close()
    deadline = time.monotonic() + 10
    while (await _fetch(pair.primary_url, "SHOW default_transaction_read_only"))[0][0] != "on":
        assert time.monotonic() < deadline, "the reload never took effect"
        await asyncio.sleep(0.05)
    pair.promote()

    # The pooled connection meets the fence, the pool drops it, and the write is sent
    # again through target_session_attrs: no error reaches the caller.
    await manager.update("s", _append("after"))  # type: ignore[arg-type]
    with pytest.raises(BackendReadOnlyError):  # only the old primary in its URL
        await old_only.update("s", _append("lost"))  # type: ignore[arg-type]
    await manager.close()
    await old_only.close()

    sql = f"SELECT version FROM {quote_ident(schema)}.agentsessions_sessions"
    assert [row[0] for row in await _fetch(pair.standby_url, sql)] == [2]
    assert [row[0] for row in await _fetch(pair.primary_url, sql)] == [1]
