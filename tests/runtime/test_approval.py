"""Tools that wait for a human: pause, resume approved or denied, stale ids, process restarts."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from agentsessions import SessionConflictError, SessionManager
from agentsessions.runtime import (
    PENDING_CALLS_KEY,
    Agent,
    Approval,
    ExecutionContext,
    PendingToolCall,
    PendingToolCalls,
    RunResult,
    Toolbox,
    ToolCallNotFoundError,
    UnknownToolError,
    run_context,
)

WORKER = Path(__file__).with_name("approval_worker.py")


class Transfers(Agent):
    """Moves money only with approval; looks up balances freely."""

    def __init__(self, manager: SessionManager | None = None) -> None:
        super().__init__(manager)
        self.done: list[tuple[str, int]] = []
        self.tools.register(self.transfer, requires_approval=True)
        self.tools.register(self.balance)

    async def transfer(self, to: str, amount: int) -> dict[str, Any]:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.done.append((to, amount))
        return {"to": to, "amount": amount}

    def balance(self) -> int:
        return 100

    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        if message is None:
            return None
        to, amount = message.split()
        outcome = await context.call_tool(
            "transfer", {"to": to, "amount": int(amount)}, reason="moves money"
        )
        return outcome.call.id


async def test_a_call_needing_approval_pauses_and_is_stored_as_json() -> None:
    agent = Transfers()
    result = await agent.run("bob 5", session_id="s")
    assert result.status == "waiting_for_approval"
    assert agent.done == []
    [pending] = result.pending
    assert isinstance(pending, PendingToolCall)
    assert (pending.tool, pending.arguments, pending.reason) == (
        "transfer",
        {"to": "bob", "amount": 5},
        "moves money",
    )
    assert pending.id == result.reply
    stored = await agent.manager.get("s")
    assert stored is not None
    # Plain JSON in the state, validated back into the model.
    raw = stored.state[PENDING_CALLS_KEY]
    assert json.loads(json.dumps(raw)) == raw
    assert stored.get_model(PENDING_CALLS_KEY, PendingToolCalls) == PendingToolCalls(
        calls=[pending]
    )
    kinds = [e.metadata.get("kind") for e in stored.events]
    assert kinds == ["tool_call", "approval_requested"]


async def test_approved_call_runs_once_and_records_its_result() -> None:
    agent = Transfers()
    call_id = (await agent.run("bob 5", session_id="s")).reply
    assert call_id is not None
    result = await agent.run(session_id="s", approval=Approval(call_id=call_id, approved=True))
    assert result.status == "completed" and result.pending == ()
    assert agent.done == [("bob", 5)]
    [outcome] = result.outcomes
    assert outcome.status == "done" and outcome.result == {"to": "bob", "amount": 5}
    stored = await agent.manager.get("s")
    assert stored is not None
    assert PENDING_CALLS_KEY not in stored.state
    approval, tool_result = stored.events[-2:]
    assert approval.metadata == {"kind": "approval", "call_id": call_id, "approved": True}
    assert tool_result.author == "tool"
    assert tool_result.content == {"to": "bob", "amount": 5}
    assert tool_result.metadata == {"kind": "tool_result", "tool": "transfer", "call_id": call_id}
    # The same id again is stale now: a clear error, and the tool does not run again.
    with pytest.raises(ToolCallNotFoundError, match=f"no pending tool call '{call_id}'"):
        await agent.run(session_id="s", approval=Approval(call_id=call_id, approved=True))
    assert agent.done == [("bob", 5)]


async def test_denied_call_records_the_refusal_and_does_not_run() -> None:
    agent = Transfers()
    call_id = (await agent.run("bob 5", session_id="s")).reply
    assert call_id is not None
    result = await agent.run(
        session_id="s", approval=Approval(call_id=call_id, approved=False, note="too much")
    )
    assert result.status == "completed"
    assert agent.done == []
    assert result.outcomes[0].status == "denied" and result.outcomes[0].note == "too much"
    stored = await agent.manager.get("s")
    assert stored is not None
    assert stored.events[-1].metadata == {
        "kind": "tool_denied",
        "tool": "transfer",
        "call_id": call_id,
    }
    assert stored.events[-1].content == "too much"


async def test_wrong_call_id_names_what_is_pending_and_changes_nothing() -> None:
    agent = Transfers()
    call_id = (await agent.run("bob 5", session_id="s")).reply
    before = await agent.manager.get("s")
    with pytest.raises(ToolCallNotFoundError) as caught:
        await agent.run(session_id="s", approval=Approval(call_id="call_nope", approved=True))
    message = str(caught.value)
    assert "'call_nope'" in message and f"'{call_id}'" in message and "'s'" in message
    assert isinstance(caught.value, ValueError)
    after = await agent.manager.get("s")
    assert before is not None and after is not None
    assert after.version == before.version and after.state == before.state


async def test_several_calls_wait_and_are_resolved_one_by_one() -> None:
    agent = Transfers()
    first = (await agent.run("bob 5", session_id="s")).reply
    second_result = await agent.run("eve 7", session_id="s")
    assert [call.id for call in second_result.pending] == [first, second_result.reply]
    assert first is not None and second_result.reply is not None
    result = await agent.run(
        session_id="s", approval=Approval(call_id=second_result.reply, approved=True)
    )
    assert result.status == "waiting_for_approval"
    assert [call.id for call in result.pending] == [first]
    assert agent.done == [("eve", 7)]


async def test_a_failing_tool_is_recorded_not_raised() -> None:
    agent = Transfers()
    call_id = (await agent.run("bob -1", session_id="s")).reply
    assert call_id is not None
    result = await agent.run(session_id="s", approval=Approval(call_id=call_id, approved=True))
    [outcome] = result.outcomes
    assert outcome.status == "failed" and not outcome.ok
    assert outcome.error == "ValueError: amount must be positive"
    stored = await agent.manager.get("s")
    assert stored is not None
    assert stored.events[-1].metadata["kind"] == "tool_error"
    assert PENDING_CALLS_KEY not in stored.state  # claimed: it will not be retried by accident


async def test_tools_without_approval_run_at_once_sync_or_async() -> None:
    tools = Toolbox()
    tools.register(lambda a, b: a + b, name="add")

    async def shout(text: str) -> str:
        return text.upper()

    tools.register(shout)
    context = ExecutionContext(tools=tools)
    assert (await context.call_tool("add", {"a": 2, "b": 3})).result == 5
    assert (await context.call_tool("shout", {"text": "hi"})).result == "HI"
    assert [e.metadata["kind"] for e in context.events] == [
        "tool_call",
        "tool_result",
        "tool_call",
        "tool_result",
    ]
    with pytest.raises(UnknownToolError, match=r"'nope'.*known: add, shout"):
        await context.call_tool("nope")


async def test_non_json_results_are_stored_as_text() -> None:
    tools = Toolbox()
    tools.register(lambda: {1, 2}, name="aset")
    context = ExecutionContext(tools=tools)
    outcome = await context.call_tool("aset")
    assert outcome.result == "{1, 2}"


async def test_a_run_without_session_can_resolve_within_itself() -> None:
    agent = Transfers()
    async with run_context(tools=agent.tools) as context:
        outcome = await context.call_tool("transfer", {"to": "bob", "amount": 1})
        assert context.pending_calls == [outcome.call]
        await context.resolve(Approval(call_id=outcome.call.id, approved=True))
        assert context.pending_calls == []
    assert agent.done == [("bob", 1)]


async def test_two_runs_resolving_one_call_run_the_tool_once(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first_manager, second_manager = manager_pair
    first, second = Transfers(first_manager), Transfers(second_manager)
    call_id = (await first.run("bob 5", session_id="race")).reply
    assert call_id is not None
    approval = Approval(call_id=call_id, approved=True)
    async with (
        run_context(first_manager, session_id="race", tools=first.tools) as one,
        run_context(second_manager, session_id="race", tools=second.tools) as two,
    ):
        await one.resolve(approval)
        with pytest.raises(SessionConflictError, match="approved or denied by a concurrent"):
            await two.resolve(approval)
        # The losing run may go on; its claim is undone and the rest still saves.
        assert two.pending_calls == [one.outcomes[0].call]
        two.add_event("agent", "someone else handled it")
    assert first.done + second.done == [("bob", 5)]
    stored = await first_manager.get("race")
    assert stored is not None
    assert PENDING_CALLS_KEY not in stored.state
    # The claim was saved first, then the inner run's note, then (merged) the result.
    assert [e.metadata.get("kind") for e in stored.events[-3:]] == [
        "approval",
        None,
        "tool_result",
    ]


def test_pending_approval_survives_a_process_restart(sqlite_url: str, tmp_path: Path) -> None:
    session_id = f"restart-{uuid.uuid4().hex}"
    outbox = tmp_path / "outbox.txt"

    def worker(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(WORKER), sqlite_url, session_id, str(outbox), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    requested = worker("request")
    assert requested["status"] == "waiting_for_approval"
    assert not outbox.exists()
    # A different process, knowing only the call id, resumes the call.
    resumed = worker("approve", requested["reply"])
    assert resumed == {"status": "completed", "reply": "done"}
    assert outbox.read_text() == "bob: hello bob\n"
    # A third process with the same (now stale) id gets the clear error, and no mail.
    stale = subprocess.run(
        [sys.executable, str(WORKER), sqlite_url, session_id, str(outbox), "deny",
         requested["reply"]],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert stale.returncode != 0
    assert "ToolCallNotFoundError" in stale.stderr
    assert outbox.read_text() == "bob: hello bob\n"


def test_run_result_status_follows_pending_calls() -> None:
    call = PendingToolCall(tool="t")
    assert RunResult(status="waiting_for_approval", reply=None, pending=(call,)).pending == (call,)
