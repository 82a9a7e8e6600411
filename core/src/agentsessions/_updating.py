"""`SessionManager.update` on its own: load a copy, apply the function, save, retry a lost race."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from . import _log
from ._errors import SessionConflictError, SessionNotFoundError
from ._models import Session
from ._reading import reload
from ._retry import backoff
from ._saving import save_until_answered
from ._tracking import LoadedState

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["copy_to_update", "update_alone"]


async def update_alone(
    manager: SessionManager,
    session_id: str,
    fn: Callable[[Session], Awaitable[object] | object],
    user_id: str | None,
    create: bool,
    retries: int,
    last_events: int | None,
) -> Session:
    """`update` without group commit: its own loads and saves (inside its deadline)."""
    held: LoadedState | None = None
    for attempt in range(retries + 1):
        session = await copy_to_update(manager, session_id, held, user_id, create, last_events)
        held = session._loaded
        result = fn(session)
        if inspect.isawaitable(result):
            await result
        try:
            await save_until_answered(manager, session)
        except SessionConflictError:
            if attempt >= retries:
                _log.retries_exhausted(manager, retries)
                raise
            await backoff(attempt)
            continue
        return session
    raise AssertionError("unreachable")  # pragma: no cover


async def copy_to_update(
    manager: SessionManager,
    session_id: str,
    held: LoadedState | None,
    user_id: str | None,
    create: bool,
    last_events: int | None,
) -> Session:
    """The copy an `update` attempt applies its change to: *held* (the tracking of
    the copy that lost a race, if any) extended with what changed since, or a fresh
    load (created first with *create*). `SessionNotFoundError` if there is none."""
    session: Session | None = None
    if held is not None:
        session = await reload(manager, session_id, held, user_id, last_events)
    if session is None and create:
        session = await manager.get_or_create(session_id, user_id, last_events=last_events)
    elif session is None and held is None:
        session = await manager.get(session_id, user_id=user_id, last_events=last_events)
    if session is None:
        raise SessionNotFoundError(session_id)
    return session
