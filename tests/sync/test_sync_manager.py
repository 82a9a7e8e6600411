"""`agentsessions.sync`: the manager's contract without an event loop, on every backend.

These are the conformance kit's clauses that make sense for blocking code (create,
read back, conflicts, errors, ownership, listing, deletion, races between threads),
plus what only a blocking API has to get right: plain threads with no loop of their
own, a caller that already runs a loop, closing, and a program that never closes.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from agentsessions import (
    Event,
    InvalidSessionIdError,
    ManagerClosedError,
    Session,
    SessionConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionSerializationError,
    installed_backends,
)
from agentsessions import connect as connect_async
from agentsessions.sync import SyncSessionManager, connect
from backend_params import BACKENDS, with_option

THREADS = 8
UPDATES_PER_THREAD = 3
TIMEOUT = 60.0


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _url_of(request.param, request, tmp_path)


@pytest.fixture(params=BACKENDS[1:])
def persistent_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every backend whose data outlives the process (all but memory)."""
    return _url_of(request.param, request, tmp_path)


def _url_of(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    namespace = f"sync_{uuid.uuid4().hex[:16]}"
    if kind == "memory":
        return f"memory://sync-{namespace}"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'sessions.db'}"
    found: str = request.getfixturevalue(f"{kind}_url")
    if found.partition("://")[0] not in installed_backends():
        pytest.fail(f"no backend serves {found.partition('://')[0]}://")
    return with_option(found, "namespace", namespace)


@pytest.fixture
def manager(url: str) -> Iterator[SyncSessionManager]:
    with connect(url) as opened:
        try:
            yield opened
        finally:
            _drop_everything(opened)


def _drop_everything(manager: SyncSessionManager) -> None:
    for _ in range(100):
        page = manager.list_sessions(limit=1000)
        if not page.items:
            return
        for summary in page.items:
            manager.delete(summary.session_id)


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """*work(i)* in *count* plain threads (no event loop) started together."""
    results: list[Any] = [None] * count
    start = threading.Barrier(count, timeout=TIMEOUT)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = work(index)
        except BaseException as exc:  # reported to the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "a thread calling the sync API hung"
    return results


def test_round_trip_seen_by_a_fresh_manager(manager: SyncSessionManager) -> None:
    session = manager.create("s1", "ada", state={"step": 1})
    assert session.version == 1
    session.add_event("user", "hello", metadata={"lang": "en"})
    session.add_event("assistant", {"text": "hi"})
    manager.save(session)
    assert session.version == 2
    with manager.with_options() as fresh:
        stored = fresh.get("s1", user_id="ada")
        assert stored is not None
        assert stored.model_dump() == session.model_dump()
        tail = fresh.get("s1", last_events=1)
        assert tail is not None and [e.content for e in tail.events] == [{"text": "hi"}]


def test_the_async_managers_errors_unchanged(manager: SyncSessionManager) -> None:
    manager.create("taken")
    with pytest.raises(SessionExistsError):
        manager.create("taken")
    first = manager.get("taken")
    second = manager.get("taken")
    assert first is not None and second is not None
    first.add_event("user", "first")
    manager.save(first)
    second.add_event("user", "second")
    with pytest.raises(SessionConflictError):
        manager.save(second)
    stored = manager.get("taken")
    assert stored is not None and [e.content for e in stored.events] == ["first"]
    with pytest.raises(InvalidSessionIdError):
        manager.get("")
    with pytest.raises(SessionSerializationError):
        manager.create("bad-state", state={"x": object()})
    assert manager.get("bad-state") is None
    manager.delete("taken")
    with pytest.raises(SessionNotFoundError):
        manager.save(stored)
    with pytest.raises(SessionNotFoundError):
        manager.update("never", lambda s: None)


