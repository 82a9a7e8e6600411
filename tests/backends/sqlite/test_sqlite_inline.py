"""A blocking caller that runs the loop itself (`DrivenLoop`) runs SQLite calls inline.

Its thread waits for the call anyway, so when nothing else is in flight on the
connection the transaction runs in that thread, with no crossing to the connection's
thread and back; everything else still goes through the connection thread, and the
two never use the connection at once (`Link.turn`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import agentsessions
import pytest
from agentsessions import Session
from agentsessions._driven import DrivenLoop, in_driven_loop
from agentsessions_sqlite import SQLiteSessionManager

#: Every wait here is bounded: a broken path fails the test, never hangs it.
BOUND = 30.0


def _thread(conn: sqlite3.Connection) -> int:
    return threading.get_ident()


@pytest.fixture
def driven() -> Iterator[DrivenLoop]:
    loop = DrivenLoop()
    yield loop
    loop.close()


@pytest.fixture
def manager(tmp_path: Path, driven: DrivenLoop) -> Iterator[SQLiteSessionManager]:
    found = agentsessions.connect(f"sqlite:///{tmp_path}/inline.db")
    assert isinstance(found, SQLiteSessionManager)
    driven.run(found.open())
    yield found
    driven.run(found.close())


def test_only_a_driven_loop_counts(driven: DrivenLoop) -> None:
    async def check() -> bool:
        return in_driven_loop()

    assert driven.run(check()) is True, "a DrivenLoop's call must see in_driven_loop()"
    assert asyncio.run(check()) is False, "asyncio.run's loop must not count as driven"
    assert in_driven_loop() is False, "no running loop must not count as driven"


def test_a_blocking_callers_call_runs_in_its_own_thread(
    manager: SQLiteSessionManager, driven: DrivenLoop
) -> None:
    here = threading.get_ident()
    assert driven.run(manager._writer.call(_thread)) == here, (
        "through a DrivenLoop with nothing in flight, a writer call must run inline in "
        "the caller's thread"
    )
    assert driven.run(manager._reader.read(_thread)) == here, (
        "through a DrivenLoop with nothing in flight, a read must run inline in the caller's thread"
    )
    session = driven.run(manager.create("inline"))
    session.add_event("user", "hello")
    driven.run(manager.save(session))
    loaded = driven.run(manager.get("inline"))
    assert loaded is not None and [e.content for e in loaded.events] == ["hello"], (
        f"a save and a get run inline must store and load the event, found {loaded!r}"
    )


def test_an_async_callers_call_still_crosses_to_the_connection_thread(
    tmp_path: Path,
) -> None:
    async def run() -> int:
        found = agentsessions.connect(f"sqlite:///{tmp_path}/async.db")
        assert isinstance(found, SQLiteSessionManager)
        async with found:
            return await found._writer.call(_thread)

    assert asyncio.run(run()) != threading.get_ident(), (
        "an application's own loop must never have SQLite run on it: the call must "
        "cross to the connection thread"
    )


def test_with_a_call_in_flight_the_next_one_waits_its_turn_in_the_thread(
    manager: SQLiteSessionManager, driven: DrivenLoop
) -> None:
    """A call of another loop holds the connection thread: the blocking caller's call
    must not run inline beside it, but after it, in the connection thread."""
    release = threading.Event()
    started = threading.Event()
    ran_in: list[int] = []

    def hold(conn: sqlite3.Connection) -> None:
        started.set()
        release.wait(BOUND)
        ran_in.append(threading.get_ident())

    elsewhere = threading.Thread(target=lambda: asyncio.run(manager._writer.call(hold)))
    elsewhere.start()
    try:
        assert started.wait(BOUND), "the other loop's call never started"

        async def second() -> tuple[bool, int]:
            task = asyncio.ensure_future(manager._writer.call(_thread))
            await asyncio.sleep(0.05)
            early = task.done()
            release.set()
            return early, await asyncio.wait_for(task, BOUND)

        early, thread = driven.run(second())
    finally:
        release.set()
        elsewhere.join(BOUND)
    assert not early, (
        "a call made while another loop's call holds the connection must wait for it, "
        "not run inline beside it"
    )
    assert thread != threading.get_ident() and ran_in == [thread], (
        "with a call in flight, the blocking caller's call must run after it in the "
        f"connection thread ({ran_in}), not inline in the caller's ({thread})"
    )


def test_blocking_and_async_callers_together_lose_no_update(
    manager: SQLiteSessionManager, driven: DrivenLoop
) -> None:
    """Two blocking threads on the DrivenLoop and an application loop in a third thread
    update one session at once: inline calls and the connection thread take turns, so
    every update lands once."""
    driven.run(manager.create("shared"))
    rounds = 40

    def bump(session: Session) -> None:
        session.state["n"] = session.state.get("n", 0) + 1

    def blocking() -> None:
        for _ in range(rounds):
            driven.run(manager.update("shared", bump, group=False))

    def on_its_own_loop() -> None:
        async def run() -> None:
            for _ in range(rounds):
                await manager.update("shared", bump, group=False)

        asyncio.run(run())

    threads = [threading.Thread(target=blocking) for _ in range(2)]
    threads.append(threading.Thread(target=on_its_own_loop))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BOUND * 4)
    assert not any(thread.is_alive() for thread in threads), "the updates did not finish"
    stored = driven.run(manager.get("shared"))
    assert stored is not None and stored.state.get("n") == 3 * rounds, (
        f"every one of the {3 * rounds} updates must land once: found state "
        f"{None if stored is None else stored.state}"
    )
