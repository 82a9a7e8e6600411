"""Every call ends within its deadline, against a silent server and a frozen one.

A *silent* server accepts TCP connections and never answers (a black-holed network
path looks the same); a *frozen* one is a real server stopped with SIGSTOP, with the
manager's connections already open. Against both, every operation must raise a
`BackendTimeoutError` within ``timeout`` + `MARGIN`, and ``asyncio.wait_for`` around
any call must return on time, even when the manager's own deadline is far away.
After SIGCONT the same manager must work again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import agentsessions_testservers as servers
import pytest
import pytest_asyncio
from agentsessions import (
    BackendTimeoutError,
    BackendUnavailableError,
    Session,
    SessionManager,
    connect,
)

from faults._tools import DEADLINES, MARGIN, SilentServer, frozen, timed

pytestmark = pytest.mark.faults

TIMEOUT = 1.0

Operation = Callable[[SessionManager], Awaitable[object]]


async def _noop(session: Session) -> None:
    session.state["n"] = session.state.get("n", 0) + 1


def _operations(session_id: str) -> dict[str, Operation]:
    """Every public operation, each on its own session id."""

    async def save(manager: SessionManager) -> None:
        # A session built by hand: save() has to read the stored one first.
        await manager.save(Session(session_id=f"{session_id}-save", version=1))

    return {
        "open": lambda m: m.open(),
        "create": lambda m: m.create(f"{session_id}-create"),
        "get": lambda m: m.get(f"{session_id}-get"),
        "save": save,
        "update": lambda m: m.update(f"{session_id}-update", _noop),
        "list_sessions": lambda m: m.list_sessions(),
        "delete": lambda m: m.delete(f"{session_id}-delete"),
    }


SILENT_URLS = {
    "postgres": "postgresql://postgres@127.0.0.1:{port}/postgres",
    "redis": "redis://127.0.0.1:{port}/0",
    "redis-cluster": "redis+cluster://127.0.0.1:{port}",
    "mongo": "mongodb://127.0.0.1:{port}/agentsessions_test",
    "mysql": "mysql://root@127.0.0.1:{port}/agentsessions_test",
}


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    with SilentServer() as server:
        yield server


async def _each_within_deadline(
    what: str, managers: dict[str, SessionManager], ops: dict[str, Operation], limit: float
) -> dict[str, tuple[float, BaseException | None]]:
    """Run every op at once (one manager each); return each one's time and error."""
    names = list(ops)
    results = await asyncio.gather(*(timed(ops[name](managers[name])) for name in names))
    outcome = dict(zip(names, results, strict=True))
    slowest = max(took for took, _ in results)
    DEADLINES.append((what, limit - MARGIN, slowest, len(results)))
    slow = {name: round(took, 2) for name, (took, _) in outcome.items() if took > limit}
    assert not slow, f"calls that overran {limit:g} s: {slow}"
    return outcome


@pytest.mark.parametrize("kind", sorted(SILENT_URLS))
async def test_every_call_against_a_silent_server_ends_at_its_deadline(
    kind: str, silent: SilentServer
) -> None:
    url = SILENT_URLS[kind].format(port=silent.port)
    ops = _operations("silent")
    managers = {name: connect(url, timeout=TIMEOUT) for name in ops}
    try:
        outcome = await _each_within_deadline(
            f"{kind} silent server", managers, ops, TIMEOUT + MARGIN
        )
    finally:
        await asyncio.gather(*(manager.close() for manager in managers.values()))
    for name, (_, error) in outcome.items():
        assert isinstance(error, BackendTimeoutError), f"{name}: {error!r}"
        assert f"{name}()" in str(error) and f"{TIMEOUT:g} s" in str(error)
    assert silent.accepted > 0  # the calls did reach the silent server


@pytest.mark.parametrize("kind", sorted(SILENT_URLS))
async def test_wait_for_around_any_call_returns_on_time(kind: str, silent: SilentServer) -> None:
    # The manager's own deadline is far away: only the cancellation can end the calls.
    url = SILENT_URLS[kind].format(port=silent.port)
    ops = _operations("wait-for")
    managers = {name: connect(url, timeout=60) for name in ops}

    async def bounded(op: Operation, manager: SessionManager) -> None:
        await asyncio.wait_for(op(manager), TIMEOUT)

    try:
        wrapped = {name: (lambda m, op=op: bounded(op, m)) for name, op in ops.items()}
        outcome = await _each_within_deadline(
            f"{kind} silent server, wait_for", managers, wrapped, TIMEOUT + MARGIN
        )
    finally:
        closing = asyncio.gather(*(manager.close() for manager in managers.values()))
        took, _ = await timed(closing)
        assert took < MARGIN + 60 / 2  # close() never waits on a silent server for long
    for name, (_, error) in outcome.items():
        assert isinstance(error, asyncio.TimeoutError), f"{name}: {error!r}"


