"""One deadline per public call, and the one place where driver exceptions become ours.

Every public `SessionManager` method runs inside `call`: a timer that cancels the task
at ``now + options.timeout``, covering the whole call (connecting, waiting for a pooled
connection, retries, every statement), and the translation of the exceptions a
backend declares in ``driver_errors`` into `BackendUnavailableError` or
`BackendTimeoutError`. Calls nested in one task (``update`` calls ``get`` and
``save``) share the outermost deadline, so ``update`` is bounded as a whole too.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class _Call:
    manager: SessionManager
    operation: str
    timeout: float
    deadline: float  # loop time


_CURRENT: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "agentsessions_call", default=None
)


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


@asynccontextmanager
async def call(manager: SessionManager, operation: str) -> AsyncIterator[None]:
    """Run the body as *operation* of *manager*: under its deadline, errors translated."""
    outer = _CURRENT.get()
    if outer is not None and outer.manager is manager:
        # Nested in a call of the same manager: its deadline already bounds us.
        try:
            yield
        except Exception as exc:
            error = manager._translate(exc)
            if error is None:
                raise
            raise error from None
        return
    timeout = manager.options.timeout
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    if outer is not None:
        deadline = min(deadline, outer.deadline)
    token = _CURRENT.set(_Call(manager, operation, timeout, deadline))
    # asyncio.timeout_at without it (Python 3.10 has none): cancel the task at the
    # deadline and turn that cancellation, and only that one, into our error.
    task = asyncio.current_task()
    assert task is not None
    cancelling = _cancelling(task)
    fired = False

    def expire() -> None:
        nonlocal fired
        fired = True
        task.cancel()

    handle = loop.call_at(deadline, expire)
    try:
        yield
    except (Exception, asyncio.CancelledError) as exc:
        handle.cancel()
        if fired and _uncancel(task) <= cancelling:
            error = BackendTimeoutError(manager.url, operation, timeout)
            _instrumentation.deadline_exceeded(manager, error)
            raise error from None
        if isinstance(exc, asyncio.CancelledError):
            raise
        error = manager._translate(exc)
        if error is None:
            raise
        raise error from None
    else:
        handle.cancel()
        if fired:
            _uncancel(task)  # the body swallowed the cancellation: nothing pending is ours
    finally:
        _CURRENT.reset(token)


def _cancelling(task: asyncio.Task[object]) -> int:
    counter = getattr(task, "cancelling", None)  # Python 3.11+
    return int(counter()) if counter is not None else 0


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
