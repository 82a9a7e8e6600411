"""Group commit for `SessionManager.update`: concurrent calls on one session share saves.

Calls of one manager on one session (same ``user_id``, ``create`` and ``last_events``,
in one event loop) form a *lane*. While one call of a lane is loading and saving, later
ones wait in its queue instead of loading the same version and losing the race to it.
When the call in flight ends, the first one waiting becomes the *leader*: it takes
every call waiting, loads a fresh copy once, applies their functions to it in the
order they were called (each sees what the earlier ones did, as if they ran one after
the other), and saves them all in one save. A race lost to another process retries the
whole group on the fresh copy, as a single call would.

The outcome of each call is its own:

* a function that raises fails its call only: the copy it may have half changed is
  dropped and the others are applied again, without it, to a fresh copy;
* a call runs out of retries on its own count of lost races;
* a save refused for what the changes hold (an input error, too large) is tried again
  with each call on its own, so that only the call whose change is refused fails;
* `BackendReadOnlyError` and `BackendLockedError` (nothing was written) fail every call
  of the group at once;
* if the leader's save may have landed but its call ended before the answer (its
  deadline, a cancellation), every call of the group raises `BackendTimeoutError`: its
  change is stored once or not at all, as for a single call.

Everything a leader does runs in its own task, under its own deadline; a call waiting
is bounded by its own. A call made from inside a function of a group (the function
updating its own session again) does not wait for the group, which is waiting for it:
it runs on its own, as a separate writer.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import _json, _log
from ._errors import (
    BackendLockedError,
    BackendReadOnlyError,
    BackendTimeoutError,
    BackendUnavailableError,
    SessionConflictError,
    SessionError,
)
from ._models import Session
from ._retry import backoff
from ._saving import save_until_answered
from ._tracking import mark_loaded
from ._updating import copy_to_update, update_alone

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = ["Lane", "grouped_update"]

Fn = Callable[[Session], "Awaitable[object] | object"]

#: The lanes whose group the current task (or a task it started) is applying.
_APPLYING: contextvars.ContextVar[frozenset[Hashable]] = contextvars.ContextVar(
    "agentsessions_update_lanes", default=frozenset()
)

#: The answer that makes a waiting call the leader of the next group.
_LEAD = object()


@dataclass(eq=False)
class _Call:
    fn: Fn
    retries: int
    #: The caller's context variables, for its fn to run under wherever it is applied.
    context: contextvars.Context = field(default_factory=contextvars.copy_context)
    #: Made when the call has to wait (most calls never do).
    answer: asyncio.Future[object] | None = None
    conflicts: int = 0
    #: Saved without the others (its change, with theirs, was refused as a whole).
    alone: bool = False

    @property
    def gone(self) -> bool:
        """Answered already, or its caller gave up waiting."""
        return self.answer is not None and self.answer.done()

    def settle(self, outcome: object) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_result(outcome)  # a caller that gave up waits no more

    def fail(self, error: BaseException) -> None:
        if self.answer is not None and not self.answer.done():
            self.answer.set_exception(error)


@dataclass(eq=False)
class Lane:
    """The calls waiting behind the one in flight (a lane exists while one is)."""

    waiting: deque[_Call] = field(default_factory=deque)


async def grouped_update(
    manager: SessionManager,
    session_id: str,
    fn: Fn,
    user_id: str | None,
    create: bool,
    retries: int,
    last_events: int | None,
) -> Session:
    """`SessionManager.update` with group commit (run inside the call's deadline)."""
    loop = asyncio.get_running_loop()
    key: Hashable = (loop, session_id, user_id, create, last_events)
    if key in _APPLYING.get():
        return await update_alone(manager, session_id, fn, user_id, create, retries, last_events)
    lanes = manager._lanes
    mine = _Call(fn, retries)
    lane = lanes.get(key)
    if lane is None:
        lane = lanes[key] = Lane()
    else:
        mine.answer = loop.create_future()
        lane.waiting.append(mine)
        try:
            outcome = await mine.answer
        except BaseException:
            if mine in lane.waiting:
                lane.waiting.remove(mine)  # never taken: nothing of fn was applied
            elif _told_to_lead(mine):
                _hand_on(lanes, key, lane)
            raise
        if outcome is not _LEAD:
            assert isinstance(outcome, Session)
            return outcome
    token = _APPLYING.set(_APPLYING.get() | {key})
    try:
        return await _lead(manager, lane, mine, session_id, user_id, create, last_events)
    finally:
        _APPLYING.reset(token)
        _hand_on(lanes, key, lane)


def _told_to_lead(call: _Call) -> bool:
    answer = call.answer
    return (
        answer is not None
        and answer.done()
        and not answer.cancelled()
        and answer.exception() is None
        and (answer.result() is _LEAD)
    )


def _hand_on(lanes: dict[Hashable, Lane], key: Hashable, lane: Lane) -> None:
    """The call in flight is over: the first one still waiting leads the next group."""
    while lane.waiting:
        call = lane.waiting.popleft()
        if not call.gone:
            call.settle(_LEAD)
            return
    if lanes.get(key) is lane:
        del lanes[key]


def _join(lane: Lane, group: list[_Call]) -> None:
    """Move the calls waiting into *group*, up to the first one that must go alone."""
    if any(call.alone for call in group):
        return
    while lane.waiting and not lane.waiting[0].alone:
        call = lane.waiting.popleft()
        if not call.gone:
            group.append(call)


async def _apply(group: list[_Call], session: Session) -> tuple[_Call, Exception] | None:
    """Apply the group's functions in order; the first one that raises, and what.

    Each runs under its caller's context variables, as if its caller had run it (an
    async one in a task of its own made in that context), and with the leader's lanes
    marked as being applied, so that an update() it makes of its own session runs alone.
    """
    applying = _APPLYING.get()
    for call in group:
        try:
            call.context.run(_APPLYING.set, applying)
            result = call.context.run(call.fn, session)
            if inspect.isawaitable(result):
                await call.context.run(asyncio.ensure_future, result)
        except Exception as exc:
            return call, exc
    return None


async def _lead(
    manager: SessionManager,
    lane: Lane,
    mine: _Call,
    session_id: str,
    user_id: str | None,
    create: bool,
    last_events: int | None,
) -> Session:
    group = [mine]
    _join(lane, group)
    held = None
    attempt = 0
    sending = False
    try:
        while True:
            # A fresh copy: after a first attempt, what changed since the one held (its
            # tracking still has the stored events, whatever the functions did to it).
            session = await copy_to_update(manager, session_id, held, user_id, create, last_events)
            held = session._loaded
            # A caller that gave up waiting (its deadline, a cancellation) before its
            # change was sent: it is dropped, so it is not stored.
            group[1:] = [call for call in group[1:] if not call.gone]
            failed = await _apply(group, session)
            if failed is not None:
                call, error = failed
                group.remove(call)
                if call is mine:
                    raise error
                call.fail(error)
                continue
            sending = True
            try:
                await save_until_answered(manager, session)
            except SessionConflictError as exc:
                sending = False
                for call in [*group]:
                    call.conflicts += 1
                    if call.conflicts > call.retries and call is not mine:
                        _log.retries_exhausted(manager, call.retries)
                        group.remove(call)
                        call.fail(exc)
                if mine.conflicts > mine.retries:
                    _log.retries_exhausted(manager, mine.retries)
                    raise
                await backoff(attempt)
                attempt += 1
                _join(lane, group)
                continue
            except (BackendReadOnlyError, BackendLockedError) as exc:
                sending = False
                for call in group[1:]:
                    call.fail(exc)
                del group[1:]
                raise
            except BackendUnavailableError:
                raise  # the deadline passed while re-sending: the outcome is unknown
            except SessionError:
                # Refused for what the changes hold, so nothing was written: which call's
                # change it is, only saving each on its own tells.
                sending = False
                if len(group) == 1:
                    raise
                for call in group[1:]:
                    call.alone = True
                lane.waiting.extendleft(reversed(group[1:]))
                del group[1:]
                mine.alone = True
                continue
            sending = False
            for call in group[1:]:
                call.settle(_stored_copy(session))
            return session
    except BaseException:
        others = group[1:] if group and group[0] is mine else [c for c in group if c is not mine]
        if sending:
            unknown = BackendTimeoutError(
                manager.url,
                "update",
                manager.options.timeout,
                "the update() whose save carried this change with others' ended before the "
                "backend answered; the change is stored once or not at all (get tells)",
            )
            for call in others:
                call.fail(unknown)
        else:
            # Nothing of theirs was sent: the next leader applies them afresh.
            lane.waiting.extendleft(reversed(others))
        raise


def _stored_copy(session: Session) -> Session:
    """A copy of *session* just saved, tracked as a fresh load of it (for one caller)."""
    loaded = session._loaded
    copy = Session.model_construct(
        session_id=session.session_id,
        user_id=session.user_id,
        events=list(session.events),
        state=_json.loads(_json.dumps(session.state)),
        created_at=session.created_at,
        updated_at=session.updated_at,
        version=session.version,
    )
    mark_loaded(copy, offset=loaded.offset, partial=loaded.partial, lineage=loaded.lineage)
    copy._loaded.shift = loaded.shift
    return copy
