"""Using one manager from any event loop and any thread.

Network drivers (asyncpg, redis-py, pymongo) bind their sockets, futures and pools to
the event loop that opened them: used from another loop they fail with "attached to a
different loop", or worse. `PerLoop` gives each event loop its own connection resource,
opened lazily on that loop's first call and released on that loop, gracefully, when the
loop shuts down (``asyncio.run`` and ``asyncio.Runner`` finalise async generators
before closing the loop, and `PerLoop` hooks in there). `LoopLock` is a lock that any
loop in any thread may wait on, where an ``asyncio.Lock`` belongs to one loop;
`KeyedLoopLock`, one such lock per key.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from types import TracebackType
from typing import Generic, TypeVar

__all__ = ["KeyedLoopLock", "LoopLock", "PerLoop"]

T = TypeVar("T")

#: How long closing one loop's resource may take, unless told otherwise, before it is
#: dropped without a goodbye to the server (a server that stopped answering).
CLOSE_TIMEOUT = 10.0


class LoopLock:
    """A mutual-exclusion lock for coroutines of any event loop, in any thread.

    ``async with lock:`` as with ``asyncio.Lock``; waiters are served first come, first
    served, and a cancelled waiter gives up its turn without taking the lock.
    """

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locked = False
        self._waiters: collections.deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = (
            collections.deque()
        )

    def locked(self) -> bool:
        """Whether some task, in any event loop, holds the lock."""
        return self._locked

    async def acquire(self) -> None:
        """Wait, without blocking the event loop, until this task holds the lock."""
        loop = asyncio.get_running_loop()
        with self._mutex:
            if not self._locked and not self._waiters:
                self._locked = True
                return
            future: asyncio.Future[None] = loop.create_future()
            self._waiters.append((loop, future))
        try:
            await future
        except BaseException:
            with self._mutex:
                if future.done() and not future.cancelled():
                    # Handed the lock just as we were cancelled: pass it on.
                    self._release_locked()
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove((loop, future))
            raise

    def release(self) -> None:
        """Hand the lock to the next waiter (in whatever loop it waits), or free it."""
        with self._mutex:
            if not self._locked:
                raise RuntimeError("LoopLock released while not held")
            self._release_locked()

    def _release_locked(self) -> None:
        # The lock passes straight to the next live waiter, so it is never seen free
        # by a newcomer in between.
        while self._waiters:
            loop, future = self._waiters.popleft()
            try:
                loop.call_soon_threadsafe(self._hand_over, future)
            except RuntimeError:  # that waiter's loop is closed: it will never run
                continue
            return
        self._locked = False

    def _hand_over(self, future: asyncio.Future[None]) -> None:
        # Runs in the waiter's loop, so it never interleaves with the waiter's own
        # cancellation handling: a waiter cancelled before this ran has left, and the
        # lock goes on to the next one.
        if future.cancelled():
            with self._mutex:
                self._release_locked()
        elif not future.done():
            future.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class KeyedLoopLock:
    """A `LoopLock` per key, made on first use and dropped when nobody holds or awaits
    it: ``async with locks.hold(key):`` excludes every other holder of *key*."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self._locks: dict[Hashable, tuple[LoopLock, list[int]]] = {}

    def __len__(self) -> int:
        """How many keys are held or awaited now."""
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def hold(self, key: Hashable) -> AsyncIterator[None]:
        with self._mutex:
            entry = self._locks.get(key)
            if entry is None:
                entry = self._locks[key] = (LoopLock(), [0])
            entry[1][0] += 1
        try:
            async with entry[0]:
                yield
        finally:
            with self._mutex:
                entry[1][0] -= 1
                if not entry[1][0]:
                    del self._locks[key]


@dataclass(eq=False)
class _Entry(Generic[T]):
    loop: asyncio.AbstractEventLoop
    opening: asyncio.Lock = field(default_factory=asyncio.Lock)
    value: T | None = None
    ready: bool = False
    released: bool = False
    guard: AsyncGenerator[None, None] | None = None


