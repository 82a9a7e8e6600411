"""The SDK's automatic compaction over `AgentSessionsSession`, as the SDK really drives it.

Every flow goes through the SDK's own objects: its `Runner` (``run``, ``run_sync``,
``run_streamed``) with the SDK's `agents.testing.ScriptedModel`, its
`OpenAIResponsesCompactionSession` with a fake client whose ``responses.compact`` is
scripted, and its `EncryptedSession` on either side of the compaction wrapper (the two
nestings call the adapter's snapshot hook with the SDK's ``prune_prefix``). Nothing
here calls the adapter's private hooks itself: whatever arguments the SDK passes them
is what is tested, on every backend.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("agents", reason="needs the openai-agents extra")
    pytest.importorskip("cryptography", reason="EncryptedSession needs cryptography")

from agents import Agent, RunConfig, Runner
from agents.extensions.memory import EncryptedSession
from agents.memory import OpenAIResponsesCompactionSession, SessionSettings
from agents.testing import ScriptedModel, assistant_message
from agentsessions import BackendUnavailableError, SessionManager
from agentsessions.integrations.openai_agents import AgentSessionsSession

NO_TRACING = RunConfig(tracing_disabled=True)
KEY = "zQ3WbF0b0m1xk2cS8d3wq5Hc3tY4yJmJ6o1uN7aP9rE="  # a Fernet key: 32 bytes, base64
TTL = 600
TIMEOUT = 30.0
SUMMARY_TEXT = "summary of the conversation"
NESTINGS = ["plain", "encrypted", "encrypted-inside"]
MODES = ["input", "previous_response_id"]
RUNS = ["run", "run_sync", "run_streamed"]


def _summary() -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": SUMMARY_TEXT}],
    }


def text_of(item: Any) -> tuple[str, str]:
    content = item["content"]
    if isinstance(content, str):
        return item["role"], content
    return item["role"], "".join(part["text"] for part in content)


class FakeResponses:
    """``responses.compact``: records each request, then runs *during* (if set) while the
    wrapper waits for the API, then answers one summary item (or raises *error*)."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.during: Callable[[], Awaitable[None]] | None = None
        self.error: BaseException | None = None

    async def compact(self, **kwargs: Any) -> Any:
        self.requests.append(kwargs)
        if self.during is not None:
            await self.during()
        if self.error is not None:
            raise self.error
        return SimpleNamespace(output=[_summary()], usage=None)


class FakeClient:
    def __init__(self) -> None:
        self.responses = FakeResponses()


class Stack:
    """The SDK's sessions over ours, in one of the nestings, with the snapshot hook's
    calls recorded (arguments as the SDK passed them)."""

    def __init__(
        self,
        nesting: str,
        ours: AgentSessionsSession,
        *,
        mode: str = "input",
        trigger: Callable[[dict[str, Any]], bool] = lambda context: True,
    ) -> None:
        self.ours = ours
        self.client = FakeClient()
        self.snapshot_calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
        hook = ours._get_compaction_snapshot

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            self.snapshot_calls.append((args, kwargs))
            return await hook(*args, **kwargs)

        ours._get_compaction_snapshot = recorded  # type: ignore[method-assign]

        def compaction(underlying: Any) -> OpenAIResponsesCompactionSession:
            return OpenAIResponsesCompactionSession(
                ours.session_id,
                underlying,
                client=self.client,  # type: ignore[arg-type]
                compaction_mode=mode,  # type: ignore[arg-type]
                should_trigger_compaction=trigger,
            )

        self.encrypted: EncryptedSession | None = None
        self.top: Any
        if nesting == "plain":
            self.top = compaction(ours)
        elif nesting == "encrypted":
            self.encrypted = EncryptedSession(
                ours.session_id, compaction(ours), encryption_key=KEY, ttl=TTL
            )
            self.top = self.encrypted
        else:
            self.encrypted = EncryptedSession(ours.session_id, ours, encryption_key=KEY, ttl=TTL)
            self.top = compaction(self.encrypted)

    def envelope(self, item: dict[str, Any], *, age: int) -> dict[str, Any]:
        """*item* encrypted as EncryptedSession stores it, written *age* seconds ago."""
        assert self.encrypted is not None
        token = self.encrypted.cipher.encrypt_at_time(
            json.dumps(item).encode(), int(time.time()) - age
        )
        return {"__enc__": 1, "v": 1, "kid": "hkdf-v1", "payload": token.decode()}


