"""What both adapters share: loading the newest events, and finishing a write even if
the caller is cancelled.

A framework may cancel the task that is saving (a guardrail trips, a client
disconnects). A save cancelled half-way leaves the caller unable to tell whether it
landed; letting it finish and only then re-raising the cancellation keeps the stored
conversation and the framework's view of it in step. The OpenAI Agents SDK does the
same for its own sessions.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import TypeVar

from .._manager import SessionManager
from .._models import Session

__all__ = ["backoff", "finish_despite_cancellation", "get_newest"]

T = TypeVar("T")


async def finish_despite_cancellation(awaitable: Awaitable[T]) -> T:
    """Await *awaitable* to completion; a cancellation that arrived meanwhile is re-raised after."""
    task = asyncio.ensure_future(awaitable)
    cancelled: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError as exc:
            if cancelled is None:
                cancelled = exc
    if cancelled is not None:
        # The outcome is known and final; the caller still asked to stop, so it stops.
        if not task.cancelled() and task.exception() is not None:
            raise cancelled from task.exception()
        raise cancelled
    return task.result()


async def backoff(attempt: int) -> None:
    """Sleep a jittered, growing moment so that contending writers spread out."""
    await asyncio.sleep(random.uniform(0, min(0.05, 0.001 * 2**attempt)))


async def get_newest(
    manager: SessionManager, session_id: str, user_id: str | None, last_events: int | None
) -> Session | None:
    """``manager.get(..., last_events=...)``, correct even where a backend is not.

    The in-memory reference backend (core/_memory.py) slices ``events[count - N:]``,
    so asking for more events than are stored returns too FEW (a negative start).
    A short window that does not start at position 0 can only be that bug; reading
    the whole history then gives the right answer. Remove once core is fixed.
    """
    session = await manager.get(session_id, user_id=user_id, last_events=last_events)
    if (
        session is not None
        and last_events is not None
        and session.first_event_position > 0
        and len(session.events) < last_events
    ):
        session = await manager.get(session_id, user_id=user_id)
        if session is not None:
            newest = session.events[-last_events:] if last_events else []
            offset = len(session.events) - len(newest)
            session.events = newest
            session._mark_loaded(offset=offset, partial=True)
    return session
