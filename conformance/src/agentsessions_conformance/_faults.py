"""Lost replies injected at a backend's write hooks: the kit's fault at the manager's edge.

Every backend is a `SessionManager`, so the kit can wrap any write hook of one manager
(``_save``, ``_compact``, ``_restore``, ``_create``, ``_delete``, ``_fork``,
``_rewind``) on that instance alone:
let the real call land and then raise `BackendUnavailableError` (the reply was lost),
or raise before anything is sent (the request was lost). What the manager and backend
must make of that ambiguity is what the lost-reply clauses prove.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentsessions import BackendUnavailableError, SessionManager

__all__ = ["LostReplies", "WRITE_HOOKS", "lost_replies"]

#: The hooks `lost_replies` may wrap.
WRITE_HOOKS = ("_save", "_compact", "_restore", "_create", "_delete", "_fork", "_rewind")


@dataclass
class LostReplies:
    """How many faults are still to come, and how many calls reached the hook."""

    left: int
    calls: int = 0
    lost: int = 0


@contextlib.contextmanager
def lost_replies(
    manager: SessionManager,
    hook: str | tuple[str, ...] = "_save",
    *,
    times: int = 1,
    landed: bool = True,
) -> Iterator[LostReplies]:
    """Within the block, the next *times* calls of *manager*'s *hook* raise
    `BackendUnavailableError`: after the real call returned when *landed* (its reply
    was lost), before calling it otherwise (its request was lost). Later calls go
    through. A tuple of hooks shares the *times* (a fork may reach ``_fork`` or, made
    by copy, ``_restore``). Only this manager object is affected; the hooks are
    restored on exit.
    """
    hooks = (hook,) if isinstance(hook, str) else tuple(hook)
    unknown = [name for name in hooks if name not in WRITE_HOOKS]
    if unknown or not hooks:
        raise ValueError(f"lost_replies wraps hooks of {WRITE_HOOKS}, not {hook!r}")
    if type(times) is not int or times < 0:
        raise ValueError(f"times must be an int >= 0, not {times!r}")
    faults = LostReplies(left=times)

    def faulty(real: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            faults.calls += 1
            if faults.left <= 0:
                return await real(*args, **kwargs)
            faults.left -= 1
            if landed:
                await real(*args, **kwargs)
            faults.lost += 1
            what = "the reply was lost after the write landed" if landed else "the request was lost"
            raise BackendUnavailableError(manager.url, f"conformance kit fault: {what}")

        return call

    for name in hooks:
        setattr(manager, name, faulty(getattr(manager, name)))
    try:
        yield faults
    finally:
        for name in hooks:
            with contextlib.suppress(AttributeError):
                delattr(manager, name)
