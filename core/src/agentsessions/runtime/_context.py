"""The glue between an agent's code and its session: one `ExecutionContext` per run.

An agent's step function is written once against ``context.events`` and
``context.state``. With a session attached those are the session's, and the run
saves them at its end; without one they belong to the context alone and vanish with
it, so the same code serves a one-off call and a long conversation.

Conflicts. Two runs of one session may overlap (two browser tabs, a retry). The
later save then fails with `SessionConflictError`, and the policy decides:

``on_conflict="merge"`` (the default) reloads the session and re-applies this run
onto it: the events this run appended go after the ones the other run appended
(appending is always safe to repeat), and this run's state changes are merged key
by key (top-level keys of ``state``): a key only this run changed takes this run's
value; a key both runs changed to different values is a real conflict and the save
raises `SessionConflictError`, writing nothing, so neither side is silently lost.
Pending tool calls merge by call id, so two runs may each ask for an approval, but
two runs can never both resolve one call. A run that rewrote or removed events it
had loaded is not merged either; it raises.

``on_conflict="raise"`` raises the `SessionConflictError` untouched.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel

from .. import _json
from .._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionNotFoundError,
)
from .._manager import SessionManager, backoff
from .._models import Event, EventsAndState, Session
from .._reading import reload
from ._approval import (
    PENDING_CALLS_KEY,
    Approval,
    PendingToolCall,
    PendingToolCalls,
    Tool,
    Toolbox,
    ToolCallNotFoundError,
    ToolOutcome,
    jsonable_result,
)
from ._compaction import CompactionPolicy, compact_session

__all__ = [
    "MERGE_RETRIES",
    "ConflictPolicy",
    "ExecutionContext",
    "RunResult",
    "RunStatus",
    "run_context",
]

ConflictPolicy = Literal["merge", "raise"]
RunStatus = Literal["completed", "waiting_for_approval"]
ModelT = TypeVar("ModelT", bound=BaseModel)

#: How often a merge is retried when yet another run saves in between.
MERGE_RETRIES = 16
_MISSING: Any = object()


@dataclass(frozen=True)
class RunResult:
    """How a run ended.

    ``status`` is ``"waiting_for_approval"`` while any tool call of the session waits
    for a decision (``pending`` lists them, oldest first), else ``"completed"``.
    ``events`` are the events this run added; ``session_id`` is None for a run
    without a session, whose events were not stored. ``version`` and
    ``event_count`` describe the stored session after the run's save.
    """

    status: RunStatus
    reply: str | None
    pending: tuple[PendingToolCall, ...] = ()
    session_id: str | None = None
    events: tuple[Event, ...] = ()
    outcomes: tuple[ToolOutcome, ...] = ()
    version: int | None = None
    event_count: int | None = None
    #: How many events the run's compaction replaced (0: none was due or possible).
    compacted: int = 0

    @property
    def stored(self) -> bool:
        """Whether this run's events were saved to a session."""
        return self.session_id is not None