# -- frozen servers ------------------------------------------------------------------------


@pytest_asyncio.fixture(params=["postgres", "redis", "redis-cluster", "mongo"])
async def private(request: pytest.FixtureRequest) -> AsyncIterator[servers.ManagedServer]:
    starters = {
        "postgres": servers.start_postgres,
        "redis": servers.start_redis,
        "redis-cluster": servers.start_redis_cluster,
        "mongo": servers.start_mongo,
    }
    try:
        server = await asyncio.to_thread(starters[request.param])
    except servers.ServerUnavailable as exc:
        from conftest import REQUIRE_SERVERS

        if REQUIRE_SERVERS:
            pytest.fail(f"cannot start a private {request.param}: {exc}")
        pytest.skip(f"cannot start a private {request.param}: {exc}")
    try:
        yield server
    finally:
        await asyncio.to_thread(server.close)


async def _recovers(manager: SessionManager, session_id: str, within: float) -> float:
    """Seconds until *manager* reads *session_id* again (bounded by *within*)."""
    start = time.monotonic()
    while True:
        try:
            if await manager.get(session_id) is not None:
                return time.monotonic() - start
        except BackendUnavailableError:
            pass
        assert time.monotonic() - start < within, f"no recovery within {within} s"
        await asyncio.sleep(0.1)


async def test_a_frozen_server_times_every_call_out_and_the_manager_recovers(
    private: servers.ManagedServer,
) -> None:
    ops = _operations("frozen")
    managers = {name: connect(private.url, timeout=TIMEOUT) for name in ops}
    late = connect(private.url, timeout=60)
    try:
        for manager in managers.values():
            await manager.open()
            for suffix in ("get", "save", "update", "delete"):
                await manager.get_or_create(f"frozen-{suffix}")
        await late.open()
        with frozen(private.pids):  # type: ignore[attr-defined]
            outcome = await _each_within_deadline(
                f"{private.kind} frozen server", managers, ops, TIMEOUT + MARGIN
            )
            wrapped = await timed(asyncio.wait_for(late.get("frozen-get"), TIMEOUT))
        for name, (_, error) in outcome.items():
            if name == "open":
                assert error is None  # already open: nothing to do
                continue
            assert isinstance(error, BackendTimeoutError), f"{name}: {error!r}"
        assert wrapped[0] < TIMEOUT + MARGIN and isinstance(wrapped[1], asyncio.TimeoutError)
        # The same managers, not recreated, work again once the server is back.
        for manager in managers.values():
            await _recovers(manager, "frozen-get", within=15)
        await _recovers(late, "frozen-get", within=15)
        assert await managers["update"].update("frozen-update", _noop) is not None
    finally:
        await asyncio.gather(*(m.close() for m in [*managers.values(), late]))


# -- engine-specific timeouts shorter than the deadline -------------------------------------


async def test_mongo_connect_timeout_bounds_finding_a_server(silent: SilentServer) -> None:
    url = SILENT_URLS["mongo"].format(port=silent.port)
    manager = connect(url, timeout=30, connect_timeout=0.5)
    try:
        took, error = await timed(manager.get("s"))
    finally:
        await manager.close()
    assert isinstance(error, BackendTimeoutError), repr(error)
    assert took < 0.5 + MARGIN, f"connect_timeout=0.5 but the call took {took:.2f} s"
    DEADLINES.append(("mongo silent server, connect_timeout=0.5 (timeout 30)", 0.5, took, 1))


async def test_redis_socket_timeout_bounds_each_reply(silent: SilentServer) -> None:
    url = SILENT_URLS["redis"].format(port=silent.port)
    manager = connect(url, timeout=30, socket_timeout=0.3, connect_timeout=0.3, retries=1)
    try:
        took, error = await timed(manager.get("s"))
    finally:
        await manager.close()
    assert isinstance(error, BackendTimeoutError), repr(error)
    # Two attempts (retries=1) of at most 0.3 s each, well inside the 30 s deadline.
    assert took < 2 * 0.3 + MARGIN, f"the call took {took:.2f} s"
    DEADLINES.append(
        ("redis silent server, socket_timeout=0.3, retries=1 (timeout 30)", 0.6, took, 1)
    )
