"""`SyncSessionManager`: the manager's contract for code with no event loop.

Django and Flask views, scripts, notebooks and worker pools call it like any blocking
client (as httpx's ``Client`` sits beside its ``AsyncClient``). It drives the ordinary
async manager on a private event loop in one daemon thread of its own. That design,
rather than ``asyncio.run()`` per call:

* keeps connections and pools open from one call to the next (a loop per call would
  open and close them every time);
* works whatever the calling thread is doing, even inside a running event loop, where
  ``asyncio.run()`` refuses to start;
* serves every thread of a web server at once: their calls run concurrently on the one
  loop, with the async manager's own concurrency guarantees.

Errors are the async manager's exceptions, raised in the caller's thread unchanged.
*fn* given to `SyncSessionManager.update` runs in the caller's thread, so it may use
the caller's thread-bound resources (a Django database connection, say).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import inspect
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, TypeVar

from ._diagnosis import Diagnosis
from ._errors import (
    InvalidInputError,
    ManagerClosedError,
    SessionConflictError,
    SessionNotFoundError,
)
from ._manager import DEFAULT_UPDATE_RETRIES, ManagerOptions, SessionManager, backoff_delay
from ._models import Event, Session, SessionPage, SessionSummary
from ._records import Capabilities
from ._registry import connect as connect_async
from ._saving import save_until_answered

__all__ = ["SyncSessionManager", "connect"]

T = TypeVar("T")
SyncManagerT = TypeVar("SyncManagerT", bound="SyncSessionManager")

#: How long closing (or the exit hook) waits for the loop thread to finish its work.
CLOSE_TIMEOUT = 10.0


class _LoopThread:
    """An event loop running forever in a daemon thread, until `stop`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # As asyncio.run does: a call still in flight is cancelled (its caller is
            # told the manager closed), and per-loop connections close in their loop.
            with contextlib.suppress(Exception):
                tasks = asyncio.all_tasks(self.loop)
                for task in tasks:
                    task.cancel()
                if tasks:
                    self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def in_loop_thread(self) -> bool:
        return threading.current_thread() is self._thread

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return _wait(self.submit(coro))

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError):  # already closed
            self.loop.call_soon_threadsafe(self.loop.stop)
        if not self.in_loop_thread():
            self._thread.join(CLOSE_TIMEOUT)