class ExecutionContext(EventsAndState):
    """Everything one run of an agent works with: events, state, tools, and the session.

    Build one with `run_context` (which loads and saves the session), or directly:
    ``ExecutionContext()`` is a context without a session.
    """

    def __init__(
        self,
        session: Session | None = None,
        manager: SessionManager | None = None,
        *,
        user_id: str | None = None,
        tools: Toolbox | None = None,
        on_conflict: ConflictPolicy = "merge",
        last_events: int | None = None,
        author: str = "agent",
        compaction: CompactionPolicy | None = None,
    ) -> None:
        if session is not None and manager is None:
            raise InvalidInputError("a context with a session needs the manager that stores it")
        _check_compaction(compaction, manager)
        if on_conflict not in ("merge", "raise"):
            raise InvalidInputError(f"on_conflict must be 'merge' or 'raise', not {on_conflict!r}")
        self._session = session
        self._manager = manager
        self._user_id = user_id if session is None else session.user_id or user_id
        self.tools = tools if tools is not None else Toolbox()
        self._on_conflict: ConflictPolicy = on_conflict
        self._last_events = last_events
        #: The author name of the events the agent itself records.
        self.author = author
        self._own_events: list[Event] = []
        self._own_state: dict[str, Any] = {}
        self._saved_events: list[Event] = []  # this run's events already saved
        self._outcomes: list[ToolOutcome] = []
        self._compaction = compaction
        self._compacted = 0
        self._set_baseline()

    # -- what the agent reads and writes ----------------------------------------------

    @property
    def session(self) -> Session | None:
        """The attached session, or None for a run that stores nothing."""
        return self._session

    @property
    def manager(self) -> SessionManager | None:
        return self._manager

    @property
    def session_id(self) -> str | None:
        return None if self._session is None else self._session.session_id

    @property
    def user_id(self) -> str | None:
        return self._user_id

    @property
    def is_persistent(self) -> bool:
        """True when a session is attached, so what this run adds is saved when it ends."""
        return self._session is not None

    @property
    def events(self) -> list[Event]:
        """The conversation so far (the newest ones only if loaded with ``last_events``)."""
        return self._own_events if self._session is None else self._session.events

    @events.setter
    def events(self, value: list[Event]) -> None:
        if self._session is None:
            self._own_events = value
        else:
            self._session.events = value

    @property
    def state(self) -> dict[str, Any]:
        """The JSON state dict (the session's when one is attached)."""
        return self._own_state if self._session is None else self._session.state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        if self._session is None:
            self._own_state = value
        else:
            self._session.state = value

    @property
    def new_events(self) -> list[Event]:
        """The events this run added so far (including those already saved)."""
        return self._saved_events + self.events[self._base_len :]

    @property
    def outcomes(self) -> list[ToolOutcome]:
        """The tool calls this run made or resolved, in order."""
        return list(self._outcomes)

    # -- tools and approvals ----------------------------------------------------------

    @property
    def pending_calls(self) -> list[PendingToolCall]:
        """The tool calls of this session that wait for a decision, oldest first."""
        stored = self.get_model(PENDING_CALLS_KEY, PendingToolCalls)
        return list(stored.calls) if stored is not None else []

    def _set_pending(self, calls: list[PendingToolCall]) -> None:
        if calls:
            self.put_model(PENDING_CALLS_KEY, PendingToolCalls(calls=calls))
        else:
            self.state.pop(PENDING_CALLS_KEY, None)

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, *, reason: str = ""
    ) -> ToolOutcome:
        """Call a registered tool, or park the call if it needs approval.

        The call and its result are recorded as events. A tool that raises gives a
        ``"failed"`` outcome (and a ``tool_error`` event) instead of an exception, so
        a run always records what its tools did.
        """
        tool = self.tools.get(name)
        args = dict(arguments or {})
        _json.check_json(args, "arguments")  # it must be storable to wait for approval
        call = PendingToolCall(tool=name, arguments=args, reason=reason)
        self.add_event(
            self.author,
            {"tool": name, "arguments": args},
            kind="tool_call",
            call_id=call.id,
            requires_approval=tool.requires_approval,
        )
        if tool.requires_approval:
            self._set_pending([*self.pending_calls, call])
            self.add_event(self.author, reason or None, kind="approval_requested", call_id=call.id)
            outcome = ToolOutcome(call, "pending")
        else:
            outcome = await self._execute(tool, call)
        self._outcomes.append(outcome)
        return outcome

    async def resolve(self, approval: Approval) -> ToolOutcome:
        """Apply a human's decision to a pending call: run the tool, or record the refusal.

        The decision is saved (the call leaves the pending list) BEFORE the tool runs,
        and that save fails if another run decided the same call in between, so an
        approved tool runs at most once even when two runs race.
        """
        calls = self.pending_calls
        call = next((c for c in calls if c.id == approval.call_id), None)
        if call is None:
            raise ToolCallNotFoundError(approval.call_id, self.session_id, [c.id for c in calls])
        tool = self.tools.get(call.tool)  # an unknown tool fails before anything changes
        stored_calls = self.state.get(PENDING_CALLS_KEY)
        self._set_pending([c for c in calls if c.id != call.id])
        decision = self.add_event(
            "user",
            approval.note or ("approved" if approval.approved else "denied"),
            kind="approval",
            call_id=call.id,
            approved=approval.approved,
        )
        try:
            await self.save()
        except BaseException:
            # The claim lost (another run decided this call first): undo it here too,
            # so that the rest of this run can still be saved without it.
            if self.events and self.events[-1] is decision:
                self.events.pop()
            self.state[PENDING_CALLS_KEY] = stored_calls
            raise
        if approval.approved:
            outcome = await self._execute(tool, call)
        else:
            self.add_event(
                "tool", approval.note or None, kind="tool_denied", tool=call.tool, call_id=call.id
            )
            outcome = ToolOutcome(call, "denied", note=approval.note)
        self._outcomes.append(outcome)
        return outcome

    async def _execute(self, tool: Tool, call: PendingToolCall) -> ToolOutcome:
        try:
            raw = await tool.invoke(call.arguments)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            self.add_event("tool", error, kind="tool_error", tool=call.tool, call_id=call.id)
            return ToolOutcome(call, "failed", error=error)
        result = jsonable_result(raw)
        self.add_event("tool", result, kind="tool_result", tool=call.tool, call_id=call.id)
        return ToolOutcome(call, "done", result=result)

    def result(self, reply: str | None = None) -> RunResult:
        """This run's `RunResult` (call it after the run has saved)."""
        pending = tuple(self.pending_calls)
        session = self._session
        return RunResult(
            status="waiting_for_approval" if pending else "completed",
            reply=reply,
            pending=pending,
            session_id=self.session_id,
            events=tuple(self.new_events),
            outcomes=tuple(self._outcomes),
            version=None if session is None else session.version,
            event_count=(
                None if session is None else session.first_event_position + len(session.events)
            ),
            compacted=self._compacted,
        )

    # -- saving -------------------------------------------------------------------------

    def _set_baseline(self) -> None:
        """Remember what the session looks like in the store now, to merge against later."""
        if self._session is None:
            self._base_events: list[Event] = []
            self._base_len = 0
            self._base_state: dict[str, Any] = {}
            return
        self._base_events = list(self._session.events)
        self._base_len = len(self._base_events)
        self._base_state = copy.deepcopy(self._session.state)

    async def save(self) -> None:
        """Save the session now (`run_context` also does at the end). No-op without one."""
        session = self._session
        if session is None:
            return
        assert self._manager is not None  # guaranteed by __init__
        added = self._appended_events(session)
        try:
            await self._manager.save(session)
        except SessionConflictError as conflict:
            if self._on_conflict == "raise":
                raise
            if added is None:
                raise SessionConflictError(
                    session.session_id,
                    conflict.expected_version,
                    "this run changed events it had loaded, so it cannot be merged "
                    "onto the concurrent save",
                ) from conflict
            self._session = await self._merge(session, added, conflict)
        self._saved_events.extend(added if added is not None else ())
        self._set_baseline()

    async def compact(self) -> int:
        """Apply the context's `CompactionPolicy` now, if it is due; how many events it
        replaced. `run_context` calls it after the run's final save.

        Call it only when everything the run changed is saved: a compaction writes no
        state, and one that lost a race is retried on a fresh copy (see
        `CompactionPolicy`). Without a policy or a session it does nothing.
        """
        session, policy = self._session, self._compaction
        if session is None or policy is None:
            return 0
        assert self._manager is not None
        compacted, replaced = await compact_session(
            self._manager, session, policy, user_id=self._user_id, pending=_pending_ids
        )
        if replaced:
            self._session = compacted
            self._compacted += replaced
            self._set_baseline()
        return replaced

    def _appended_events(self, session: Session) -> list[Event] | None:
        """The events appended since the baseline, or None if earlier ones were changed."""
        events = session.events
        base = self._base_events
        if len(events) < len(base):
            return None
        for old, new in zip(base, events, strict=False):
            if old is not new and old != new:
                return None
        return events[len(base) :]

    async def _merge(
        self, ours: Session, added: list[Event], conflict: SessionConflictError
    ) -> Session:
        assert self._manager is not None
        held = ours._loaded  # what the store held when our save was built
        for attempt in range(MERGE_RETRIES):
            # Only what changed since the copy we hold is read, when that is safe.
            fresh = await reload(
                self._manager, ours.session_id, held, self._user_id, self._last_events
            )
            if fresh is None:
                # Deleted meanwhile: re-creating it would resurrect what the user erased.
                raise SessionNotFoundError(ours.session_id) from conflict
            fresh.state = _merge_state(self._base_state, ours.state, fresh.state, fresh)
            fresh.events.extend(added)
            try:
                await self._manager.save(fresh)
            except SessionConflictError:
                held = fresh._loaded
                await backoff(attempt)
                continue
            return fresh
        raise conflict


