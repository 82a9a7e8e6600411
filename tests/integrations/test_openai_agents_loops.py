"""The Agents SDK's three ways to run, with ONE shared manager, on every backend.

`Runner.run` under ``asyncio.run`` (a loop per call, closed after), `Runner.run_sync`
(the thread's default loop, left open), `Runner.run_streamed`, and threads each with
loops of their own: the way an application really mixes them. The model is the SDK's
own `agents.testing.ScriptedModel` (no network).
"""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("agents", reason="needs the openai-agents extra")

from agents import Agent, RunConfig, Runner
from agents.testing import ScriptedModel, assistant_message
from agentsessions import SessionManager, connect
from agentsessions.integrations.openai_agents import AgentSessionsSession

NO_TRACING = RunConfig(tracing_disabled=True)
THREADS = 6
TIMEOUT = 60.0


def _texts(items: list[Any]) -> list[tuple[str, str]]:
    out = []
    for item in items:
        content = item["content"]
        text = content if isinstance(content, str) else "".join(p["text"] for p in content)
        out.append((item["role"], text))
    return out


def _agent(*replies: str) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel([[assistant_message(text, item_id=f"m-{text}")] for text in replies])
    return Agent(name="assistant", instructions="Be brief.", model=model), model


def _in_thread(work: Any) -> Any:
    """*work()* in a fresh thread (its default loop is its own); its result or error."""
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(work())
        except BaseException as exc:  # reported to the test
            box.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(TIMEOUT)
    assert not thread.is_alive(), "a run hung"
    (result,) = box
    if isinstance(result, BaseException):
        raise result
    return result


def test_run_run_sync_and_run_streamed_share_one_manager(backend_url: str) -> None:
    manager = connect(backend_url)  # one for the application, as docs/openai-agents.md says
    agent, model = _agent("one", "two", "three", "four")
    session = AgentSessionsSession("conv", manager, user_id="ada")

    async def run(text: str) -> Any:
        return (await Runner.run(agent, text, session=session, run_config=NO_TRACING)).final_output

    async def streamed(text: str) -> Any:
        result = Runner.run_streamed(agent, text, session=session, run_config=NO_TRACING)
        kinds = {event.type async for event in result.stream_events()}
        assert "raw_response_event" in kinds
        return result.final_output

    def run_sync(text: str) -> Any:
        return Runner.run_sync(agent, text, session=session, run_config=NO_TRACING).final_output

    # Each in a thread of its own, so that run_sync finds no running loop and each
    # thread's default loop is a different one.
    assert _in_thread(lambda: asyncio.run(run("a"))) == "one"  # loop closed right after
    assert _in_thread(lambda: run_sync("b")) == "two"  # default loop left open
    assert _in_thread(lambda: asyncio.run(streamed("c"))) == "three"
    assert _in_thread(lambda: run_sync("d")) == "four"

    conversation = [("user", "a"), ("assistant", "one"), ("user", "b"), ("assistant", "two")]
    conversation += [("user", "c"), ("assistant", "three"), ("user", "d"), ("assistant", "four")]
    # Each run saw everything the runs before it stored, whatever loop they ran on.
    for index, call in enumerate(model.calls):
        assert _texts(list(call.input)) == conversation[: 2 * index + 1]

    async def check_and_close() -> None:
        assert _texts(await session.get_items()) == conversation
        await manager.close()
        # Every loop's connections were released: the closed ones', the idle ones'.
        per_loop = manager._per_loop
        assert per_loop is None or len(per_loop) == 0

    asyncio.run(check_and_close())


def test_threads_each_running_their_own_loop_lose_no_items(backend_url: str) -> None:
    manager = connect(backend_url)
    shared = AgentSessionsSession("shared", manager)
    start = threading.Barrier(THREADS, timeout=TIMEOUT)
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        agent, _ = _agent(f"reply {index}", f"again {index}")
        try:
            start.wait()
            # Its own conversation, then the shared one, from this thread's own loops.
            own = AgentSessionsSession(f"own-{index}", manager)
            Runner.run_sync(agent, f"hello {index}", session=own, run_config=NO_TRACING)
            asyncio.run(Runner.run(agent, f"to all {index}", session=shared, run_config=NO_TRACING))
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "a thread's run hung"
    assert errors == []

    async def check(manager: SessionManager) -> None:
        for index in range(THREADS):
            own = AgentSessionsSession(f"own-{index}", manager)
            assert _texts(await own.get_items()) == [
                ("user", f"hello {index}"),
                ("assistant", f"reply {index}"),
            ]
        landed = sorted(_texts(await AgentSessionsSession("shared", manager).get_items()))
        assert landed == sorted(
            [("user", f"to all {i}") for i in range(THREADS)]
            + [("assistant", f"again {i}") for i in range(THREADS)]
        ), f"{len(landed)} of {2 * THREADS} items of the shared conversation landed"
        await manager.close()

    asyncio.run(check(manager))
