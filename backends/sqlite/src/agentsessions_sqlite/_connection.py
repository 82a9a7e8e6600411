"""Connections, and running a whole transaction in a connection's thread in one hop.

aiosqlite gives each connection a thread and runs queued calls there one at a time.
We queue a whole transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``) as ONE call instead
of awaiting each statement:

* no other task's statement can slip into our transaction on a shared connection, so
  no asyncio lock is needed and a read never sees another task's uncommitted writes;
* a cancelled caller cannot leave a transaction open: the call runs to COMMIT or
  ROLLBACK in the thread whatever happens to the awaiting task;
* one thread hop per operation instead of four or five (measured: an append costs
  about half as much; see README).

A blocking caller whose thread runs the loop itself (``agentsessions``' `DrivenLoop`,
behind the LangGraph saver's blocking methods) makes no hop at all: when nothing else is
in flight on the connection, `Link` runs the transaction in the caller's thread, under
the lock (`Link.turn`) the connection thread takes for every job too.

aiosqlite has no public name for "run this function on the connection's thread"; `Link`
queues its calls on the connection's work queue itself (as aiosqlite's own
``Connection._execute`` does), with a future of the caller's running loop, so one
connection serves every event loop and thread of the process. The result is handed back
with a guard aiosqlite lacks: when the caller's loop has closed meanwhile (a thread's
``asyncio.run`` ended during a call), the result is discarded, where aiosqlite's own
hand-back would raise and kill the worker thread for everyone.

The worker threads are daemon threads, so a program that never closes its manager
still exits; an exit hook closes what is still open first (bounded), which finishes a
transaction in flight. A save that returned has committed, so nothing acknowledged
depends on that hook.

Deadlines: a caller that is cancelled (its call's deadline passed, or its task was
cancelled) returns at once; the thread then stops the work it left behind: a queued
job is skipped, a running statement is interrupted (``sqlite3.Connection.interrupt``,
which rolls its transaction back), and a wait for another connection's lock ends.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar, cast

import aiosqlite
from agentsessions.backend import in_driven_loop

__all__ = ["AbandonedError", "Link", "connect", "is_busy"]

T = TypeVar("T")

# SQLITE_BUSY and SQLITE_LOCKED; extended codes (BUSY_SNAPSHOT, ...) share the low byte.
_BUSY_CODES = frozenset({5, 6})
_FIRST_RETRY_DELAY = 0.001
_MAX_RETRY_DELAY = 0.05
#: How long the exit hook waits for each connection still open to finish and close.
_EXIT_CLOSE_TIMEOUT = 5.0


def is_busy(exc: BaseException) -> bool:
    """Whether *exc* is SQLite's "database is locked" (another connection holds a lock)."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)  # Python 3.11+
    if code is not None:
        return (code & 0xFF) in _BUSY_CODES
    message = str(exc)
    return "database is locked" in message or "database table is locked" in message


class _Job:
    """One queued call; ``abandoned`` is set from the event loop when its caller left."""

    __slots__ = ("abandoned",)

    def __init__(self) -> None:
        self.abandoned = False


class AbandonedError(sqlite3.OperationalError):
    """The caller stopped waiting before the job ran; nothing was done."""


def _retrying_busy(timeout: float, fn: Callable[[], T], job: _Job | None = None) -> T:
    """Call *fn*, again while it fails with a busy error, until *timeout* seconds pass.

    ``busy_timeout`` already makes SQLite wait for a lock, but a few paths return
    SQLITE_BUSY at once (WAL recovery by another process, a journal-mode change, a
    stale snapshot); those are transient, so retrying them within the same budget turns
    them into the short wait the caller configured instead of a spurious error.
    """
    deadline = time.monotonic() + timeout
    delay = _FIRST_RETRY_DELAY
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline or (job and job.abandoned):
                raise
        time.sleep(delay)
        delay = min(delay * 2, _MAX_RETRY_DELAY)


def _transaction(
    conn: sqlite3.Connection,
    begin: str,
    timeout: float,
    fn: Callable[..., T],
    args: tuple[Any, ...],
    job: _Job | None = None,
) -> T:
    def attempt() -> T:
        conn.execute(begin)
        try:
            result = fn(conn, *args)
            conn.execute("COMMIT")
        except BaseException:
            conn.rollback()  # a no-op if COMMIT already ended the transaction
            raise
        return result

    return _retrying_busy(timeout, attempt, job)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller was cancelled; the work itself ran to its end
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def _boxed(job: _Job, link: Link, fn: Callable[..., T], *args: Any) -> list[T]:
    """``[fn(*args)]``: the caller pops the result out of the box.

    aiosqlite's worker thread keeps its last result in a local variable until the next
    call returns. A loaded session (5,000 events, say) would then be freed in that
    thread, in the middle of the next, unrelated call: 1.5-2 ms landing on a 0.3 ms
    read. Emptied by the caller, the box is all the thread keeps.
    """
    if job.abandoned:
        raise AbandonedError("the caller stopped waiting before this ran")
    with link.turn:
        link.running = job
        try:
            return [fn(*args)]
        finally:
            link.running = None


