"""An event loop with no thread of its own: each blocking caller runs it while its call runs.

`_LoopThread` (``agentsessions.sync``) serves blocking callers from a loop in a daemon
thread: every call crosses to that thread and back. When the caller's thread is busy
with CPU work of its own between calls, as LangGraph's executor threads are, each of those
crossings waits for the GIL to be handed over, which costs far more than the call itself.
`DrivenLoop` keeps one persistent loop (so connections and pools stay open from one
call to the next, as there) but lets the calling thread run it: a call from a thread
that runs no loop of its own submits its coroutine, then, if no other thread is running
the loop at that moment, runs the loop itself until its own call is done. Calls made
while another thread runs the loop are served by that thread; a waiting caller takes
over when the running one leaves with work still pending, so no call waits on another
caller's later work. A caller whose thread already runs an event loop cannot run this
one: its call is run from a short-lived helper thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["DrivenLoop", "in_driven_loop"]

T = TypeVar("T")

#: How long `close` waits for a call in flight, or for closing per-loop resources.
CLOSE_TIMEOUT = 10.0

_DRIVEN: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def in_driven_loop() -> bool:
    """Whether the running event loop is a `DrivenLoop`'s: a blocking caller's thread
    runs it and waits for its call, and no other task of an application shares it. A
    backend may then run a short engine call inline in that thread instead of handing
    it to a thread of its own (a crossing there and back that costs more than the call
    while the caller's thread holds the GIL between calls)."""
    loop = _running_loop()
    return loop is not None and loop in _DRIVEN


class DrivenLoop:
    """One event loop, run in turn by the threads whose blocking calls need it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        _DRIVEN.add(self.loop)
        self._turn = threading.Condition()
        self._driver: int | None = None  # the thread running the loop now
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run *coro* on the loop and return its result (or raise its exception)."""
        running = _running_loop()
        if self._closed or running is self.loop:
            coro.close()
            raise RuntimeError(
                "the loop is closed"
                if self._closed
                else "a blocking call cannot be made from the loop it waits for"
            )
        if running is not None:
            return _in_helper_thread(lambda: self.run(coro))
        with self._turn:
            idle = self._driver is None and not self._closed
            if idle:
                self._driver = threading.get_ident()
        if idle:  # nobody runs the loop: run it here, for this call and whatever comes
            task = self.loop.create_task(coro)
            try:
                return self.loop.run_until_complete(task)
            except BaseException:
                task.cancel()  # KeyboardInterrupt, say: the call stops with its caller
                raise
            finally:
                self._leave()
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        future.add_done_callback(self._wake)
        try:
            self._serve_until(future)
        except BaseException:
            future.cancel()  # KeyboardInterrupt, say: the call stops with its caller
            raise
        return future.result()

    def _leave(self) -> None:
        """Stop running the loop here, and let a waiting caller take it over."""
        with self._turn:
            self._driver = None
            self._turn.notify_all()

    def _wake(self, _future: object) -> None:
        with self._turn:
            self._turn.notify_all()

    def _serve_until(self, future: concurrent.futures.Future[Any]) -> None:
        waiter = asyncio.wrap_future(future, loop=self.loop)
        while True:
            with self._turn:
                while not future.done() and self._driver is not None:
                    self._turn.wait()
                if future.done():
                    return
                if self._closed:  # nobody runs the loop again: the call cannot end
                    raise RuntimeError("the loop was closed while the call waited for it")
                self._driver = threading.get_ident()
            try:
                self.loop.run_until_complete(waiter)
            finally:
                self._leave()

    def close(self) -> None:
        """Cancel what is still running, release per-loop resources in the loop (as
        ``asyncio.run`` does at its end) and close it; bounded by `CLOSE_TIMEOUT`."""
        with self._turn:
            if self._closed:
                return
            self._closed = True
            self._turn.wait_for(lambda: self._driver is None, CLOSE_TIMEOUT)
            if self._driver is not None:
                return  # a call would not end: leave the loop to it and the collector
            self._driver = threading.get_ident()
        try:
            if _running_loop() is not None:
                _in_helper_thread(self._shut_down)
            else:
                self._shut_down()
        finally:
            self._leave()

    def _shut_down(self) -> None:
        loop = self.loop
        with contextlib.suppress(Exception):
            tasks = asyncio.all_tasks(loop)
            for task in tasks:
                task.cancel()
            if tasks:
                loop.run_until_complete(
                    asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), CLOSE_TIMEOUT)
                )
            loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), CLOSE_TIMEOUT))
        loop.close()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _in_helper_thread(call: Callable[[], T]) -> T:
    # The caller's thread runs a loop of its own, which cannot run another one.
    outcome: list[tuple[bool, Any]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # re-raised in the caller
            outcome.append((False, exc))

    helper = threading.Thread(target=run, name="agentsessions-driven", daemon=True)
    helper.start()
    helper.join()
    ok, value = outcome[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value