def _run_aside(coro: Coroutine[Any, Any, T]) -> T:
    """Run *coro* with ``asyncio.run`` in a short-lived thread (the caller's thread may
    be running a loop already); for the calls that touch no connection."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, asyncio.run(coro)))
        except BaseException as exc:  # re-raised in the caller
            box.append((False, exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(CLOSE_TIMEOUT)
    if not box:
        raise RuntimeError("agentsessions: a call on a closed manager did not finish")
    ok, value = box[0]
    if ok:
        return value  # type: ignore[no-any-return]
    raise value


def _wait(future: concurrent.futures.Future[T]) -> T:
    try:
        return future.result()
    except BaseException:
        # KeyboardInterrupt in the caller, say: the work stops too.
        future.cancel()
        raise


_live: weakref.WeakSet[SyncSessionManager] = weakref.WeakSet()


@atexit.register
def _close_live() -> None:
    # Without this the daemon thread would just stop at exit: acknowledged saves are
    # committed either way, but the servers would see connections dropped, not closed.
    for manager in list(_live):
        with contextlib.suppress(Exception):
            manager.close()


class SyncSessionManager:
    """The `SessionManager` contract with blocking methods; get one with `connect`.

    Safe to share between threads (one per process is the usual pattern); use it
    with ``with`` or call `close` when done. A program that never closes it still
    exits, and an exit hook closes it first.
    """

    def __init__(self, manager: SessionManager) -> None:
        """Drive *manager* (which this object then owns and closes) synchronously."""
        if not isinstance(manager, SessionManager):
            raise InvalidInputError(
                f"SyncSessionManager wraps a SessionManager, not {type(manager).__name__}"
            )
        self._manager = manager
        self._runner: _LoopThread | None = None
        self._lock = threading.Lock()
        self._closed = False

    # -- plumbing ---------------------------------------------------------------------

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        # Submitted under the lock, so a call either reaches the loop before close()
        # takes it, or sees the manager closed.
        with self._lock:
            runner = self._runner
            if runner is None and not self._closed:
                runner = self._runner = _LoopThread(f"agentsessions-sync {self.url}")
                _live.add(self)
            if runner is not None and runner.in_loop_thread():
                coro.close()
                raise RuntimeError(
                    "a SyncSessionManager cannot be called from its own event loop thread"
                )
            future = None if runner is None else runner.submit(coro)
        if future is None:  # closed: the manager itself says so, as async code sees
            return _run_aside(coro)
        try:
            return _wait(future)
        except concurrent.futures.CancelledError:
            if self._closed:  # in flight when close() stopped the loop
                raise ManagerClosedError(f"{self!r} is closed") from None
            raise

    @property
    def manager(self) -> SessionManager:
        """The async manager underneath (same store, for async code in this process)."""
        return self._manager

    @property
    def url(self) -> str:
        """The URL, password masked."""
        return self._manager.url

    @property
    def options(self) -> ManagerOptions:
        return self._manager.options

    @property
    def capabilities(self) -> Capabilities:
        return self._manager.capabilities

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"

    def with_options(self: SyncManagerT, **changes: Any) -> SyncManagerT:
        """A new, unopened sync manager on the same URL with some options changed."""
        return type(self)(self._manager.with_options(**changes))

    # -- lifecycle ----------------------------------------------------------------------

    def open(self) -> None:
        """Connect now instead of on first use."""
        self._run(self._manager.open())

    def close(self) -> None:
        """Close the manager and stop its loop thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            runner, self._runner = self._runner, None
        _live.discard(self)
        if runner is None:
            _run_aside(self._manager.close())  # never used: nothing to wait for
            return
        try:
            if not runner.in_loop_thread():
                runner.run(self._manager.close())
        finally:
            runner.stop()

    def __enter__(self: SyncManagerT) -> SyncManagerT:
        self.open()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- the contract -------------------------------------------------------------------

    def create(
        self, session_id: str, user_id: str | None = None, *, state: dict[str, Any] | None = None
    ) -> Session:
        """Store a new, empty session. Raises `SessionExistsError` if the id is taken."""
        return self._run(self._manager.create(session_id, user_id, state=state))

    def get(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> Session | None:
        """The stored session, or None if absent or expired (a detached copy)."""
        return self._run(self._manager.get(session_id, user_id=user_id, last_events=last_events))

    def get_or_create(
        self, session_id: str, user_id: str | None = None, *, last_events: int | None = None
    ) -> Session:
        """Get the session, creating it if absent. Concurrent callers share one creation."""
        return self._run(self._manager.get_or_create(session_id, user_id, last_events=last_events))

    def save(self, session: Session) -> None:
        """Persist what changed since *session* was loaded: all of it, or nothing."""
        self._run(self._manager.save(session))

    def update(
        self,
        session_id: str,
        fn: Callable[[Session], object],
        *,
        user_id: str | None = None,
        create: bool = False,
        retries: int = DEFAULT_UPDATE_RETRIES,
        last_events: int | None = None,
    ) -> Session:
        """Load, apply *fn* (in the calling thread), save; on conflict reload and retry.

        As `SessionManager.update`: *fn* must be safe to run more than once; an async
        *fn*'s coroutine is awaited on the manager's loop; a save whose outcome is
        unknown is re-sent with its token, so it lands at most once.
        """
        if type(retries) is not int or retries < 0:
            raise InvalidInputError(f"retries must be an int >= 0, not {retries!r}")
        for attempt in range(retries + 1):
            if create:
                session: Session | None = self.get_or_create(
                    session_id, user_id, last_events=last_events
                )
            else:
                session = self.get(session_id, user_id=user_id, last_events=last_events)
            if session is None:
                raise SessionNotFoundError(session_id)
            result = fn(session)
            if inspect.iscoroutine(result):
                self._run(result)
            try:
                self._run(save_until_answered(self._manager, session))
            except SessionConflictError:
                if attempt >= retries:
                    raise
                time.sleep(backoff_delay(attempt))
                continue
            return session
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def session(self, session_id: str, *, user_id: str | None = None) -> Iterator[Session]:
        """``with manager.session(id) as s:`` gets or creates, and saves on normal exit."""
        session = self.get_or_create(session_id, user_id)
        yield session
        self.save(session)

    def delete(self, session_id: str, *, user_id: str | None = None) -> bool:
        """Delete a session and its events; False if it was not stored."""
        return self._run(self._manager.delete(session_id, user_id=user_id))

    def delete_user(self, user_id: str) -> int:
        """Erase every session of *user_id*; returns how many were deleted."""
        return self._run(self._manager.delete_user(user_id))

    def list_sessions(
        self,
        *,
        user_id: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        forked_from: str | None = None,
    ) -> SessionPage:
        """A page of summaries, newest created first; page on with ``next_cursor``."""
        return self._run(
            self._manager.list_sessions(
                user_id=user_id, limit=limit, cursor=cursor, forked_from=forked_from
            )
        )

    def purge_expired(self) -> int:
        """Remove expired sessions now; returns how many."""
        return self._run(self._manager.purge_expired())

    def diagnose(self) -> Diagnosis:
        """The deployment's settings that could lose or expose sessions (see
        `SessionManager.diagnose`)."""
        return self._run(self._manager.diagnose())

    def compact(
        self,
        session: Session,
        through_event_id: str,
        replacement: Sequence[Event],
        *,
        archive: bool = False,
    ) -> None:
        """Replace the events up to *through_event_id* with *replacement* (see
        `SessionManager.compact`)."""
        self._run(self._manager.compact(session, through_event_id, replacement, archive=archive))

    def archived_events(self, session_id: str, *, user_id: str | None = None) -> list[Event]:
        """What compactions with ``archive=True`` removed from the session, oldest first."""
        return self._run(self._manager.archived_events(session_id, user_id=user_id))

    def fork(
        self,
        source_id: str,
        new_id: str,
        *,
        through_event_id: str | None = None,
        user_id: str | None = None,
        state: dict[str, Any] | None = None,
    ) -> SessionSummary:
        """Create *new_id* from a prefix of *source_id* (see `SessionManager.fork`)."""
        return self._run(
            self._manager.fork(
                source_id, new_id, through_event_id=through_event_id, user_id=user_id, state=state
            )
        )

    def rewind(self, session: Session, through_event_id: str, *, archive: bool = False) -> None:
        """Drop the events after *through_event_id* (see `SessionManager.rewind`)."""
        self._run(self._manager.rewind(session, through_event_id, archive=archive))


def connect(url: str, **options: Any) -> SyncSessionManager:
    """A blocking manager for *url*: ``agentsessions.sync.connect("sqlite:///s.db")``.

    Takes what `agentsessions.connect` takes (options, ``clock=``) and raises what it
    raises; nothing connects until first use.
    """
    return SyncSessionManager(connect_async(url, **options))