class Link:
    """One aiosqlite connection and the way we run work on it."""

    def __init__(
        self,
        conn: aiosqlite.Connection,
        busy_timeout: float,
        remaining: Callable[[float], float] | None = None,
    ) -> None:
        self.conn = conn
        self._busy_timeout = busy_timeout
        # What is left of the running call's deadline (at most its argument).
        self._remaining = remaining or (lambda cap: cap)
        self._raw: sqlite3.Connection = conn._conn
        self._queue = conn._tx
        self.running: _Job | None = None  # the job in the thread right now
        self.in_flight = 0  # calls submitted and not yet returned to their callers
        # Held by whoever runs a job on the raw connection: its thread, or a blocking
        # caller running one inline (`_execute`).
        self.turn = threading.Lock()

    async def _submit(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the connection thread; its result in the caller's loop."""
        conn = self.conn
        if not conn._running or conn._connection is None:
            raise ValueError("Connection closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def work() -> None:
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except BaseException as exc:  # every outcome goes back to the caller
                error = exc
            # RuntimeError: the caller's loop is closed, nobody is waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)

        self._queue.put_nowait((None, work))
        return await future

    async def _execute(self, job: _Job, fn: Callable[..., T], *args: Any) -> list[T]:
        if self.in_flight == 0 and in_driven_loop() and self.turn.acquire(blocking=False):
            # A blocking caller runs this loop and waits for this very call: run it in
            # its thread, with no crossing to the connection thread and back. The turn
            # keeps the connection thread (serving another loop) off it meanwhile.
            self.in_flight += 1
            try:
                return [fn(*args)]
            finally:
                self.in_flight -= 1
                self.turn.release()
        self.in_flight += 1
        try:
            return cast(list[T], await self._submit(_boxed, job, self, fn, *args))
        except asyncio.CancelledError:
            job.abandoned = True
            if self.running is job:
                self._raw.interrupt()  # thread-safe; only the statement of this job
            raise
        finally:
            self.in_flight -= 1

    def _budget(self) -> float:
        return self._remaining(self._busy_timeout)

    async def write(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` inside ``BEGIN IMMEDIATE``/``COMMIT``, in the connection thread.

        IMMEDIATE takes the write lock before the first read, so the version check and
        the write see the same data, and a contended lock is waited for under
        ``busy_timeout`` (a deferred transaction that upgrades to a writer fails at once
        with SQLITE_BUSY when another writer committed in between).
        """
        job = _Job()
        box: list[T] = await self._execute(
            job, _transaction, self._raw, "BEGIN IMMEDIATE", self._budget(), fn, args, job
        )
        return box.pop()

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` inside a read transaction: all its queries see one snapshot."""
        job = _Job()
        box: list[T] = await self._execute(
            job, _transaction, self._raw, "BEGIN", self._budget(), fn, args, job
        )
        return box.pop()

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(conn, *args)`` in the connection thread, outside any transaction."""
        job = _Job()
        box: list[T] = await self._execute(
            job, _retrying_busy, self._budget(), lambda: fn(self._raw, *args), job
        )
        return box.pop()

    async def close(self) -> None:
        _open_links.discard(self)
        await self.conn.close()

    def close_at_exit(self) -> None:
        """Without an event loop: finish queued work, close, wait (bounded)."""
        conn = self.conn
        if not conn._running or conn._connection is None:
            return
        conn._running = False
        done = threading.Event()

        def close() -> None:
            try:
                self._raw.close()
            finally:
                conn._connection = None
                done.set()

        self._queue.put_nowait((None, close))
        # The idle daemon thread is left to the interpreter's exit.
        done.wait(_EXIT_CLOSE_TIMEOUT)


_open_links: weakref.WeakSet[Link] = weakref.WeakSet()


@atexit.register
def _close_open_links() -> None:
    for link in list(_open_links):
        link.close_at_exit()


async def connect(
    path: str, busy_timeout: float, remaining: Callable[[float], float] | None = None
) -> Link:
    """Open *path* in autocommit mode (we issue BEGIN/COMMIT ourselves)."""
    # check_same_thread=False: a blocking caller may run a call inline (`Link.turn`).
    conn = aiosqlite.connect(
        path, isolation_level=None, timeout=busy_timeout, check_same_thread=False
    )
    # Not joined at interpreter exit (see the module docstring).
    conn._thread.daemon = True
    try:
        await conn
    except BaseException:
        # On a failed connect aiosqlite stops its thread without waiting for it; the
        # thread then reports to this event loop, which must still be running then.
        for _ in range(1000):
            if not conn._thread.is_alive():
                break
            await asyncio.sleep(0.001)
        raise
    link = Link(conn, busy_timeout, remaining)
    _open_links.add(link)
    return link
