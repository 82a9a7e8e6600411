"""`AgentSessionsSession` under the SDK's `OpenAIResponsesCompactionSession`, on every backend.

No network: the Runner's model is scripted and the wrapper's OpenAI client is a fake
whose ``responses.compact`` returns one summary item and records what it was sent.
"""

from __future__ import annotations

import os
from types import SimpleNamespace
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("agents", reason="needs the openai-agents extra")

from agents import Agent, Runner
from agents.memory import OpenAIResponsesCompactionSession
from agentsessions import InvalidInputError, SessionManager
from agentsessions.integrations.openai_agents import AgentSessionsSession
from integrations.test_openai_agents import NO_TRACING, ScriptedModel, text_of

SUMMARY = {
    "type": "message",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "summary of the conversation"}],
}


class FakeResponses:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        return SimpleNamespace(output=[dict(SUMMARY)], usage=None)


class FakeClient:
    def __init__(self) -> None:
        self.responses = FakeResponses()


def _wrap(session: AgentSessionsSession, client: FakeClient, **kwargs: Any) -> Any:
    return OpenAIResponsesCompactionSession(
        session.session_id,
        session,
        client=client,  # type: ignore[arg-type]
        compaction_mode="input",
        **kwargs,
    )


async def _texts(manager: SessionManager, session_id: str) -> list[tuple[str, str]]:
    stored = await manager.get(session_id)
    assert stored is not None
    return [text_of(event.content) for event in stored.events]


async def test_forced_compaction_replaces_history_in_one_write(manager: SessionManager) -> None:
    session = AgentSessionsSession("forced", manager)
    client = FakeClient()
    wrapper = _wrap(session, client)
    model = ScriptedModel(["one", "two", "three"])
    agent = Agent(name="a", model=model)
    for text in ("first", "second", "third"):
        await Runner.run(agent, text, session=wrapper, run_config=NO_TRACING)
    before = await manager.get("forced")
    assert before is not None and len(before.events) == 6
    await wrapper.run_compaction({"force": True})
    # What the API was asked to compact is exactly the stored history.
    [request] = client.responses.requests
    assert [text_of(item) for item in request["input"]] == [
        text_of(event.content) for event in before.events
    ]
    assert await _texts(manager, "forced") == [("assistant", "summary of the conversation")]
    after = await manager.get("forced")
    assert after is not None
    assert after.version == before.version + 1, "the replacement was not one atomic write"
    # The next run sees the summary and goes on from it.
    model.replies.append("four")
    await Runner.run(agent, "fourth", session=wrapper, run_config=NO_TRACING)
    assert [text_of(item) for item in model.inputs[-1]] == [
        ("assistant", "summary of the conversation"),
        ("user", "fourth"),
    ]


async def test_automatic_compaction_after_a_turn(manager: SessionManager) -> None:
    session = AgentSessionsSession("auto", manager)
    snapshots: list[int] = []
    snapshot = session._get_compaction_snapshot

    async def counted(limit: int, **kwargs: Any) -> Any:
        snapshots.append(limit)
        return await snapshot(limit, **kwargs)

    session._get_compaction_snapshot = counted  # type: ignore[method-assign]
    client = FakeClient()
    wrapper = _wrap(session, client, should_trigger_compaction=lambda context: True)
    agent = Agent(name="a", model=ScriptedModel(["hello"]))
    await Runner.run(agent, "hi", session=wrapper, run_config=NO_TRACING)
    assert client.responses.requests, "the wrapper never compacted"
    assert snapshots, "the wrapper did not use the adapter's atomic snapshot"
    assert await _texts(manager, "auto") == [("assistant", "summary of the conversation")]
    stored = await manager.get("auto")
    # create, the input, the reply, then the compaction as one write (not a clear and an add)
    assert stored is not None and stored.version == 4


async def test_a_stale_snapshot_replaces_nothing(manager: SessionManager) -> None:
    session = AgentSessionsSession("stale", manager)
    await session.add_items([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    whole = await session._get_compaction_snapshot(10)
    tail = await session._get_compaction_snapshot(1)
    assert whole is not None and whole.complete and tail is not None and not tail.complete
    # Another writer appends after the snapshots were read: neither may replace anything.
    await AgentSessionsSession("stale", manager).add_items([{"role": "user", "content": "c"}])
    assert await whole.replace_suffix(0, [dict(SUMMARY)]) is False
    assert await tail.replace_suffix(0, [dict(SUMMARY)]) is False
    assert [item["content"] for item in await session.get_items()] == ["a", "b", "c"]
    # A fresh snapshot of the tail replaces only the tail, keeping older history.
    fresh = await session._get_compaction_snapshot(2)
    assert fresh is not None and not fresh.complete
    assert await fresh.replace_suffix(1, [dict(SUMMARY)]) is True
    items = await session.get_items()
    assert [item["content"] for item in items[:2]] == ["a", "b"]
    assert text_of(items[2]) == ("assistant", "summary of the conversation")


async def test_the_snapshot_hook_takes_the_sdks_arguments_only(manager: SessionManager) -> None:
    session = AgentSessionsSession("args", manager)
    await session.add_items([{"role": "user", "content": "a"}])
    with pytest.raises(InvalidInputError, match="limit"):
        await session._get_compaction_snapshot(0)
    # An argument the SDK does not pass is refused, never silently ignored.
    with pytest.raises(TypeError):
        await session._get_compaction_snapshot(1, prune_everything=True)  # type: ignore[call-arg]
    snapshot = await session._get_compaction_snapshot(1, prune_prefix=lambda item: True)
    assert snapshot is not None and snapshot.complete
    # Positions outside the snapshot replace nothing.
    assert await snapshot.replace_suffix(1, [dict(SUMMARY)]) is False
    assert await snapshot.replace_suffix(-1, [dict(SUMMARY)]) is False
    assert [item["content"] for item in await session.get_items()] == ["a"]