def _check_compaction(policy: object, manager: SessionManager | None) -> None:
    if policy is None:
        return
    if not isinstance(policy, CompactionPolicy):
        raise InvalidInputError(f"compaction must be a CompactionPolicy, not {policy!r}")
    if manager is not None and not manager.capabilities.compaction:
        raise InvalidInputError(
            f"a compaction policy needs a backend that compacts; {type(manager).__name__} "
            "does not (capabilities.compaction is False)"
        )


def _pending_ids(session: Session) -> set[str]:
    raw = session.state.get(PENDING_CALLS_KEY)
    return {call.id for call in _calls(raw)} if raw is not None else set()


def _merge_state(
    base: dict[str, Any], ours: dict[str, Any], theirs: dict[str, Any], fresh: Session
) -> dict[str, Any]:
    """Three-way merge of top-level state keys; see the module docstring for the rules."""
    merged = dict(theirs)
    for key in [*ours, *(k for k in base if k not in ours)]:
        mine = ours.get(key, _MISSING)
        before = base.get(key, _MISSING)
        if _same(mine, before):
            continue
        if key == PENDING_CALLS_KEY:
            calls = _merge_pending(before, mine, theirs.get(key, _MISSING), fresh)
            if calls:
                merged[key] = calls
            else:
                merged.pop(key, None)
            continue
        other = theirs.get(key, _MISSING)
        if not _same(other, before) and not _same(other, mine):
            raise SessionConflictError(
                fresh.session_id,
                fresh.version,
                f"state key {key!r} was changed both by this run and by a concurrent one; "
                "this run's save was not applied",
            )
        if mine is _MISSING:
            merged.pop(key, None)
        else:
            merged[key] = mine
    return merged


