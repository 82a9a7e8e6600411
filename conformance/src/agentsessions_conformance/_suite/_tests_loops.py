"""One manager, many event loops: sequential ``asyncio.run`` calls and threads with their own.

A sync web framework runs ``asyncio.run()`` per request, and a worker pool gives each
thread its own loop; all of them share the application's one manager. Each loop here
runs in a thread of its own (the test's loop keeps running meanwhile, so a lock handed
across loops is never waiting on a blocked one), and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agentsessions import ManagerClosedError, Session, SessionExistsError, SessionManager

from ._base import SuiteBase

THREADS = 8
UPDATES_PER_THREAD = 3
#: Generous (a thread's work is a few round trips), and inside the kit's per-clause limit.
THREAD_TIMEOUT = 20.0


async def in_own_loops(*work: Callable[[], Awaitable[Any]]) -> list[Any]:
    """Run each of *work* under ``asyncio.run`` in a thread of its own, all at once.

    Returns each one's result, or the exception it raised; fails the test when one is
    still running after `THREAD_TIMEOUT` (its daemon thread is then abandoned).
    """
    results: list[Any] = [None] * len(work)
    start = threading.Barrier(len(work), timeout=THREAD_TIMEOUT)

    def run(index: int) -> None:
        async def bounded() -> Any:
            return await asyncio.wait_for(work[index](), THREAD_TIMEOUT)

        try:
            start.wait()
            results[index] = asyncio.run(bounded())
        except BaseException as exc:  # reported to the test
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(work))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + THREAD_TIMEOUT + 5
    while any(thread.is_alive() for thread in threads):
        assert time.monotonic() < deadline, "a thread with its own event loop hung"
        await asyncio.sleep(0.005)
    return results


def raised(results: list[Any]) -> list[BaseException]:
    return [r for r in results if isinstance(r, BaseException)]


class LoopTests(SuiteBase):
    async def test_loops_in_sequence_share_one_manager(self, manager: SessionManager) -> None:
        """Loops one after another (asyncio.run() per request) share the manager; all saves land."""
        session_id = self.new_id()

        async def first() -> None:
            session = await manager.create(session_id, state={"step": 1})
            session.add_event("user", "from the first loop")
            await manager.save(session)

        async def second() -> int:
            session = await manager.get(session_id)
            assert session is not None, "the second loop does not see the first loop's save"
            session.add_event("user", "from the second loop")
            session.state["step"] = 2
            await manager.save(session)
            return len(session.events)

        # One loop after another, each closed before the next starts, as a sync web
        # framework's asyncio.run() per request does.
        for step in (first, second):
            (outcome,) = await in_own_loops(step)
            assert not isinstance(outcome, BaseException), f"{step.__name__}: {outcome!r}"
        # ... and the loop the manager was opened in still works afterwards.
        stored = await manager.get(session_id)
        assert stored is not None, (
            f"get({session_id!r}) in the manager's own loop returned None after two other "
            "loops created and saved the session: the manager must keep working there"
        )
        assert [e.content for e in stored.events] == [
            "from the first loop",
            "from the second loop",
        ], (
            "save() from two loops in sequence must both land: expected the events "
            "['from the first loop', 'from the second loop'], found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        assert stored.state == {"step": 2}, (
            "the second loop's save() must land its state: expected {'step': 2}, found "
            f"{stored.state!r}"
        )
        assert stored.version == 3, (
            "create() then save() in one loop and save() in the next must leave version 3: "
            f"found version {stored.version}"
        )
        reread = await self.readback(manager, session_id)
        assert reread is not None and reread.version == 3, (
            f"get({session_id!r}) (read-back) after saves from two loops must find version 3: "
            f"found {'None' if reread is None else f'version {reread.version}'}"
        )

    async def test_loops_each_new_one_after_the_last_closed(self, manager: SessionManager) -> None:
        """Each new loop, after the last one closed, updates through the same manager."""
        session_id = self.new_id()
        await manager.create(session_id)
        rounds = 4

        async def append(number: int) -> None:
            def add(session: Session) -> None:
                session.add_event("user", f"round {number}")

            await manager.update(session_id, add)

        for number in range(rounds):
            (outcome,) = await in_own_loops(functools.partial(append, number))
            assert not isinstance(outcome, BaseException), f"round {number}: {outcome!r}"
        stored = await manager.get(session_id)
        assert stored is not None, (
            f"get({session_id!r}) in the manager's own loop returned None after update() from "
            f"{rounds} loops in turn: the session must still be found"
        )
        assert [e.content for e in stored.events] == [f"round {n}" for n in range(rounds)], (
            f"update() from {rounds} loops, one after another, must each land its event in "
            f"order: expected 'round 0'..'round {rounds - 1}', found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )

    async def test_loops_in_threads_update_one_session(self, manager: SessionManager) -> None:
        """Threads with their own loops update() one session at once: every update lands."""
        session_id = self.new_id()
        await manager.create(session_id, state={"count": 0})

        async def writer(thread: int) -> None:
            for round_ in range(UPDATES_PER_THREAD):

                async def add(session: Session, label: str = f"t{thread}-{round_}") -> None:
                    session.add_event("user", label)
                    session.state["count"] += 1
                    # Other threads get to save between this load and its save, so a
                    # backend that loses concurrent saves is caught losing them.
                    await asyncio.sleep(0.002)

                await manager.update(session_id, add)

        results = await in_own_loops(*(lambda t=t: writer(t) for t in range(THREADS)))
        assert not raised(results), f"updates from threads failed: {raised(results)[:3]!r}"
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None after update() from {THREADS} "
            "threads: the session must still be found"
        )
        expected = THREADS * UPDATES_PER_THREAD
        landed = sorted(str(e.content) for e in stored.events)
        assert len(landed) == expected, f"{len(landed)} of {expected} updates landed"
        assert landed == sorted(
            f"t{t}-{r}" for t in range(THREADS) for r in range(UPDATES_PER_THREAD)
        ), (
            f"update() from {THREADS} threads must land each thread's event exactly once "
            f"(t0-0..t{THREADS - 1}-{UPDATES_PER_THREAD - 1}): found {landed[:8]!r}"
        )
        assert stored.state == {"count": expected}, (
            f"{expected} update() calls each incrementing state['count'] must leave "
            f"{{'count': {expected}}}: found {stored.state!r} (updates lost or applied twice)"
        )
        assert stored.version == 1 + expected, (
            f"create() then {expected} update() calls must leave version {1 + expected}: found "
            f"version {stored.version}"
        )

    async def test_loops_in_threads_race_one_create(self, manager: SessionManager) -> None:
        """Of creates of one id from threads with their own loops exactly one wins."""
        session_id = self.new_id()

        async def create(thread: int) -> Session:
            return await manager.create(session_id, state={"writer": thread})

        results = await in_own_loops(*(lambda t=t: create(t) for t in range(THREADS)))
        winners = [r for r in results if isinstance(r, Session)]
        losers = [r for r in results if isinstance(r, SessionExistsError)]
        assert len(winners) == 1, f"{len(winners)} of {THREADS} creates from threads succeeded"
        assert len(losers) == THREADS - 1, f"unexpected outcomes: {results!r}"
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.state == winners[0].state, (
            f"of {THREADS} create({session_id!r}) calls from threads, the stored session must "
            f"be the winner's, state {winners[0].state!r}: found "
            f"{'None' if stored is None else f'state {stored.state!r}'}"
        )

    async def test_loops_close_from_one_closes_all(self, manager: SessionManager) -> None:
        """close() in one loop closes the manager for every loop (ManagerClosedError)."""
        other = manager.with_options()
        self._variants.append((other, False))
        session_id = self.new_id()
        await other.create(session_id)

        async def touch() -> None:
            assert await other.get(session_id) is not None, (
                f"get({session_id!r}) from another loop returned None: the session the "
                "manager created must be found from every loop"
            )

        # Loops that are gone, and the test's own: the close releases them all.
        outcomes = await in_own_loops(touch, touch)
        assert not raised(outcomes), raised(outcomes)
        await other.close()

        async def after_close() -> None:
            await other.get(session_id)

        (outcome,) = await in_own_loops(after_close)
        assert isinstance(outcome, ManagerClosedError), (
            f"a closed manager used from another loop gave {outcome!r}, not ManagerClosedError"
        )
        try:
            await other.get(session_id)
        except ManagerClosedError:
            pass
        else:
            raise AssertionError("a closed manager still answers in its own loop")
