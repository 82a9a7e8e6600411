"""`DrivenLoop`: blocking callers run one persistent event loop themselves, in turn."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncGenerator, Iterator

import pytest
from agentsessions._driven import DrivenLoop

#: Every wait in these tests is bounded: a broken loop fails them, never hangs them.
BOUND = 10.0


@pytest.fixture
def driven() -> Iterator[DrivenLoop]:
    loop = DrivenLoop()
    yield loop
    loop.close()


def test_a_call_runs_in_the_callers_thread_on_one_persistent_loop(driven: DrivenLoop) -> None:
    async def where() -> tuple[int, asyncio.AbstractEventLoop]:
        await asyncio.sleep(0)
        return threading.get_ident(), asyncio.get_running_loop()

    first_thread, first_loop = driven.run(where())
    second_thread, second_loop = driven.run(where())
    assert first_thread == second_thread == threading.get_ident(), (
        "a blocking call must run in its caller's thread, not cross to another"
    )
    assert first_loop is second_loop is driven.loop, (
        "every call must run on the same loop, so per-loop connections stay open"
    )


def test_results_and_exceptions_reach_the_caller_unchanged(driven: DrivenLoop) -> None:
    class Refused(Exception):
        pass

    async def fail() -> None:
        raise Refused("no")

    async def answer() -> int:
        return 42

    with pytest.raises(Refused, match="no"):
        driven.run(fail())
    assert driven.run(answer()) == 42, "the loop must stay usable after a call raised"


def test_many_threads_calling_at_once_all_get_their_own_result(driven: DrivenLoop) -> None:
    async def echo(value: int) -> int:
        for _ in range(3):
            await asyncio.sleep(0.001)
        return value

    def caller(base: int) -> list[int]:
        return [driven.run(echo(base + index)) for index in range(25)]

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        futures = [pool.submit(caller, 1000 * n) for n in range(16)]
        results = [future.result(timeout=BOUND) for future in futures]
    for n, got in enumerate(results):
        assert got == [1000 * n + index for index in range(25)], (
            f"caller {n} got another caller's results: {got[:5]}..."
        )


def test_a_short_call_does_not_wait_for_a_long_one_running_the_loop(driven: DrivenLoop) -> None:
    # The long call ends only after the short one has returned to its caller: if the
    # short caller had to wait for the thread running the loop to leave, neither ends.
    short_returned = threading.Event()

    async def long_call() -> str:
        for _ in range(int(BOUND / 0.01)):
            if short_returned.is_set():
                return "long"
            await asyncio.sleep(0.01)
        return "the short call never returned while the long one ran the loop"

    async def short_call() -> str:
        await asyncio.sleep(0.01)
        return "short"

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        long_future = pool.submit(driven.run, long_call())
        for _ in range(int(BOUND / 0.001)):  # until the long call runs the loop
            if driven.loop.is_running():
                break
            threading.Event().wait(0.001)
        assert driven.run(short_call()) == "short"
        short_returned.set()
        assert long_future.result(timeout=BOUND) == "long"


def test_a_pending_call_is_taken_over_when_the_running_caller_leaves(driven: DrivenLoop) -> None:
    # The quick caller runs the loop first and returns; the slow call, still pending,
    # must then be run by its own caller.
    quick_returned = threading.Event()
    slow_started = threading.Event()

    async def slow_call() -> int:
        slow_started.set()
        for _ in range(int(BOUND / 0.01)):
            if quick_returned.is_set():
                return threading.get_ident()
            await asyncio.sleep(0.01)
        raise AssertionError("the quick caller never returned")

    async def quick_call() -> None:
        for _ in range(int(BOUND / 0.001)):
            if slow_started.is_set():
                return
            await asyncio.sleep(0.001)

    with concurrent.futures.ThreadPoolExecutor(1) as pool:

        def run_slow() -> tuple[int, int]:
            return threading.get_ident(), driven.run(slow_call())

        slow_future = pool.submit(run_slow)
        driven.run(quick_call())
        quick_returned.set()
        slow_caller, ran_in = slow_future.result(timeout=BOUND)
    assert ran_in in {slow_caller, threading.get_ident()}


async def test_a_caller_inside_another_running_loop_is_served(driven: DrivenLoop) -> None:
    async def where() -> asyncio.AbstractEventLoop:
        return asyncio.get_running_loop()

    here = asyncio.get_running_loop()
    assert driven.run(where()) is driven.loop is not here


def test_a_blocking_call_from_the_loop_itself_is_refused(driven: DrivenLoop) -> None:
    async def inner() -> None:
        return None

    async def nested() -> str:
        coro = inner()
        try:
            driven.run(coro)
        except RuntimeError as exc:
            return str(exc)
        return "accepted"

    assert "cannot be made from the loop it waits for" in driven.run(nested())


def test_close_releases_what_the_loop_holds_and_refuses_later_calls() -> None:
    driven = DrivenLoop()
    released = threading.Event()

    async def resource() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            released.set()

    held = resource()

    async def open_it() -> None:
        await held.asend(None)

    driven.run(open_it())
    driven.close()
    assert released.is_set(), "close must finalise the loop's async generators in the loop"
    assert driven.loop.is_closed()

    async def later() -> None:
        return None

    with pytest.raises(RuntimeError, match="closed"):
        driven.run(later())


async def test_close_from_async_code_works() -> None:
    driven = DrivenLoop()

    async def ping() -> str:
        return "pong"

    assert driven.run(ping()) == "pong"
    driven.close()
    assert driven.loop.is_closed()
