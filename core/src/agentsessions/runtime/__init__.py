"""What an agent needs to run on sessions: a context per run, tools, and approvals.

::

    from agentsessions.runtime import run_context

    async with run_context(manager, session_id="chat-42", user_id="ada") as ctx:
        ctx.add_event("user", "Hi, I'm Ada")
        ...  # read ctx.events / ctx.state; the session is saved when the block exits

Subclass `Agent` for the whole turn (load or create, resolve an `Approval`, step,
save). A tool registered with ``requires_approval=True`` does not run when called:
the call is stored in the session as a `PendingToolCall`, the run ends with
``status="waiting_for_approval"``, and a later run (in any process) passes the
`Approval` that runs or refuses it.
"""

from ._agent import Agent
from ._approval import (
    PENDING_CALLS_KEY,
    Approval,
    PendingToolCall,
    PendingToolCalls,
    Tool,
    Toolbox,
    ToolCallNotFoundError,
    ToolOutcome,
    UnknownToolError,
)
from ._compaction import CompactionPolicy, Summarizer, Summary
from ._context import (
    ConflictPolicy,
    ExecutionContext,
    RunResult,
    RunStatus,
    run_context,
)

__all__ = [
    "PENDING_CALLS_KEY",
    "Agent",
    "Approval",
    "CompactionPolicy",
    "ConflictPolicy",
    "ExecutionContext",
    "PendingToolCall",
    "PendingToolCalls",
    "RunResult",
    "RunStatus",
    "Summarizer",
    "Summary",
    "Tool",
    "ToolCallNotFoundError",
    "ToolOutcome",
    "Toolbox",
    "UnknownToolError",
    "run_context",
]