def _agent(*replies: str) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel(
        [
            {"output": [assistant_message(text, item_id=f"m-{text}")], "response_id": f"r-{text}"}
            for text in replies
        ]
    )
    return Agent(name="assistant", model=model), model


async def _run(how: str, agent: Agent[Any], text: str, session: Any) -> str:
    if how == "run":
        result = await Runner.run(agent, text, session=session, run_config=NO_TRACING)
    elif how == "run_streamed":
        streamed = Runner.run_streamed(agent, text, session=session, run_config=NO_TRACING)
        async for _ in streamed.stream_events():
            pass
        result = streamed  # type: ignore[assignment]
    else:  # a thread without a running loop, as run_sync requires
        result = await asyncio.wait_for(
            asyncio.to_thread(Runner.run_sync, agent, text, session=session, run_config=NO_TRACING),
            TIMEOUT,
        )
    return str(result.final_output)


async def _stored(manager: SessionManager, session_id: str) -> tuple[int, list[Any]]:
    stored = await manager.get(session_id)
    assert stored is not None
    return stored.version, [event.content for event in stored.events]


@pytest.mark.parametrize("how", RUNS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nesting", NESTINGS)
async def test_automatic_compaction_after_a_turn(
    manager: SessionManager, nesting: str, mode: str, how: str
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager), mode=mode)
    seen_at_compact: list[tuple[int, list[Any]]] = []

    async def look() -> None:
        seen_at_compact.append(await _stored(manager, "conv"))

    stack.client.responses.during = look
    agent, model = _agent("hello", "again")
    assert await _run(how, agent, "hi", stack.top) == "hello"

    # The SDK called the snapshot hook with the arguments of its own call sites: the
    # bound of the model exchange (input, reply, one more) and, under encryption, its
    # expiry test.
    [(args, kwargs)] = stack.snapshot_calls
    assert args == (3,)
    if nesting == "plain":
        assert kwargs == {}
    else:
        assert set(kwargs) == {"prune_prefix"} and callable(kwargs["prune_prefix"])
    [request] = stack.client.responses.requests
    if mode == "input":
        assert [text_of(item) for item in request["input"]] == [
            ("user", "hi"),
            ("assistant", "hello"),
        ]
    else:
        assert request["previous_response_id"] == "r-hello" and "input" not in request
    # What was stored when the API was called was replaced in one write.
    [(version_then, items_then)] = seen_at_compact
    assert len(items_then) == 2
    version, items = await _stored(manager, "conv")
    assert version == version_then + 1, "the replacement was not one atomic write"
    assert len(items) == 1
    if nesting == "plain":
        assert text_of(items[0]) == ("assistant", SUMMARY_TEXT)
    else:
        assert items[0]["__enc__"] == 1 and SUMMARY_TEXT not in json.dumps(items)
    assert [text_of(item) for item in await stack.top.get_items()] == [("assistant", SUMMARY_TEXT)]
    # The next run goes on from the summary.
    assert await _run(how, agent, "next", stack.top) == "again"
    assert [text_of(item) for item in model.calls[-1].input] == [  # type: ignore[union-attr]
        ("assistant", SUMMARY_TEXT),
        ("user", "next"),
    ]


EARLIER = [
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": "a1"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": "a2"},
]
# The run reads only the newest two items, so the model exchange (and the snapshot the
# SDK asks for) covers a suffix of the history, never its start.
LIMITED = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2))


