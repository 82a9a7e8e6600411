"""Two runs of one session at once: merged as documented, or raised; never silently lost."""

from __future__ import annotations

import asyncio

import pytest
from agentsessions import SessionConflictError, SessionManager, SessionNotFoundError
from agentsessions.runtime import Agent, ExecutionContext, run_context


async def _contents(manager: SessionManager, session_id: str) -> list[object]:
    stored = await manager.get(session_id)
    assert stored is not None
    return [event.content for event in stored.events]


async def test_overlapping_runs_keep_both_runs_events_and_state(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair
    async with run_context(first, session_id="s") as setup:
        setup.add_event("user", "start")
        setup.state.update(shared=0, dropped_by_b=True)
    # The blocks exit in reverse: b saves first; a's save conflicts and is merged onto it.
    async with run_context(first, session_id="s") as a, run_context(second, session_id="s") as b:
        a.add_event("user", "from a")
        a.state["a"] = 1
        a.state["shared"] = 5
        b.add_event("user", "from b")
        b.state["b"] = 2
        b.state["shared"] = 5  # the same change on both sides is no conflict
        del b.state["dropped_by_b"]
    assert await _contents(first, "s") == ["start", "from b", "from a"]
    stored = await first.get("s")
    assert stored is not None
    assert stored.state == {"shared": 5, "b": 2, "a": 1}
    assert stored.version == 4  # create, setup, b, a: the merge is one save
    assert a.session is not None and a.session.version == 4
    assert [e.content for e in a.new_events] == ["from a"]


async def test_the_same_state_key_changed_differently_raises_and_writes_nothing(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair
    await first.create("s", state={"mood": "calm"})

    async def overlap() -> None:
        async with (
            run_context(first, session_id="s") as a,
            run_context(second, session_id="s") as b,
        ):
            a.add_event("user", "from a")
            a.state["mood"] = "happy"
            b.add_event("user", "from b")
            b.state["mood"] = "sad"

    with pytest.raises(SessionConflictError, match="state key 'mood'"):
        await overlap()
    stored = await first.get("s")
    assert stored is not None
    assert stored.state == {"mood": "sad"}
    assert [e.content for e in stored.events] == ["from b"]  # a's event was not half-applied


async def test_raise_policy_raises_the_conflict(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair

    async def overlap() -> None:
        async with (
            run_context(first, session_id="s", on_conflict="raise") as a,
            run_context(second, session_id="s") as b,
        ):
            a.add_event("user", "from a")
            b.add_event("user", "from b")

    with pytest.raises(SessionConflictError):
        await overlap()
    assert await _contents(first, "s") == ["from b"]


async def test_a_run_that_rewrote_history_is_not_merged(
    memory_manager: SessionManager,
) -> None:
    async with run_context(memory_manager, session_id="s") as setup:
        setup.add_event("user", "one")
        setup.add_event("user", "two")

    async def rewrite() -> None:
        async with run_context(memory_manager, session_id="s") as a:
            async with run_context(memory_manager, session_id="s") as b:
                b.add_event("user", "three")
            a.events.pop(0)

    with pytest.raises(SessionConflictError, match="changed events it had loaded"):
        await rewrite()
    assert await _contents(memory_manager, "s") == ["one", "two", "three"]


async def test_a_session_deleted_meanwhile_is_not_resurrected(
    memory_manager: SessionManager,
) -> None:

    async def outlive() -> None:
        async with run_context(memory_manager, session_id="s") as a:
            a.add_event("user", "late")
            async with run_context(memory_manager, session_id="s") as b:
                b.add_event("user", "other")
            await memory_manager.delete("s")

    with pytest.raises(SessionNotFoundError):
        await outlive()
    assert await memory_manager.get("s") is None


async def test_two_runs_may_each_ask_for_an_approval(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair

    class Asker(Agent):
        async def step(self, context: ExecutionContext, message: str | None) -> str | None:
            return None

    asker = Asker(first)
    asker.tools.register(lambda: None, name="act", requires_approval=True)
    async with (
        run_context(first, session_id="s", tools=asker.tools) as a,
        run_context(second, session_id="s", tools=asker.tools) as b,
    ):
        call_a = (await a.call_tool("act")).call
        call_b = (await b.call_tool("act")).call
    async with run_context(first, session_id="s", tools=asker.tools) as check:
        assert [call.id for call in check.pending_calls] == [call_b.id, call_a.id]


class Counter(Agent):
    """Appends one event per run; the whole history must survive a crowd of runs."""

    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        context.add_event("user", message)
        await asyncio.sleep(0)  # let the other runs load the same version
        return message


async def test_many_concurrent_runs_lose_no_event(
    manager_pair: tuple[SessionManager, SessionManager],
) -> None:
    first, second = manager_pair
    agents = [Counter(first), Counter(second)]
    await asyncio.gather(*(agents[n % 2].run(f"m{n}", session_id="crowd") for n in range(20)))
    contents = await _contents(first, "crowd")
    assert sorted(contents, key=lambda c: int(str(c)[1:])) == [f"m{n}" for n in range(20)]
