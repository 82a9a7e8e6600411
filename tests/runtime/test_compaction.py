"""The runtime's compaction policy: summaries after a turn, with nothing lost and nothing split.

The summarizer is a fake that records what it was given and returns a text naming it,
so every assertion is about what the policy chose and what the store holds.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agentsessions import Event, InvalidInputError, SessionManager, connect
from agentsessions.backend import Capabilities
from agentsessions.runtime import (
    Agent,
    Approval,
    CompactionPolicy,
    ExecutionContext,
    run_context,
)
from agentsessions.runtime._compaction import choose_cut


class FakeSummarizer:
    """Records each call; summarises as "summary of <first>..<last> (<n>)"."""

    def __init__(self, *, pause: asyncio.Event | None = None) -> None:
        self.calls: list[list[Event]] = []
        self.pause = pause
        self.entered = asyncio.Event()

    def text(self, events: list[Event]) -> str:
        return f"summary of {events[0].content}..{events[-1].content} ({len(events)})"

    def __call__(self, events: list[Event]) -> str:
        self.calls.append(events)
        return self.text(events)


class AsyncSummarizer(FakeSummarizer):
    async def __call__(self, events: list[Event]) -> str:  # type: ignore[override]
        self.calls.append(events)
        self.entered.set()
        if self.pause is not None:
            await self.pause.wait()
        return self.text(events)


class Echo(Agent):
    def __init__(self, manager: SessionManager, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.tools.register(self.lookup)
        self.tools.register(self.send, requires_approval=True)

    async def lookup(self, what: str) -> dict[str, str]:
        return {"found": what}

    async def send(self, to: str) -> dict[str, str]:
        return {"sent_to": to}

    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        if message is None:
            return None
        context.add_event("user", message)
        if message.startswith("look "):
            await context.call_tool("lookup", {"what": message[5:]})
        elif message.startswith("send "):
            await context.call_tool("send", {"to": message[5:]})
        context.add_event(self.name, f"re: {message}")
        return "ok"


async def _stored(manager: SessionManager, session_id: str) -> list[Event]:
    session = await manager.get(session_id)
    assert session is not None
    return session.events


def _event(content: str, **metadata: Any) -> Event:
    return Event(author="user", content=content, metadata=metadata)


def test_the_cut_keeps_the_overlap_and_whole_tool_calls() -> None:
    events = [_event(f"m{i}") for i in range(10)]
    assert choose_cut(events, 3, set()) == 6
    assert choose_cut(events, 10, set()) == -1
    assert choose_cut(events, 0, set()) == 9
    grouped = [
        _event("a"),
        _event("call", call_id="c1"),
        _event("b"),
        _event("result", call_id="c1"),
        _event("c"),
        _event("d"),
    ]
    # Keeping the last 3 would keep c1's result and replace its call: the cut moves back.
    assert choose_cut(grouped, 3, set()) == 0
    assert choose_cut(grouped, 2, set()) == 3
    # A call waiting for approval is never cut, even with no later event of it.
    waiting = [_event("a"), _event("call", call_id="p"), _event("b"), _event("c")]
    assert choose_cut(waiting, 1, {"p"}) == 0
    assert choose_cut(waiting, 1, set()) == 2
    # Nested: keeping c2's result keeps c2's call, which keeps c1's result and call.
    nested = [
        _event("x"),
        _event("call1", call_id="c1"),
        _event("call2", call_id="c2"),
        _event("result1", call_id="c1"),
        _event("y"),
        _event("result2", call_id="c2"),
    ]
    assert choose_cut(nested, 1, set()) == 0


def test_the_policy_refuses_bad_settings() -> None:
    def summarize(events: list[Event]) -> str:
        return "s"

    with pytest.raises(InvalidInputError, match="every"):
        CompactionPolicy(summarize)
    with pytest.raises(InvalidInputError, match="every"):
        CompactionPolicy(summarize, every=0)
    with pytest.raises(InvalidInputError, match="keep_last"):
        CompactionPolicy(summarize, every=5, keep_last=-1)
    with pytest.raises(InvalidInputError, match="summarizer"):
        CompactionPolicy("not callable", every=5)  # type: ignore[arg-type]


async def test_a_backend_without_compaction_is_refused_up_front() -> None:
    async with connect("memory://") as manager:
        manager.capabilities = Capabilities(compaction=False)
        policy = CompactionPolicy(FakeSummarizer(), every=5)
        with pytest.raises(InvalidInputError, match="compacts"):
            async with run_context(manager, session_id="s", compaction=policy):
                pass
        with pytest.raises(InvalidInputError, match="compacts"):
            ExecutionContext(None, manager, compaction=policy)


@pytest.mark.parametrize("tail", [None, 6])
async def test_long_conversation_stays_bounded_and_keeps_the_overlap(
    manager_pair: tuple[SessionManager, SessionManager], tail: int | None
) -> None:
    manager, _ = manager_pair
    summarizer = FakeSummarizer()
    policy = CompactionPolicy(summarizer, every=10, keep_last=4, archive=True)
    agent = Echo(manager, compaction=policy, last_events=tail)
    compactions = 0
    for turn in range(30):
        result = await agent.run(f"m{turn}", session_id="long")
        if result.compacted:
            compactions += 1
            assert result.event_count == 5  # the summary and the 4 kept
        stored = await _stored(manager, "long")
        assert len(stored) < 10 + 4, "the history grew past the policy's bound"
        assert result.event_count == len(stored)
    assert compactions >= 5
    stored = await _stored(manager, "long")
    # The newest events are kept word for word, after one summary.
    assert stored[-2:] == [e for e in stored if e.content in ("m29", "re: m29")], (
        "the last turn is not kept verbatim"
    )
    assert stored[0].author == "summary" and stored[0].metadata == {"kind": "summary"}
    # Each summary after the first was given the previous one to summarise.
    for call in summarizer.calls[1:]:
        assert call[0].author == "summary"
    # With archive=True nothing is gone: archive + kept (minus summaries) is every event.
    archived = await manager.archived_events("long")
    originals = [e for e in archived + stored if e.author != "summary"]
    assert [e.content for e in originals] == [
        text for turn in range(30) for text in (f"m{turn}", f"re: m{turn}")
    ]


async def test_size_threshold_and_async_summarizer(memory_manager: SessionManager) -> None:
    summarizer = AsyncSummarizer()
    policy = CompactionPolicy(summarizer, max_bytes=2_000, keep_last=2)
    agent = Echo(memory_manager, compaction=policy)
    for turn in range(12):
        await agent.run("x" * 100 + str(turn), session_id="big")
    assert summarizer.calls, "the size threshold never triggered"
    stored = await _stored(memory_manager, "big")
    size = sum(len(event.model_dump_json()) for event in stored)
    assert size <= 2_000 + 400  # below the threshold, plus at most the last turn's events


async def test_tool_calls_and_pending_approvals_survive(memory_manager: SessionManager) -> None:
    summarizer = FakeSummarizer()
    agent = Echo(memory_manager, compaction=CompactionPolicy(summarizer, every=6, keep_last=1))
    waiting = await agent.run("send bob", session_id="tools")
    assert waiting.status == "waiting_for_approval"
    call_id = waiting.pending[0].id
    for turn in range(12):
        result = await agent.run(
            f"look {turn}" if turn % 3 == 0 else f"chat {turn}", session_id="tools"
        )
        assert result.status == "waiting_for_approval"
        assert [call.id for call in result.pending] == [call_id]
    assert summarizer.calls
    stored = await _stored(memory_manager, "tools")
    # The pending call's events are all still there; so are both halves of kept lookups.
    assert any(e.metadata.get("call_id") == call_id for e in stored)
    for replaced in summarizer.calls:
        assert all(e.metadata.get("call_id") != call_id for e in replaced)
        calls = {e.metadata["call_id"] for e in replaced if "call_id" in e.metadata}
        kept = {e.metadata["call_id"] for e in stored if "call_id" in e.metadata}
        assert not calls & kept, "a tool call was split from its result by the cut"
    done = await agent.run(session_id="tools", approval=Approval(call_id=call_id, approved=True))
    assert done.status == "completed"
    assert done.outcomes[0].status == "done" and done.outcomes[0].result == {"sent_to": "bob"}


async def test_a_concurrent_append_is_never_lost(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair
    pause = asyncio.Event()
    summarizer = AsyncSummarizer(pause=pause)
    agent = Echo(first, compaction=CompactionPolicy(summarizer, every=4, keep_last=2))
    for turn in range(2):
        await agent.run(f"m{turn}", session_id="race")
    assert not summarizer.calls
    running = asyncio.create_task(agent.run("m2", session_id="race"))
    await asyncio.wait_for(summarizer.entered.wait(), 10)
    # While the summarizer works on what it read, another process appends.
    await second.update("race", lambda s: s.add_event("user", "appended meanwhile"))
    pause.set()
    result = await asyncio.wait_for(running, 10)
    assert len(summarizer.calls) == 2, "the lost race was not retried on fresh data"
    assert result.compacted
    stored = await _stored(second, "race")
    contents = [e.content for e in stored]
    assert contents[-1] == "appended meanwhile"
    # The retry summarised the fresh history, which held the concurrent append's
    # predecessors; the append itself is among the kept events.
    assert contents[0] == summarizer.text(summarizer.calls[1])
    assert len(stored) == 1 + 2


async def test_many_writers_and_compacting_runs_lose_nothing(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair
    policy = CompactionPolicy(AsyncSummarizer(), every=5, keep_last=3, archive=True)
    agents = [Echo(manager, compaction=policy) for manager in (first, second)]
    await agents[0].run("start", session_id="busy")

    async def runs(index: int) -> None:
        for turn in range(8):
            await agents[index % 2].run(f"run{index}-{turn}", session_id="busy")

    async def appends(index: int) -> None:
        for turn in range(8):
            await second.update("busy", lambda s, t=turn: s.add_event("user", f"w{index}-{t}"))
            await asyncio.sleep(0)

    await asyncio.wait_for(
        asyncio.gather(*(runs(i) for i in range(3)), *(appends(i) for i in range(2))), 120
    )
    stored = await _stored(first, "busy")
    archived = await first.archived_events("busy")
    originals = [e.content for e in archived + stored if e.author != "summary"]
    expected = {"start", "re: start"}
    expected |= {f"run{i}-{t}" for i in range(3) for t in range(8)}
    expected |= {f"re: run{i}-{t}" for i in range(3) for t in range(8)}
    expected |= {f"w{i}-{t}" for i in range(2) for t in range(8)}
    assert sorted(originals) == sorted(expected), "an event was lost or duplicated"
    assert len(stored) < 5 + 3 + 20  # compactions ran despite the contention
