"""One deadline per public call, and the one place where driver exceptions become ours.

Every public `SessionManager` method runs inside `call`: a deadline that cancels the
task at ``now + options.timeout``, covering the whole call (connecting, waiting for a
pooled connection, retries, every statement), and the translation of the exceptions a
backend declares in ``driver_errors`` into `BackendUnavailableError` or
`BackendTimeoutError`. Calls nested in one task (``update`` calls ``get`` and
``save``) share the outermost deadline, so ``update`` is bounded as a whole too.

The deadlines of the calls running on one event loop share one loop timer (`_Watch`),
armed for the earliest of them: a call only enters and leaves a dict, where a timer of
its own would be armed and cancelled on every call, and a cancelled timer still costs
the loop its removal later. With one timeout for all calls the timer fires about once
per timeout, finds the calls that are past their deadline, cancels their tasks, and is
armed again for the earliest deadline left.
"""

from __future__ import annotations

import asyncio
import contextvars
import operator
import sys
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import _instrumentation
from ._errors import BackendTimeoutError, BackendUnavailableError, SessionError

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["ErrorRule", "call", "current_operation", "remaining"]


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """Driver exceptions of *types* reach the caller as *kind*.

    ``raised_in``: match only an exception raised from code in a module whose name
    starts with it (``"redis."``), for exception types as broad as ``AttributeError``
    that a driver raises on a broken connection but that elsewhere mean a bug.
    ``when``: match only exceptions for which it returns true (an error code, say).
    ``build``: ``build(manager, exc)`` makes the error instead of a *kind*, for a driver
    error that is not about availability (a document the engine refuses is an
    `InvalidInputError`) or whose message needs the manager's settings; a function
    defined in the manager's class body works as one.
    """

    types: tuple[type[BaseException], ...]
    kind: type[BackendUnavailableError] = BackendUnavailableError
    raised_in: str | None = None
    when: Callable[[Any], bool] | None = None
    build: Callable[[Any, Any], SessionError] | None = None

    def matches(self, exc: BaseException) -> bool:
        """Whether this rule translates *exc*: of one of *types*, ``when`` true, raised
        where ``raised_in`` says."""
        if not isinstance(exc, self.types):
            return False
        if self.when is not None and not self.when(exc):
            return False
        return self.raised_here(exc)

    def raised_here(self, exc: BaseException) -> bool:
        """Whether *exc* was raised where ``raised_in`` says (always, without one)."""
        if self.raised_in is None:
            return True
        traceback = exc.__traceback__
        module = None
        while traceback is not None:
            module = traceback.tb_frame.f_globals.get("__name__")
            traceback = traceback.tb_next
        return isinstance(module, str) and module.startswith(self.raised_in)


class call:
    """``async with call(manager, operation):`` runs the body as *operation* of *manager*:
    under its deadline, errors translated.

    A class rather than an ``asynccontextmanager``: it runs twice per agent turn, and a
    generator-based context manager costs an async generator (and the event loop's
    first-iteration hook) on every call. The object itself is what `_CURRENT` holds
    while the body runs.
    """

    __slots__ = (
        "_cancelling",
        "_task",
        "_token",
        "_watch",
        "deadline",
        "fired",
        "manager",
        "operation",
        "timeout",
    )

    def __init__(self, manager: SessionManager, operation: str) -> None:
        self.manager = manager
        self.operation = operation
        self.timeout = 0.0
        self.deadline = 0.0  # loop time
        self.fired = False
        self._token: contextvars.Token[call | None] | None = None
        self._watch: _Watch | None = None
        self._task: asyncio.Task[Any] | None = None
        self._cancelling = 0

    async def __aenter__(self) -> None:
        manager = self.manager
        outer = _CURRENT.get()
        if outer is not None and outer.manager is manager:
            # Nested in a call of the same manager: its deadline already bounds us.
            return
        self.timeout = timeout = manager.options.timeout
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if outer is not None and outer.deadline < deadline:
            deadline = outer.deadline
        self.deadline = deadline
        # asyncio.timeout_at without it (Python 3.10 has none): cancel the task at the
        # deadline and turn that cancellation, and only that one, into our error.
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = _cancel_count(task)
        watch = _last_watch
        if watch is None or watch.loop() is not loop:
            watch = _watch_of(loop)
        watch.calls[self] = None
        if watch.handle is None or deadline < watch.when:
            watch.arm(loop, deadline)
        self._watch = watch
        self._token = _CURRENT.set(self)

    def _expire(self) -> None:
        self.fired = True
        assert self._task is not None
        self._task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        manager = self.manager
        watch = self._watch
        if watch is None:  # nested: only the translation
            if exc is None or not isinstance(exc, Exception):
                return
            error = manager._translate(exc)
            if error is None:
                return
            raise error from None
        token, task = self._token, self._task
        assert token is not None and task is not None
        self._task = None  # a finished call holds no task
        self._watch = None
        try:
            watch.calls.pop(self, None)  # gone already if its deadline passed
            if exc is None:
                if self.fired:
                    _uncancel(task)  # the body swallowed the cancellation
                return
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                return
            if self.fired and _uncancel(task) <= self._cancelling:
                expired = BackendTimeoutError(manager.url, self.operation, self.timeout)
                _instrumentation.deadline_exceeded(manager, expired)
                raise expired from None
            if isinstance(exc, asyncio.CancelledError):
                return
            error = manager._translate(exc)
            if error is None:
                return
            raise error from None
        finally:
            _CURRENT.reset(token)


