"""ExecutionContext and the run flow: get or create, save on exit, nothing stored without an id."""

from __future__ import annotations

import pytest
from agentsessions import (
    InvalidInputError,
    MemorySessionManager,
    SessionManager,
    SessionOwnershipError,
)
from agentsessions.runtime import Agent, ExecutionContext, RunResult, run_context
from pydantic import BaseModel


class Preferences(BaseModel):
    language: str
    verbose: bool = False


def test_context_without_session_has_its_own_events_and_state() -> None:
    context = ExecutionContext()
    assert not context.is_persistent
    assert context.session is None and context.session_id is None
    event = context.add_event("user", "hello", channel="cli")
    context.state["turns"] = 1
    assert context.events == [event]
    assert event.metadata == {"channel": "cli"}
    assert context.state == {"turns": 1}
    assert context.new_events == [event]
    # A second context shares nothing with the first.
    assert ExecutionContext().events == []


async def test_context_with_session_reads_and_writes_the_session(
    memory_manager: SessionManager,
) -> None:
    session = await memory_manager.create("s1", "ada", state={"n": 1})
    context = ExecutionContext(session, memory_manager)
    assert context.is_persistent
    assert context.session_id == "s1" and context.user_id == "ada"
    context.add_event("user", "hi")
    context.state["n"] = 2
    assert session.events[-1].content == "hi"
    assert session.state == {"n": 2}
    context.state = {"replaced": True}
    assert session.state == {"replaced": True}
    context.events = []
    assert session.events == []


def test_models_in_state_round_trip_as_json() -> None:
    context = ExecutionContext()
    context.put_model("prefs", Preferences(language="en"))
    assert context.state["prefs"] == {"language": "en", "verbose": False}
    assert context.get_model("prefs", Preferences) == Preferences(language="en")
    assert context.pop_model("prefs", Preferences) == Preferences(language="en")
    assert context.get_model("prefs", Preferences) is None


def test_a_session_without_its_manager_is_refused() -> None:
    from agentsessions import Session

    with pytest.raises(InvalidInputError, match="manager"):
        ExecutionContext(Session(session_id="s"))


def test_an_unknown_conflict_policy_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="on_conflict"):
        ExecutionContext(on_conflict="overwrite")  # type: ignore[arg-type]


async def test_run_context_creates_then_reuses_and_saves_on_exit(
    memory_manager: SessionManager,
) -> None:
    async with run_context(memory_manager, session_id="chat", user_id="ada") as context:
        assert context.events == []
        context.add_event("user", "first")
        context.state["count"] = 1
    stored = await memory_manager.get("chat")
    assert stored is not None
    assert [e.content for e in stored.events] == ["first"]
    assert stored.state == {"count": 1}
    assert stored.user_id == "ada"

    async with run_context(memory_manager, session_id="chat", user_id="ada") as context:
        assert [e.content for e in context.events] == ["first"]
        context.add_event("agent", "second")
        context.state["count"] += 1
    stored = await memory_manager.get("chat")
    assert stored is not None
    assert [e.content for e in stored.events] == ["first", "second"]
    assert stored.state == {"count": 2}
    assert stored.version == 3  # created, then two saves


async def test_run_context_saves_nothing_when_the_block_raises(
    memory_manager: SessionManager,
) -> None:
    await memory_manager.create("chat")

    async def failing_run() -> None:
        async with run_context(memory_manager, session_id="chat") as context:
            context.add_event("user", "lost")
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await failing_run()
    stored = await memory_manager.get("chat")
    assert stored is not None and stored.events == [] and stored.version == 1


async def test_run_without_session_id_stores_nothing(memory_manager: SessionManager) -> None:
    async with run_context(memory_manager, user_id="ada") as context:
        assert not context.is_persistent
        context.add_event("user", "ephemeral")
    page = await memory_manager.list_sessions()
    assert page.items == []
    # No manager is needed at all for an independent run.
    async with run_context() as context:
        context.add_event("user", "no store")
    assert [e.content for e in context.new_events] == ["no store"]


async def test_run_with_session_id_needs_a_manager() -> None:
    with pytest.raises(InvalidInputError, match="needs a manager"):
        async with run_context(session_id="chat"):
            pass


async def test_ownership_is_honoured(memory_manager: SessionManager) -> None:
    async with run_context(memory_manager, session_id="chat", user_id="ada") as context:
        context.add_event("user", "mine")
    with pytest.raises(SessionOwnershipError):
        async with run_context(memory_manager, session_id="chat", user_id="bob"):
            pytest.fail("a run of another user's session must not start")
    # Without a user_id the caller is trusted (an operator's tool, say).
    async with run_context(memory_manager, session_id="chat") as context:
        assert context.user_id == "ada"


async def test_last_events_loads_a_window_and_still_appends(
    memory_manager: SessionManager,
) -> None:
    async with run_context(memory_manager, session_id="long") as context:
        for index in range(10):
            context.add_event("user", index)
    async with run_context(memory_manager, session_id="long", last_events=3) as context:
        assert [e.content for e in context.events] == [7, 8, 9]
        context.add_event("user", 10)
    stored = await memory_manager.get("long")
    assert stored is not None
    assert [e.content for e in stored.events] == list(range(11))


async def test_new_events_lists_only_this_runs_events(memory_manager: SessionManager) -> None:
    async with run_context(memory_manager, session_id="chat") as context:
        context.add_event("user", "old")
    async with run_context(memory_manager, session_id="chat") as context:
        first = context.add_event("user", "new 1")
        await context.save()  # a checkpoint in the middle of the run
        second = context.add_event("agent", "new 2")
    assert context.new_events == [first, second]
    result = context.result("reply")
    assert result.events == (first, second)
    assert result.version == 4 and result.event_count == 3


class EchoAgent(Agent):
    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        context.add_event("user", message)
        reply = f"#{len(context.events)}: {message}"
        context.add_event(self.name, reply)
        return reply


async def test_agent_defaults_to_its_own_in_memory_store() -> None:
    agent = EchoAgent()
    assert isinstance(agent.manager, MemorySessionManager)
    first = await agent.run("a", session_id="s")
    second = await agent.run("b", session_id="s")
    assert first.reply == "#1: a"
    assert second.reply == "#3: b"  # the first run's two events were kept
    assert second == RunResult(
        status="completed",
        reply="#3: b",
        session_id="s",
        events=second.events,
        version=3,
        event_count=4,
    )
    # Another agent has another store.
    assert (await EchoAgent().run("c", session_id="s")).reply == "#1: c"


async def test_agent_run_without_session_is_independent() -> None:
    agent = EchoAgent()
    first = await agent.run("a")
    second = await agent.run("b")
    assert first.reply == "#1: a" and second.reply == "#1: b"
    assert not second.stored and second.version is None
    assert (await agent.manager.list_sessions()).items == []