class PerLoop(Generic[T]):
    """One resource per event loop: opened by *open* on first use in a loop, released
    by *close* in that loop when it shuts down or when `aclose` is called.

    *drop* releases a resource without its loop (the loop is closed, or idle in another
    thread), or one whose *close* took longer than *close_timeout* seconds: it must not
    await, and may only abandon sockets.
    """

    def __init__(
        self,
        open: Callable[[], Awaitable[T]],
        close: Callable[[T], Awaitable[None]],
        drop: Callable[[T], None] | None = None,
        close_timeout: float = CLOSE_TIMEOUT,
    ) -> None:
        self._open = open
        self._close = close
        self._drop = drop
        self._close_timeout = close_timeout
        self._mutex = threading.Lock()
        self._entries: dict[asyncio.AbstractEventLoop, _Entry[T]] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether `aclose` ran: no resource is opened here any more."""
        return self._closed

    def __len__(self) -> int:
        """How many loops hold a resource now."""
        with self._mutex:
            return sum(1 for entry in self._entries.values() if entry.ready)

    async def get(self) -> T:
        """This loop's resource, opened now if it has none yet."""
        loop = asyncio.get_running_loop()
        entry = self._entries.get(loop)
        if entry is not None and entry.ready:
            return entry.value  # type: ignore[return-value]
        return await self._open_here(loop)

    def ready_here(self) -> bool:
        """Whether the running loop has its resource already."""
        entry = self._entries.get(asyncio.get_running_loop())
        return entry is not None and entry.ready

    def current(self) -> T:
        """This loop's resource; RuntimeError if it has not been opened in this loop."""
        entry = self._entries.get(asyncio.get_running_loop())
        if entry is None or not entry.ready:
            raise RuntimeError("not opened in this event loop")
        return entry.value  # type: ignore[return-value]

    async def _open_here(self, loop: asyncio.AbstractEventLoop) -> T:
        with self._mutex:
            if self._closed:
                raise RuntimeError("closed")
            entry = self._entries.get(loop)
            if entry is None:
                entry = self._entries[loop] = _Entry(loop)
                stale = [e for e in self._entries.values() if e.loop.is_closed()]
                for dead in stale:
                    del self._entries[dead.loop]
            else:
                stale = []
        for dead in stale:
            self._abandon(dead)
        async with entry.opening:
            if entry.ready:
                return entry.value  # type: ignore[return-value]
            value = await self._open()
            guard = self._guard(entry)
            # The first step registers the generator with the loop's async generator
            # hooks, so the loop's shutdown (asyncio.run does it) runs its finally.
            await guard.asend(None)
            with self._mutex:
                entry.value, entry.guard, entry.ready = value, guard, True
        if self.closed:  # aclose() ran while we were opening
            await self._release(entry)
            raise RuntimeError("closed")
        return value

    async def _guard(self, entry: _Entry[T]) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            if not entry.released:
                entry.released = True
                with self._mutex:
                    if self._entries.get(entry.loop) is entry:
                        del self._entries[entry.loop]
                value: T = entry.value  # type: ignore[assignment]
                try:
                    # Bounded: a server that stopped answering must not hold up the
                    # loop's shutdown; its sockets are then dropped instead.
                    await asyncio.wait_for(self._close(value), self._close_timeout)
                except (Exception, asyncio.TimeoutError):
                    if self._drop is not None:
                        with contextlib.suppress(Exception):
                            self._drop(value)

    async def _release(self, entry: _Entry[T]) -> None:
        """In *entry*'s own loop: close its resource gracefully."""
        guard = entry.guard
        if guard is not None:
            await guard.aclose()

    def _abandon(self, entry: _Entry[T]) -> None:
        """Outside *entry*'s loop: drop its resource without awaiting anything."""
        if entry.released:
            return
        entry.released = True
        if entry.ready and self._drop is not None:
            with contextlib.suppress(Exception):
                self._drop(entry.value)  # type: ignore[arg-type]
        guard = entry.guard
        if guard is not None:
            # Finish the generator by hand (its finally sees `released` and awaits
            # nothing), so no loop is ever asked to finalise it after it closed.
            step = guard.aclose()
            try:
                step.send(None)
            except StopIteration:
                pass
            except BaseException:  # still running in its own loop's thread
                step.close()

    async def aclose(self) -> None:
        """Release every loop's resource, each gracefully in its own loop (bounded
        waits): this loop's here, a running loop's by handing it the work, an idle
        loop's by running it briefly; a closed loop's resource is dropped."""
        here = asyncio.get_running_loop()
        with self._mutex:
            self._closed = True
            entries = list(self._entries.values())
            self._entries.clear()
        for entry in entries:
            if not entry.ready:
                continue
            loop = entry.loop
            if loop is here:
                await self._release(entry)
            elif loop.is_closed():
                self._abandon(entry)
            elif loop.is_running():
                try:
                    done = asyncio.run_coroutine_threadsafe(self._release(entry), loop)
                    await asyncio.wait_for(asyncio.wrap_future(done), CLOSE_TIMEOUT)
                except (Exception, asyncio.TimeoutError):
                    self._abandon(entry)
            elif not await asyncio.to_thread(self._release_in_idle_loop, entry):
                self._abandon(entry)

    def _release_in_idle_loop(self, entry: _Entry[T]) -> bool:
        """Run a loop that is open but idle (``Runner.run_sync`` leaves its thread's
        default loop so) just long enough to close its resource there, from a thread
        of our own: the calling thread runs a loop already."""
        outcome: list[bool] = []

        def run() -> None:
            try:
                entry.loop.run_until_complete(self._release(entry))
                outcome.append(True)
            except Exception:  # started meanwhile by its owner, or closed: drop instead
                outcome.append(False)

        helper = threading.Thread(target=run, name="agentsessions-release", daemon=True)
        helper.start()
        helper.join(CLOSE_TIMEOUT)
        return bool(outcome and outcome[0])