@pytest.mark.parametrize("nesting", NESTINGS)
async def test_automatic_compaction_of_a_suffix_keeps_the_older_history(
    manager: SessionManager, nesting: str
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    await stack.top.add_items([dict(item) for item in EARLIER])
    seen_at_compact: list[tuple[int, list[Any]]] = []

    async def look() -> None:
        seen_at_compact.append(await _stored(manager, "conv"))

    stack.client.responses.during = look
    agent, model = _agent("hello")
    await Runner.run(agent, "hi", session=stack.top, run_config=LIMITED)
    assert [text_of(item) for item in model.calls[0].input] == [
        ("user", "u2"),
        ("assistant", "a2"),
        ("user", "hi"),
    ]
    [(args, _)] = stack.snapshot_calls
    assert args == (5,)
    # The SDK compacts from the first user message of the matched exchange on.
    [request] = stack.client.responses.requests
    assert [text_of(item) for item in request["input"]] == [
        ("user", "u2"),
        ("assistant", "a2"),
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    [(version_then, _)] = seen_at_compact
    version, _ = await _stored(manager, "conv")
    assert version == version_then + 1, "the replacement was not one atomic write"
    assert [text_of(item) for item in await stack.top.get_items()] == [
        ("user", "u1"),
        ("assistant", "a1"),
        ("assistant", SUMMARY_TEXT),
    ]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("nesting", ["encrypted", "encrypted-inside"])
async def test_expired_history_is_pruned_with_the_compaction(
    manager: SessionManager, nesting: str, mode: str
) -> None:
    ours = AgentSessionsSession("conv", manager)
    stack = Stack(nesting, ours, mode=mode)
    # Oldest first: two expired envelopes, an item that is not an envelope (the SDK's
    # expiry test is false for it), two more expired envelopes. The run's snapshot will
    # cover the newest of them, its input and its reply.
    plain = {"role": "user", "content": "not encrypted"}
    old = [stack.envelope({"role": "user", "content": f"old {n}"}, age=10 * TTL) for n in range(4)]
    await ours.add_items([old[0], old[1], plain, old[2], old[3]])
    seen_at_compact: list[tuple[int, list[Any]]] = []

    async def look() -> None:
        seen_at_compact.append(await _stored(manager, "conv"))

    stack.client.responses.during = look
    agent, model = _agent("hello")
    assert await _run("run", agent, "hi", stack.top) == "hello"
    # The run saw none of the expired history.
    assert [text_of(item) for item in model.calls[0].input] == [("user", "hi")]
    version, items = await _stored(manager, "conv")
    if mode == "previous_response_id":
        # The snapshot does not reach the start of the history: the SDK will not let a
        # response chain summarise items it keeps, and leaves everything as it was.
        assert stack.snapshot_calls and not stack.client.responses.requests
        assert len(items) == 7 and items[2] == plain
        return
    [request] = stack.client.responses.requests
    assert [text_of(item) for item in request["input"]] == [("user", "hi"), ("assistant", "hello")]
    # In the one write: the expired prefix went, up to the first item the expiry test
    # is false for (so the expired envelope after it stays); the expired envelope inside
    # the snapshot went with the replaced suffix.
    [(version_then, items_then)] = seen_at_compact
    assert len(items_then) == 7
    assert version == version_then + 1, "the replacement was not one write"
    assert items[:2] == [plain, old[2]] and len(items) == 3
    assert stack.encrypted is not None
    assert text_of(stack.encrypted._unwrap(items[2])) == ("assistant", SUMMARY_TEXT)
    assert [text_of(item) for item in await stack.top.get_items()] == [("assistant", SUMMARY_TEXT)]


@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_failing_compaction_leaves_the_history_as_it_was(
    manager: SessionManager, nesting: str
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    stack.client.responses.error = RuntimeError("compact endpoint down")
    agent, _ = _agent("hello", "again")
    with pytest.raises(RuntimeError, match="compact endpoint down"):
        await Runner.run(agent, "hi", session=stack.top, run_config=NO_TRACING)
    assert [text_of(item) for item in await stack.top.get_items()] == [
        ("user", "hi"),
        ("assistant", "hello"),
    ]
    # The session goes on: the next turn lands after them, in order.
    stack.client.responses.error = None
    stack.client.responses.during = None
    await Runner.run(agent, "next", session=stack.top, run_config=NO_TRACING)
    assert [text_of(item) for item in await stack.top.get_items()] == [("assistant", SUMMARY_TEXT)]


@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_write_during_the_compaction_survives_and_nothing_is_replaced(
    manager: SessionManager, nesting: str
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    # Another process (another manager, another session object) writes while the
    # wrapper waits for the API: the wrapper's snapshot is stale by the time it replaces.
    async with manager.with_options() as other_manager:
        other = Stack(nesting, AgentSessionsSession("conv", other_manager)).top

        async def write_elsewhere() -> None:
            await other.add_items([{"role": "user", "content": "meanwhile"}])

        stack.client.responses.during = write_elsewhere
        agent, _ = _agent("hello")
        assert await _run("run", agent, "hi", stack.top) == "hello"
        assert stack.client.responses.requests, "the wrapper never compacted"
        expected = [("user", "hi"), ("assistant", "hello"), ("user", "meanwhile")]
        assert [text_of(item) for item in await stack.top.get_items()] == expected
        assert [text_of(item) for item in await other.get_items()] == expected


@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_run_cancelled_while_compacting_keeps_the_history_and_later_writes(
    manager: SessionManager, nesting: str
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    waiting = asyncio.Event()

    async def hang() -> None:
        waiting.set()
        await asyncio.Event().wait()  # the API never answers: the run is cancelled

    stack.client.responses.during = hang
    agent, _ = _agent("hello")
    run = asyncio.ensure_future(Runner.run(agent, "hi", session=stack.top, run_config=NO_TRACING))
    await asyncio.wait_for(waiting.wait(), TIMEOUT)
    # A write by another writer lands while the compaction is pending.
    async with manager.with_options() as other_manager:
        other = Stack(nesting, AgentSessionsSession("conv", other_manager)).top
        await other.add_items([{"role": "user", "content": "meanwhile"}])
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, TIMEOUT)
    assert [text_of(item) for item in await stack.top.get_items()] == [
        ("user", "hi"),
        ("assistant", "hello"),
        ("user", "meanwhile"),
    ]
    stack.client.responses.during = None
    await stack.top.add_items([{"role": "user", "content": "after"}])
    assert [text_of(item) for item in await stack.top.get_items()][-2:] == [
        ("user", "meanwhile"),
        ("user", "after"),
    ]


@pytest.mark.parametrize("part", ["whole", "suffix"])
@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_run_cancelled_during_the_replacement_write_lands_it_whole(
    manager: SessionManager, nesting: str, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    earlier = [dict(item) for item in EARLIER] if part == "suffix" else []
    if earlier:
        await stack.top.add_items(earlier)
    # Once the API has been called, the replacement's write (a compact for a whole
    # history, a save for a suffix) is held until the run has been cancelled.
    compacting = False
    started, proceed = asyncio.Event(), asyncio.Event()

    def held_once_compacting(method: Any) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if compacting:
                started.set()
                await proceed.wait()
            return await method(*args, **kwargs)

        return call

    async def start_holding() -> None:
        nonlocal compacting
        compacting = True

    monkeypatch.setattr(manager, "compact", held_once_compacting(manager.compact))
    monkeypatch.setattr(manager, "save", held_once_compacting(manager.save))
    stack.client.responses.during = start_holding
    agent, _ = _agent("hello")
    config = LIMITED if earlier else NO_TRACING
    run = asyncio.ensure_future(Runner.run(agent, "hi", session=stack.top, run_config=config))
    await asyncio.wait_for(started.wait(), TIMEOUT)
    run.cancel()
    for _ in range(5):
        await asyncio.sleep(0)  # the cancellation reaches the run while the write waits
    proceed.set()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, TIMEOUT)
    monkeypatch.undo()
    # The write finished and landed whole before the cancellation was re-raised.
    kept = [text_of(item) for item in earlier[:2]]
    assert [text_of(item) for item in await stack.top.get_items()] == [
        *kept,
        ("assistant", SUMMARY_TEXT),
    ]
    await stack.top.add_items([{"role": "user", "content": "after"}])
    assert [text_of(item) for item in await stack.top.get_items()] == [
        *kept,
        ("assistant", SUMMARY_TEXT),
        ("user", "after"),
    ]


@pytest.mark.parametrize("part", ["whole", "suffix"])
@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_replacement_write_that_fails_leaves_the_history_as_it_was(
    manager: SessionManager, nesting: str, part: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack = Stack(nesting, AgentSessionsSession("conv", manager))
    earlier = [dict(item) for item in EARLIER] if part == "suffix" else []
    if earlier:
        await stack.top.add_items(earlier)
    # Once the API has been called, the only writes left are the replacement's: each
    # fails the way a store that went away does.
    failing = False

    def failing_once_compacting(method: Any) -> Any:
        async def call(*args: Any, **kwargs: Any) -> Any:
            if failing:
                raise BackendUnavailableError("127.0.0.1", "the store went away")
            return await method(*args, **kwargs)

        return call

    async def start_failing() -> None:
        nonlocal failing
        failing = True

    monkeypatch.setattr(manager, "compact", failing_once_compacting(manager.compact))
    monkeypatch.setattr(manager, "save", failing_once_compacting(manager.save))
    stack.client.responses.during = start_failing
    agent, _ = _agent("hello")
    with pytest.raises(BackendUnavailableError):
        await Runner.run(
            agent, "hi", session=stack.top, run_config=LIMITED if earlier else NO_TRACING
        )
    assert stack.client.responses.requests, "the wrapper never compacted"
    monkeypatch.undo()
    assert [text_of(item) for item in await stack.top.get_items()] == [
        *(text_of(item) for item in earlier),
        ("user", "hi"),
        ("assistant", "hello"),
    ]


@pytest.mark.parametrize("nesting", NESTINGS)
async def test_a_backend_without_compaction_still_replaces_in_one_write(
    manager: SessionManager, nesting: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A third-party backend that cannot compact: the replacement is a full rewrite of
    # the session at the version read, never the SDK's clear followed by an add.
    monkeypatch.setattr(
        manager, "capabilities", dataclasses.replace(manager.capabilities, compaction=False)
    )

    async def refused(*args: Any, **kwargs: Any) -> None:
        raise NotImplementedError("this backend cannot compact")

    monkeypatch.setattr(manager, "compact", refused)
    automatic = True
    stack = Stack(nesting, AgentSessionsSession("conv", manager), trigger=lambda _: automatic)
    seen_at_compact: list[tuple[int, list[Any]]] = []

    async def look() -> None:
        seen_at_compact.append(await _stored(manager, "conv"))

    stack.client.responses.during = look
    agent, _ = _agent("hello", "again")
    await Runner.run(agent, "hi", session=stack.top, run_config=NO_TRACING)
    assert [text_of(item) for item in await stack.top.get_items()] == [("assistant", SUMMARY_TEXT)]
    # The manual compaction (the SDK's whole-history replacement) too.
    automatic = False
    await Runner.run(agent, "next", session=stack.top, run_config=NO_TRACING)
    seen_at_compact.clear()
    await stack.top.run_compaction({"force": True})
    assert [text_of(item) for item in await stack.top.get_items()] == [("assistant", SUMMARY_TEXT)]
    [(version_then, items_then)] = seen_at_compact
    assert len(items_then) == 3
    version, _ = await _stored(manager, "conv")
    if nesting != "encrypted-inside":
        # (Under the compaction wrapper, EncryptedSession has no whole-history hook of
        # its own, and the SDK looks that one up on the type: it clears and adds.)
        assert version == version_then + 1, "the replacement was not one atomic write"