def test_ownership_listing_and_deletion(manager: SyncSessionManager) -> None:
    for index in range(5):
        manager.create(f"a{index}", "ada")
    manager.create("b0", "bob")
    with pytest.raises(SessionOwnershipError):
        manager.get("b0", user_id="ada")
    seen: list[str] = []
    cursor = None
    for _ in range(10):
        page = manager.list_sessions(user_id="ada", limit=2, cursor=cursor)
        seen.extend(item.session_id for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            break
    assert sorted(seen) == [f"a{i}" for i in range(5)]
    assert manager.delete_user("ada") == 5
    assert manager.delete("b0") is True
    assert manager.delete("b0") is False
    assert manager.list_sessions().items == []


def test_session_block_saves_on_exit(manager: SyncSessionManager) -> None:
    with manager.session("ctx", user_id="ada") as session:
        session.state["seen"] = True
        session.add_event("user", "inside")
    stored = manager.get("ctx")
    assert stored is not None
    assert stored.state == {"seen": True}
    assert [e.content for e in stored.events] == ["inside"]


def test_plain_threads_update_one_session_and_nothing_is_lost(
    manager: SyncSessionManager,
) -> None:
    manager.create("shared", state={"count": 0})

    def writer(thread: int) -> None:
        for round_ in range(UPDATES_PER_THREAD):

            def add(session: Session, label: str = f"t{thread}-{round_}") -> None:
                session.events.append(Event(author="user", content=label))
                session.state["count"] += 1

            manager.update("shared", add)

    results = _in_threads(THREADS, writer)
    assert [r for r in results if r is not None] == []
    stored = manager.get("shared")
    assert stored is not None
    expected = THREADS * UPDATES_PER_THREAD
    assert len(stored.events) == expected, f"{len(stored.events)} of {expected} updates landed"
    assert stored.state == {"count": expected}
    assert stored.version == 1 + expected


def test_of_racing_creates_from_threads_exactly_one_wins(manager: SyncSessionManager) -> None:
    results = _in_threads(THREADS, lambda i: manager.create("race", state={"writer": i}))
    winners = [r for r in results if isinstance(r, Session)]
    assert len(winners) == 1
    assert all(isinstance(r, SessionExistsError) for r in results if r is not winners[0])
    stored = manager.get("race")
    assert stored is not None and stored.state == winners[0].state


def test_callable_from_inside_a_running_event_loop(manager: SyncSessionManager) -> None:
    async def caller() -> int:
        # asyncio.run() would refuse here; the sync API runs on its own loop.
        session = manager.get_or_create("from-async")
        session.add_event("user", "x")
        manager.save(session)
        return session.version

    assert asyncio.run(caller()) == 2


def test_async_code_shares_the_same_manager(manager: SyncSessionManager) -> None:
    manager.create("both")

    async def read() -> int:
        stored = await manager.manager.get("both")
        assert stored is not None
        return stored.version

    assert asyncio.run(read()) == 1


def test_close_stops_the_thread_and_refuses_further_use(url: str) -> None:
    manager = connect(url)
    manager.create(f"closing-{uuid.uuid4().hex}")
    assert any(t.name.startswith("agentsessions-sync") for t in threading.enumerate())
    manager.close()
    manager.close()
    assert not any(t.name == f"agentsessions-sync {manager.url}" for t in threading.enumerate()), (
        "the loop thread outlived close()"
    )
    with pytest.raises(ManagerClosedError):
        manager.get("anything")
    with pytest.raises(InvalidSessionIdError):  # input is judged first, as in async code
        manager.get("")


def test_same_error_types_as_the_async_manager(url: str) -> None:
    bad_calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("get", ("",), {}),
        ("get", ("x",), {"last_events": -1}),
        ("create", ("x",), {"state": []}),
        ("list_sessions", (), {"limit": 0}),
        ("list_sessions", (), {"cursor": "not-a-cursor"}),
        ("save", ("not a session",), {}),
    ]
    with connect(url) as sync_manager:

        async def async_errors() -> list[type[BaseException]]:
            found = []
            async with connect_async(url) as async_manager:
                for name, args, kwargs in bad_calls:
                    with pytest.raises(Exception) as caught:
                        await getattr(async_manager, name)(*args, **kwargs)
                    found.append(caught.type)
            return found

        expected = asyncio.run(async_errors())
        for (name, args, kwargs), error in zip(bad_calls, expected, strict=True):
            with pytest.raises(Exception) as caught:
                getattr(sync_manager, name)(*args, **kwargs)
            assert caught.type is error, f"{name}{args}: {caught.type} != {error}"


_SCRIPT = """
import sys
from agentsessions.sync import connect

manager = connect(sys.argv[1])
session = manager.get_or_create("script")
session.add_event("user", "from a script")
manager.save(session)
print(session.version, flush=True)
# No close(): the program just ends.
"""


def test_a_script_that_never_closes_exits_with_its_save(persistent_url: str) -> None:
    url = persistent_url
    for expected_version in (2, 3):
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, url], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == str(expected_version)
    with connect(url) as manager:
        stored = manager.get("script")
        assert stored is not None
        assert [e.content for e in stored.events] == ["from a script"] * 2
        manager.delete("script")


def test_the_documented_example_runs_as_written(persistent_url: str, tmp_path: Path) -> None:
    text = (Path(__file__).parents[2] / "docs" / "sync.md").read_text()
    example = text.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "example.py"
    script.write_text(example)
    done = subprocess.run(
        [sys.executable, str(script), persistent_url],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "20 requests, 20 events"


def test_a_call_in_flight_when_closing_is_told_the_manager_closed() -> None:
    manager = connect("memory://")
    manager.open()
    outcome: list[BaseException | None] = []

    def slow_call() -> None:
        try:
            manager._run(asyncio.sleep(TIMEOUT))  # stands in for a slow round trip
            outcome.append(None)
        except BaseException as exc:  # reported to the test
            outcome.append(exc)

    caller = threading.Thread(target=slow_call, daemon=True)
    caller.start()
    for _ in range(1000):  # until the call is running on the loop (bounded)
        runner = manager._runner
        if runner is not None and len(asyncio.all_tasks(runner.loop)) > 0:
            break
        threading.Event().wait(0.005)
    manager.close()
    caller.join(TIMEOUT)
    assert not caller.is_alive(), "a call in flight hung when the manager closed"
    assert len(outcome) == 1 and isinstance(outcome[0], ManagerClosedError)


def test_compaction_blocking(manager: SyncSessionManager) -> None:
    session = manager.create("compacted")
    for index in range(10):
        session.add_event("user", index)
    manager.save(session)
    tail = manager.get("compacted", last_events=3)
    assert tail is not None
    summary = Event(author="summarizer", content="0 to 7")
    manager.compact(tail, tail.events[0].id, [summary], archive=True)
    stored = manager.get("compacted")
    assert stored is not None
    assert [event.content for event in stored.events] == ["0 to 7", 8, 9]
    assert [event.content for event in manager.archived_events("compacted")] == list(range(8))
