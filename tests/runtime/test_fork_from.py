"""Agent.run(fork_from=...): a turn on a fork of another session, the source untouched."""

from __future__ import annotations

import pytest
from agentsessions import InvalidInputError, SessionExistsError, SessionManager
from agentsessions.runtime import Agent, ExecutionContext


class Echo(Agent):
    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        if message is None:
            return None
        context.add_event("user", message)
        context.add_event(self.name, f"re: {message}")
        return f"re: {message}"


async def _contents(manager: SessionManager, session_id: str) -> list[object]:
    session = await manager.get(session_id)
    assert session is not None
    return [event.content for event in session.events]


async def test_run_on_a_fork_edits_an_earlier_message(memory_manager: SessionManager) -> None:
    agent = Echo(memory_manager)
    await agent.run("hello", session_id="main", user_id="ada")
    await agent.run("which city?", session_id="main", user_id="ada")
    main = await memory_manager.get("main")
    assert main is not None
    first_reply = main.events[1].id
    # "Edit the second message and try again": fork after the first exchange.
    result = await agent.run(
        "which country?", session_id="retry", user_id="ada", fork_from=("main", first_reply)
    )
    assert result.reply == "re: which country?"
    assert await _contents(memory_manager, "retry") == [
        "hello",
        "re: hello",
        "which country?",
        "re: which country?",
    ]
    assert await _contents(memory_manager, "main") == [
        "hello",
        "re: hello",
        "which city?",
        "re: which city?",
    ]
    retry = await memory_manager.get("retry")
    assert retry is not None and retry.forked_from is not None
    assert (retry.forked_from.session_id, retry.forked_from.event_id) == ("main", first_reply)
    assert retry.user_id == "ada"


async def test_fork_from_is_checked(memory_manager: SessionManager) -> None:
    agent = Echo(memory_manager)
    await agent.run("hello", session_id="main")
    with pytest.raises(InvalidInputError):
        await agent.run("x", fork_from=("main", None))  # no id for the fork
    with pytest.raises(InvalidInputError):
        await agent.run("x", session_id="new", fork_from="main")  # type: ignore[arg-type]
    await agent.run("taken", session_id="other")
    with pytest.raises(SessionExistsError):
        await agent.run("x", session_id="other", fork_from=("main", None))
    assert await _contents(memory_manager, "other") == ["taken", "re: taken"]
    assert await memory_manager.get("new") is None
    await agent.run("again", session_id="whole", fork_from=("main", None))
    assert await _contents(memory_manager, "whole") == ["hello", "re: hello", "again", "re: again"]
