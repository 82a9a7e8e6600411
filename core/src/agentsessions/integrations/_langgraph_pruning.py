"""The LangGraph saver's pruning: keep a namespace's newest checkpoint, or drop the
checkpoints of some runs, each in one version-checked write retried after a lost race."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from .._errors import SessionConflictError
from .._manager import SessionManager
from .._models import Event, Session
from ._langgraph_layout import CHECKPOINT_AUTHOR, WRITES_AUTHOR, _reach_of

__all__ = ["drop_runs", "keep_latest"]


async def keep_latest(manager: SessionManager, session: Session, retries: int) -> None:
    async def step(session: Session) -> None:
        head = session.state.get("head")
        events = session.events
        cut = len(events) - _reach_of(events, head)
        if not cut or cut == len(events):
            return  # nothing before the newest checkpoint (or no checkpoint)
        kept = [
            event
            for event in events[cut:]
            if (event.author == CHECKPOINT_AUTHOR and event.content.get("id") == head)
            or (event.author == WRITES_AUTHOR and event.content.get("checkpoint_id") == head)
        ]
        if manager.capabilities.compaction and len(kept) == len(events) - cut:
            await manager.compact(session, events[cut - 1].id, [])
        else:
            session.events[:] = kept
            session.state["reach"] = len(kept)
            session.state["early"] = {}
            await manager.save(session)

    await _retried(manager, session, retries, "prune", step)


async def drop_runs(
    manager: SessionManager, session: Session, runs: set[str], retries: int
) -> None:
    async def step(session: Session) -> None:
        dropped = {
            str(event.content.get("id"))
            for event in session.events
            if event.author == CHECKPOINT_AUTHOR and event.metadata.get("run_id") in runs
        }
        if not dropped:
            return
        kept: list[Event] = [
            event
            for event in session.events
            if not (
                (event.author == CHECKPOINT_AUTHOR and str(event.content.get("id")) in dropped)
                or (
                    event.author == WRITES_AUTHOR
                    and str(event.content.get("checkpoint_id")) in dropped
                )
            )
        ]
        heads = [event.content.get("id") for event in kept if event.author == CHECKPOINT_AUTHOR]
        session.events[:] = kept
        session.state["early"] = {}
        if heads:
            session.state["head"] = heads[-1]
            session.state["reach"] = _reach_of(kept, heads[-1])
        else:
            session.state.pop("head", None)
            session.state["reach"] = 1
        await manager.save(session)

    await _retried(manager, session, retries, "delete_for_runs", step)


async def _retried(
    manager: SessionManager,
    session: Session,
    retries: int,
    what: str,
    step: Callable[[Session], Awaitable[None]],
) -> None:
    """*step* (one version-checked write, or none if nothing is to change), reloading the
    session and trying again after a lost race, at most *retries* times."""
    for _attempt in range(retries + 1):
        try:
            await step(session)
            return
        except SessionConflictError:
            reloaded = await manager.get(session.session_id)
            if reloaded is None:
                return
            session = reloaded
    raise SessionConflictError(session.session_id, session.version, f"{what} kept losing races")