def _calls(raw: Any) -> list[PendingToolCall]:
    return [] if raw is _MISSING or raw is None else PendingToolCalls.model_validate(raw).calls


def _merge_pending(before: Any, mine: Any, other: Any, fresh: Session) -> Any:
    """Pending calls merge by id: ours added are added, ours removed must still be there."""
    base_ids = {call.id for call in _calls(before)}
    my_calls = _calls(mine)
    my_ids = {call.id for call in my_calls}
    their_calls = _calls(other)
    their_ids = {call.id for call in their_calls}
    removed = base_ids - my_ids
    gone = sorted(removed - their_ids)
    if gone:
        raise SessionConflictError(
            fresh.session_id,
            fresh.version,
            f"tool call {gone[0]!r} was approved or denied by a concurrent run",
        )
    calls = [c for c in their_calls if c.id not in removed]
    calls += [c for c in my_calls if c.id not in base_ids and c.id not in their_ids]
    return PendingToolCalls(calls=calls).model_dump(mode="json") if calls else None


def _same(a: Any, b: Any) -> bool:
    """JSON equality: unlike ``==``, ``1`` is not ``True`` and ``1`` is not ``1.0``."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return a.keys() == b.keys() and all(_same(a[key], b[key]) for key in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@asynccontextmanager
async def run_context(
    manager: SessionManager | None = None,
    *,
    session_id: str | None = None,
    user_id: str | None = None,
    last_events: int | None = None,
    tools: Toolbox | None = None,
    on_conflict: ConflictPolicy = "merge",
    author: str = "agent",
    compaction: CompactionPolicy | None = None,
) -> AsyncIterator[ExecutionContext]:
    """One run: ``async with run_context(manager, session_id=...) as ctx:``.

    With a *session_id* the session is fetched or created (a session owned by
    another *user_id* raises `SessionOwnershipError`), attached to the context and
    saved when the block exits normally (see the module docstring for conflicts).
    If the block raises, nothing more is saved. Without a *session_id* the run is
    independent: the context has its own events and state and nothing is stored.
    ``last_events=N`` loads only the newest N events, for agents that need only
    recent history; the run can still append. With a *compaction* policy the session
    is compacted after the final save when the policy says it is due (see
    `CompactionPolicy`); a run without a session ignores it.
    """
    if session_id is None:
        yield ExecutionContext(
            None, manager, user_id=user_id, tools=tools, on_conflict=on_conflict, author=author
        )
        return
    if manager is None:
        raise InvalidInputError("a run with a session_id needs a manager to store the session")
    _check_compaction(compaction, manager)
    if on_conflict not in ("merge", "raise"):
        raise InvalidInputError(f"on_conflict must be 'merge' or 'raise', not {on_conflict!r}")
    session = await manager.get_or_create(session_id, user_id, last_events=last_events)
    context = ExecutionContext(
        session,
        manager,
        user_id=user_id,
        tools=tools,
        on_conflict=on_conflict,
        last_events=last_events,
        author=author,
        compaction=compaction,
    )
    yield context
    await context.save()
    await context.compact()
