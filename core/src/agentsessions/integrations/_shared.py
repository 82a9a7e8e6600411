"""What the adapters share: finishing a write even if the caller is cancelled, the
retry backoff, and the stored id of a framework's id that is not one of ours.

A framework may cancel the task that is saving (a guardrail trips, a client
disconnects). A save cancelled half-way leaves the caller unable to tell whether it
landed; letting it finish and only then re-raising the cancellation keeps the stored
conversation and the framework's view of it in step. The OpenAI Agents SDK does the
same for its own sessions.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable
from typing import TypeVar

from .._errors import InvalidSessionIdError
from .._ids import MAX_ID_LENGTH, validate_id
from .._manager import backoff

__all__ = ["backoff", "finish_despite_cancellation", "mapped_id"]


def mapped_id(value: object, what: str, prefix: str) -> str:
    """The session id storing a framework's id *value*, which may be any string.

    A framework takes ids ours refuse (longer than `MAX_ID_LENGTH`, empty, blank): such
    an id, or one that starts with *prefix* (so that no id can name another's mapping),
    is stored as *prefix* and the SHA-256 of the whole id; any other id is stored as it
    is. NUL characters and unpaired surrogates are refused: no engine stores them.
    """
    if type(value) is not str:
        raise InvalidSessionIdError(f"{what} must be a str, not {type(value).__name__}")
    if 0 < len(value) <= MAX_ID_LENGTH and not value.isspace() and not value.startswith(prefix):
        return validate_id(value, what)
    if "\x00" in value:
        raise InvalidSessionIdError(f"{what} must not contain NUL characters")
    try:
        data = value.encode()
    except UnicodeEncodeError:
        raise InvalidSessionIdError(f"{what} holds an unpaired surrogate") from None
    return f"{prefix}{hashlib.sha256(data).hexdigest()}"


T = TypeVar("T")


async def finish_despite_cancellation(awaitable: Awaitable[T]) -> T:
    """Await *awaitable* to completion; a cancellation that arrived meanwhile is re-raised after."""
    # The work runs in a task of its own, which a cancellation of the caller does not
    # reach. The caller waits on a bare future the work sets as it ends: the caller
    # wakes on the next turn of the loop, where waiting on the task itself (with
    # ``asyncio.wait``) takes one more turn, for its done-callback, on every write.
    finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(_signalling(awaitable, finished))
    cancelled: asyncio.CancelledError | None = None
    try:
        await finished
    except asyncio.CancelledError as exc:
        cancelled = exc  # the caller's cancellation: it cancelled `finished`, not the task
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


async def _signalling(awaitable: Awaitable[T], finished: asyncio.Future[None]) -> T:
    """*awaitable*'s outcome; *finished* is set as it ends, however it ends."""
    try:
        return await awaitable
    finally:
        if not finished.done():
            finished.set_result(None)
