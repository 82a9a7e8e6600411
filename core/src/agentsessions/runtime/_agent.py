"""`Agent`: the base class whose `run` is one turn on a session (load, approve, step, save)."""

from __future__ import annotations

import abc

from .._errors import InvalidInputError
from .._manager import SessionManager
from .._memory import MemorySessionManager
from ._approval import Approval, Toolbox
from ._compaction import CompactionPolicy
from ._context import ConflictPolicy, ExecutionContext, RunResult, run_context

__all__ = ["Agent"]


class Agent(abc.ABC):
    """Base class of an agent whose runs use sessions.

    Subclasses implement `step` (and register tools on ``self.tools``). An agent
    given no manager keeps its sessions in its own in-memory store, which lives as
    long as the agent object. With ``compaction=CompactionPolicy(...)`` each run
    compacts its session after saving, when the policy says it is due.
    """

    #: The author name of the events the agent records.
    name: str = "agent"

    def __init__(
        self,
        manager: SessionManager | None = None,
        *,
        last_events: int | None = None,
        on_conflict: ConflictPolicy = "merge",
        compaction: CompactionPolicy | None = None,
    ) -> None:
        self.manager: SessionManager = manager if manager is not None else MemorySessionManager()
        self.tools = Toolbox()
        self.last_events = last_events
        self.on_conflict: ConflictPolicy = on_conflict
        #: Applied after each run's save (see `CompactionPolicy`); None: never compact.
        self.compaction = compaction

    @abc.abstractmethod
    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        """Handle one turn and return the reply. Approvals are resolved before it is called."""

    async def run(
        self,
        message: str | None = None,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        approval: Approval | None = None,
        fork_from: tuple[str, str | None] | None = None,
    ) -> RunResult:
        """One turn: load or create the session, resolve *approval*, step, save.

        ``fork_from=(source_id, event_id)`` first forks *session_id* (which must be
        given, and new) from *source_id*, keeping its events up to and including
        *event_id* (None: all of them; see `SessionManager.fork`), then runs the turn
        on the fork: "edit an earlier message and try again" leaves the source as it was.
        """
        if fork_from is not None:
            await self._fork_for_run(fork_from, session_id, user_id)
        async with run_context(
            self.manager,
            session_id=session_id,
            user_id=user_id,
            last_events=self.last_events,
            tools=self.tools,
            on_conflict=self.on_conflict,
            author=self.name,
            compaction=self.compaction,
        ) as context:
            if approval is not None:
                await context.resolve(approval)
            reply = await self.step(context, message)
        # Built after the block so that it reflects what was saved.
        return context.result(reply)

    async def _fork_for_run(
        self, fork_from: object, session_id: str | None, user_id: str | None
    ) -> None:
        if not isinstance(fork_from, tuple) or len(fork_from) != 2:
            raise InvalidInputError(
                f"fork_from must be a (session_id, event_id) pair, not {fork_from!r}"
            )
        if session_id is None:
            raise InvalidInputError("fork_from needs the new session's id: pass session_id")
        source_id, event_id = fork_from
        await self.manager.fork(source_id, session_id, through_event_id=event_id, user_id=user_id)
