"""`LoopLock` and `PerLoop`: the pieces that let one manager serve every event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
from agentsessions.backend import LoopLock, PerLoop

THREADS = 6
TIMEOUT = 30.0


def _in_threads(count: int, target: object) -> None:
    threads = [
        threading.Thread(target=target, args=(i,), daemon=True)  # type: ignore[arg-type]
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "a thread hung"


def test_loop_lock_excludes_across_threads_and_loops() -> None:
    lock = LoopLock()
    inside = 0
    most = 0
    entered = 0

    async def work() -> None:
        nonlocal inside, most, entered
        for _ in range(20):
            async with lock:
                inside += 1
                most = max(most, inside)
                await asyncio.sleep(0)  # let another thread try to get in
                inside -= 1
                entered += 1

    _in_threads(THREADS, lambda i: asyncio.run(asyncio.wait_for(work(), TIMEOUT)))
    assert most == 1
    assert entered == THREADS * 20
    assert not lock.locked()


def test_a_cancelled_waiter_passes_its_turn_on() -> None:
    async def main() -> None:
        lock = LoopLock()
        await lock.acquire()
        first = asyncio.create_task(lock.acquire())
        second = asyncio.create_task(lock.acquire())
        await asyncio.sleep(0)
        first.cancel()
        lock.release()
        await asyncio.wait_for(second, TIMEOUT)
        assert first.cancelled()
        assert lock.locked()
        lock.release()
        assert not lock.locked()

    asyncio.run(main())


def test_release_of_a_free_lock_is_an_error() -> None:
    with pytest.raises(RuntimeError):
        LoopLock().release()


class _Resources:
    """Records what was opened and closed in which loop."""

    def __init__(self) -> None:
        self.opened: list[asyncio.AbstractEventLoop] = []
        self.closed: list[asyncio.AbstractEventLoop] = []
        self.dropped: list[asyncio.AbstractEventLoop] = []
        self.per_loop = PerLoop(self.open, self.close, self.dropped.append)

    async def open(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        self.opened.append(loop)
        return loop

    async def close(self, value: asyncio.AbstractEventLoop) -> None:
        assert value is asyncio.get_running_loop(), "closed outside its own loop"
        self.closed.append(value)


def test_each_loop_gets_its_own_and_releases_it_when_asyncio_run_ends() -> None:
    resources = _Resources()

    async def use() -> None:
        first = await resources.per_loop.get()
        assert await resources.per_loop.get() is first
        assert resources.per_loop.current() is first

    for _ in range(3):
        asyncio.run(use())
    assert len(set(resources.opened)) == 3
    assert resources.closed == resources.opened
    assert len(resources.per_loop) == 0


def test_a_loop_closed_without_shutdown_is_dropped_on_next_use() -> None:
    resources = _Resources()
    loop = asyncio.new_event_loop()
    loop.run_until_complete(resources.per_loop.get())
    loop.close()  # no shutdown_asyncgens: the resource cannot be closed in its loop
    asyncio.run(resources.per_loop.get())
    assert resources.dropped == [loop]
    assert loop not in resources.closed


def test_aclose_releases_other_threads_running_loops_in_those_loops() -> None:
    resources = _Resources()
    started = threading.Barrier(THREADS + 1, timeout=TIMEOUT)
    finish = threading.Event()

    def hold(index: int) -> None:
        async def main() -> None:
            await resources.per_loop.get()
            started.wait()
            await asyncio.to_thread(finish.wait, TIMEOUT)

        asyncio.run(asyncio.wait_for(main(), TIMEOUT))

    threads = [threading.Thread(target=hold, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    started.wait()

    async def close_all() -> None:
        await resources.per_loop.get()
        await resources.per_loop.aclose()

    asyncio.run(close_all())
    finish.set()
    for thread in threads:
        thread.join(TIMEOUT)
    assert len(resources.opened) == THREADS + 1
    assert sorted(map(id, resources.closed)) == sorted(map(id, resources.opened))
    assert resources.dropped == []

    async def after() -> None:
        with pytest.raises(RuntimeError):
            await resources.per_loop.get()

    asyncio.run(after())


def test_aclose_releases_an_idle_loops_resource_in_that_loop() -> None:
    resources = _Resources()
    idle = asyncio.new_event_loop()  # as Runner.run_sync leaves its default loop: open
    try:
        idle.run_until_complete(resources.per_loop.get())

        async def close_all() -> None:
            await resources.per_loop.aclose()

        asyncio.run(close_all())
        assert resources.closed == [idle]
        assert resources.dropped == []
    finally:
        idle.close()