_CURRENT: contextvars.ContextVar[call | None] = contextvars.ContextVar(
    "agentsessions_call", default=None
)

# asyncio runs a timer once its time is within the clock's resolution: so does `_Watch`.
_RESOLUTION = time.get_clock_info("monotonic").resolution


class _Watch:
    """The deadlines of the calls running on one event loop, behind one loop timer.

    Used only from its loop's thread (calls enter and leave there, the timer fires
    there); it holds its loop weakly, and `_WATCHES` drops it with the loop.
    """

    __slots__ = ("__weakref__", "calls", "handle", "loop", "when")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        # Running calls, in an insertion-ordered dict: O(1) to enter and to leave.
        self.calls: dict[call, None] = {}
        self.handle: asyncio.TimerHandle | None = None
        self.when = 0.0  # loop time the handle is armed for

    def arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.when = when
        self.handle = loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self.handle = None
        loop = self.loop()
        if loop is None:  # pragma: no cover - a loop runs its own timers
            return
        limit = loop.time() + _RESOLUTION
        calls = self.calls
        expired = [running for running in calls if running.deadline <= limit]
        for running in expired:
            del calls[running]
            running._expire()
        if calls:
            self.arm(loop, min(running.deadline for running in calls))


_WATCHES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watch] = weakref.WeakKeyDictionary()
_WATCHES_LOCK = threading.Lock()  # loops of several threads may add theirs at once
_last_watch: _Watch | None = None  # the usual case: one loop, so skip the weak lookup


def _watch_of(loop: asyncio.AbstractEventLoop) -> _Watch:
    """The watch of *loop* (`call` checks `_last_watch` first, inline)."""
    global _last_watch
    with _WATCHES_LOCK:
        watch = _WATCHES.get(loop)
        if watch is None:
            watch = _WATCHES[loop] = _Watch(loop)
    _last_watch = watch
    return watch


if sys.version_info >= (3, 11):
    # task.cancelling(), called from C: any Task class, no Python frame per call.
    _cancel_count: Callable[[asyncio.Task[Any]], int] = operator.methodcaller("cancelling")

else:  # no cancellation counts before Python 3.11

    def _cancel_count(task: asyncio.Task[Any]) -> int:
        return 0


def remaining(manager: SessionManager, cap: float | None = None) -> float:
    """Seconds left before the current call's deadline (at least a millisecond).

    Backends pass it to their driver's own timeouts, so the driver gives up cleanly
    just before the deadline would cancel it. Outside a call: ``options.timeout``.
    *cap*: an engine-specific timeout that is shorter still.
    """
    current = _CURRENT.get()
    if current is None or current.manager is not manager:
        left = manager.options.timeout
    else:
        left = current.deadline - asyncio.get_running_loop().time()
    if cap is not None:
        left = min(left, cap)
    return max(left, 0.001)


def _uncancel(task: asyncio.Task[object]) -> int:
    """Withdraw our cancellation request; how many others are still pending."""
    withdraw = getattr(task, "uncancel", None)  # Python 3.11+
    return int(withdraw()) if withdraw is not None else 0


def current_operation(manager: SessionManager) -> tuple[str, float] | None:
    """(operation, timeout) of the call of *manager* running in this task, if any."""
    current = _CURRENT.get()
    if current is None or current.manager is not manager:
        return None
    return current.operation, current.timeout
