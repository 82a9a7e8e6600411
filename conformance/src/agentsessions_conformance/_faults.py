"""Lost replies injected at a backend's write hooks: the kit's fault at the manager's edge.

Every backend is a `SessionManager`, so the kit can wrap any write hook of one manager
(``_save``, ``_compact``, ``_restore``, ``_create``, ``_delete``) on that instance alone:
let the real call land and then raise `BackendUnavailableError` (the reply was lost),
or raise before anything is sent (the request was lost). What the manager and backend
must make of that ambiguity is what the lost-reply clauses prove.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from agentsessions import BackendUnavailableError, SessionManager

__all__ = ["LostReplies", "WRITE_HOOKS", "lost_replies"]

#: The hooks `lost_replies` may wrap.
WRITE_HOOKS = ("_save", "_compact", "_restore", "_create", "_delete")


@dataclass
class LostReplies:
    """How many faults are still to come, and how many calls reached the hook."""

    left: int
    calls: int = 0
    lost: int = 0


@contextlib.contextmanager
def lost_replies(
    manager: SessionManager, hook: str = "_save", *, times: int = 1, landed: bool = True
) -> Iterator[LostReplies]:
    """Within the block, the next *times* calls of *manager*'s *hook* raise
    `BackendUnavailableError`: after the real call returned when *landed* (its reply
    was lost), before calling it otherwise (its request was lost). Later calls go
    through. Only this manager object is affected; the hook is restored on exit.
    """
    if hook not in WRITE_HOOKS:
        raise ValueError(f"lost_replies wraps one of {WRITE_HOOKS}, not {hook!r}")
    if type(times) is not int or times < 0:
        raise ValueError(f"times must be an int >= 0, not {times!r}")
    real = getattr(manager, hook)
    faults = LostReplies(left=times)

    async def faulty(*args: Any, **kwargs: Any) -> Any:
        faults.calls += 1
        if faults.left <= 0:
            return await real(*args, **kwargs)
        faults.left -= 1
        if landed:
            await real(*args, **kwargs)
        faults.lost += 1
        what = "the reply was lost after the write landed" if landed else "the request was lost"
        raise BackendUnavailableError(manager.url, f"conformance kit fault: {what}")

    setattr(manager, hook, faulty)
    try:
        yield faults
    finally:
        with contextlib.suppress(AttributeError):
            delattr(manager, hook)
