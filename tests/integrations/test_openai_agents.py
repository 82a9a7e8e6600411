"""`AgentSessionsSession` under the OpenAI Agents SDK's real `Runner`, on every backend.

The model is scripted (no network): it answers from a list and records the input the
Runner built, which is how the tests see that history really came from the store.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("agents", reason="needs the openai-agents extra")

from agents import Agent, RunConfig, Runner, Usage
from agents.items import ModelResponse, TResponseInputItem
from agents.memory import Session as SessionProtocol
from agents.memory import SessionABC, SessionSettings
from agents.models.interface import Model
from agentsessions import (
    InvalidInputError,
    SessionConflictError,
    SessionManager,
    SessionOwnershipError,
    SessionSerializationError,
)
from agentsessions.integrations.openai_agents import AgentSessionsSession, ItemSerializationError
from openai.types.responses import ResponseOutputMessage, ResponseOutputText

NO_TRACING = RunConfig(tracing_disabled=True)


class ScriptedModel(Model):
    """Answers each call with the next canned text and keeps the input it was given."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = list(replies)
        self.inputs: list[list[Any]] = []

    async def get_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        self.inputs.append([input] if isinstance(input, str) else list(input))
        number = len(self.inputs)
        message = ResponseOutputMessage(
            id=f"msg_{number}",
            type="message",
            role="assistant",
            status="completed",
            content=[
                ResponseOutputText(type="output_text", text=self.replies.pop(0), annotations=[])
            ],
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=f"resp_{number}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the tests do not stream")


def text_of(item: Any) -> tuple[str, str]:
    """(role, text) of a message item, whatever shape its content has."""
    content = item["content"]
    if isinstance(content, str):
        return item["role"], content
    return item["role"], "".join(part["text"] for part in content)


# -- the Runner, every backend --------------------------------------------------------


async def test_second_run_sees_the_first_runs_items(manager: SessionManager) -> None:
    model = ScriptedModel(["Hello Ada!", "Your name is Ada."])
    agent = Agent(name="assistant", instructions="Be brief.", model=model)

    first = AgentSessionsSession("conv-1", manager, user_id="ada")
    result = await Runner.run(agent, "Hi, I am Ada.", session=first, run_config=NO_TRACING)
    assert result.final_output == "Hello Ada!"

    # The second run goes through a fresh manager and a new session object: what it
    # sees can only come from the store.
    async with manager.with_options() as other_manager:
        second = AgentSessionsSession("conv-1", other_manager, user_id="ada")
        result = await Runner.run(agent, "What is my name?", session=second, run_config=NO_TRACING)
        assert result.final_output == "Your name is Ada."
        stored = await second.get_items()

    assert [text_of(item) for item in model.inputs[0]] == [("user", "Hi, I am Ada.")]
    assert [text_of(item) for item in model.inputs[1]] == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada!"),
        ("user", "What is my name?"),
    ]
    assert [text_of(item) for item in stored] == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada!"),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]
    assert stored[1]["id"] == "msg_1"  # type: ignore[typeddict-item]
    record = await manager.get("conv-1")
    assert record is not None
    assert record.user_id == "ada"
    assert [event.author for event in record.events] == ["user", "assistant"] * 2


@pytest.mark.parametrize("kind", ["long", "long-twin", "blank", "prefixed"])
async def test_any_session_id_the_sdk_accepts(manager: SessionManager, kind: str) -> None:
    # The SDK takes any string as a session id: a URL past our 255 limit, two such ids
    # sharing their first 999 characters, a blank one, one that looks like a mapped id.
    base = "https://example.com/tenants/acme/conversations/" + uuid.uuid4().hex + "x" * 1000
    session_id = {
        "long": base[:1000],
        "long-twin": base[:999] + "y",
        "blank": " " * 3,
        "prefixed": "oaid:" + uuid.uuid4().hex,
    }[kind]
    twin = base[:999] + "z"
    model = ScriptedModel(["Hello Ada!", "Your name is Ada.", "Who?"])
    agent = Agent(name="assistant", model=model)
    first = AgentSessionsSession(session_id, manager, user_id="ada")
    await Runner.run(agent, "Hi, I am Ada.", session=first, run_config=NO_TRACING)
    assert first.session_id == session_id, "the SDK's session id must stay as given"
    async with manager.with_options() as other_manager:
        second = AgentSessionsSession(session_id, other_manager, user_id="ada")
        result = await Runner.run(agent, "What is my name?", session=second, run_config=NO_TRACING)
    assert result.final_output == "Your name is Ada."
    assert [text_of(item) for item in model.inputs[1]][:2] == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada!"),
    ], f"a second run on session id {session_id[:40]!r}... did not see the first run's items"
    other = AgentSessionsSession(twin, manager, user_id="ada")
    assert await other.get_items() == [], (
        "another session id sharing the first 999 characters read this session's items"
    )
    await first.clear_session()
    assert await AgentSessionsSession(session_id, manager, user_id="ada").get_items() == []


async def test_session_settings_limit_bounds_the_history_a_run_reads(
    manager: SessionManager,
) -> None:
    model = ScriptedModel(["one", "two", "three"])
    agent = Agent(name="assistant", model=model)
    session = AgentSessionsSession("conv-limit", manager, session_settings={"limit": 2})
    for text in ("a", "b", "c"):
        await Runner.run(agent, text, session=session, run_config=NO_TRACING)
    # Two stored items (the previous turn) plus the new input.
    assert [text_of(item) for item in model.inputs[2]] == [
        ("user", "b"),
        ("assistant", "two"),
        ("user", "c"),
    ]
    assert len(await session.get_items(limit=None)) == 2  # the setting applies
    assert len(await session.get_items(limit=10)) == 6  # an explicit limit wins


# -- the session protocol ---------------------------------------------------------------


ITEM_SHAPES: list[Any] = [
    {"role": "user", "content": "plain text, ünïcödé, emoji 🚀, quotes \" ' and \\ backslash"},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "look at this"},
            {
                "type": "input_image",
                "image_url": "data:image/png;base64,iVBORw0KGgo=",
                "detail": "auto",
            },
        ],
    },
    {
        "id": "msg_abc",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "sure", "annotations": []}],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris", "days": 3}',
        "status": "completed",
    },
    {"type": "function_call_output", "call_id": "call_1", "output": "18.5°C, light rain"},
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "think"}],
        "encrypted_content": None,
    },
    {
        "role": "system",
        "content": "numbers",
        "extra": {
            "int": 2**62,
            "float": 0.1,
            "neg": -1e-300,
            "nested": [[], {}, [None, True, False]],
        },
    },
]


async def test_items_round_trip_exactly(manager: SessionManager) -> None:
    session = AgentSessionsSession("conv-shapes", manager)
    # The protocol, as the SDK asks of third-party sessions, not its internal ABC.
    assert isinstance(session, SessionProtocol)
    assert not isinstance(session, SessionABC)
    await session.add_items(ITEM_SHAPES[:3])
    await session.add_items(ITEM_SHAPES[3:])

    assert await session.get_items() == ITEM_SHAPES
    assert await session.get_items(limit=2) == ITEM_SHAPES[-2:]
    assert await session.get_items(limit=0) == []
    assert await session.get_items(limit=-1) == ITEM_SHAPES  # as the SDK's SQLite session
    assert await session.get_items(limit=100) == ITEM_SHAPES
    record = await manager.get("conv-shapes")
    assert record is not None
    assert [event.author for event in record.events] == [
        "user",
        "user",
        "assistant",
        "function_call",
        "function_call_output",
        "reasoning",
        "system",
    ]
    assert [event.content for event in record.events] == ITEM_SHAPES


async def test_reads_of_an_absent_session_are_empty_and_write_nothing(
    manager: SessionManager,
) -> None:
    session = AgentSessionsSession("never-written", manager)
    assert await session.get_items() == []
    assert await session.pop_item() is None
    await session.clear_session()
    await session.add_items([])
    assert await manager.get("never-written") is None


async def test_pop_item_removes_and_returns_the_newest(manager: SessionManager) -> None:
    session = AgentSessionsSession("conv-pop", manager)
    await session.add_items(ITEM_SHAPES[:3])
    assert await session.pop_item() == ITEM_SHAPES[2]
    assert await session.get_items() == ITEM_SHAPES[:2]
    assert await session.pop_item() == ITEM_SHAPES[1]
    assert await session.pop_item() == ITEM_SHAPES[0]
    assert await session.pop_item() is None
    stored = await manager.get("conv-pop")
    assert stored is not None
    assert stored.events == []


async def test_clear_session_empties_history_and_keeps_the_session(
    manager: SessionManager,
) -> None:
    session = AgentSessionsSession("conv-clear", manager, user_id="bo")
    await session.add_items(ITEM_SHAPES)
    await manager.update("conv-clear", lambda s: s.state.update(plan="pro"))

    await session.clear_session()

    assert await session.get_items() == []
    stored = await manager.get("conv-clear")
    assert stored is not None
    assert stored.events == []
    assert stored.state == {"plan": "pro"}
    assert stored.user_id == "bo"
    await session.add_items(ITEM_SHAPES[:1])
    assert await session.get_items() == ITEM_SHAPES[:1]


class RacingSaves:
    """Makes every save of the managers it wraps wait until *width* saves are pending,
    so that writers that loaded the same version really collide; counts the conflicts.

    Writers that collide use managers of their own, as separate processes would: the
    update() calls of one manager on one session share saves instead of colliding.
    """

    def __init__(self, width: int) -> None:
        self.width = width
        self.pending = 0
        self.conflicts = 0
        self.saves = 0
        self.released = asyncio.Event()

    def wrap(self, manager: SessionManager, monkeypatch: pytest.MonkeyPatch) -> None:
        real = manager.save

        async def save(session: Any) -> None:
            self.pending += 1
            if self.pending >= self.width:
                self.released.set()
            await asyncio.wait_for(self.released.wait(), timeout=10)
            self.saves += 1
            try:
                await real(session)
            except SessionConflictError:
                self.conflicts += 1
                raise

        monkeypatch.setattr(manager, "save", save)


@contextlib.asynccontextmanager
async def racing_managers(
    manager: SessionManager, count: int, racing: RacingSaves, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[SessionManager]]:
    """*manager* and *count* - 1 other managers on its store, their saves racing."""
    managers = [manager, *(manager.with_options() for _ in range(count - 1))]
    for each in managers:
        racing.wrap(each, monkeypatch)
    try:
        yield managers
    finally:
        for other in managers[1:]:
            await other.close()


async def test_concurrent_add_items_all_land(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create("conv-race")
    racing = RacingSaves(width=4)
    batches = [
        [{"role": "user", "content": f"writer {writer} item {index}"} for index in range(3)]
        for writer in range(4)
    ]
    # Separate session objects and managers, as separate runs (or processes) would have.
    async with racing_managers(manager, 4, racing, monkeypatch) as managers:
        await asyncio.gather(
            *(
                AgentSessionsSession("conv-race", each).add_items(batch)
                for each, batch in zip(managers, batches, strict=True)
            )
        )

    assert racing.conflicts >= 3  # all four loaded one version: three had to retry
    stored = await AgentSessionsSession("conv-race", manager).get_items()
    assert sorted(map(str, stored)) == sorted(str(item) for batch in batches for item in batch)
    # Each add_items is one save: its items stay together and in order.
    starts = sorted(stored.index(batch[0]) for batch in batches)
    assert starts == [0, 3, 6, 9]
    for batch in batches:
        start = stored.index(batch[0])
        assert stored[start : start + 3] == batch


async def test_concurrent_add_items_through_one_manager_share_saves(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create("conv-grouped")
    saves: list[int] = []
    real = manager.save

    async def counted(session: Any) -> None:
        saves.append(len(session.events))
        await asyncio.sleep(0.01)  # the others arrive while this save is in flight
        await real(session)

    monkeypatch.setattr(manager, "save", counted)
    batches = [
        [{"role": "user", "content": f"writer {writer} item {index}"} for index in range(3)]
        for writer in range(6)
    ]
    await asyncio.gather(
        *(AgentSessionsSession("conv-grouped", manager).add_items(batch) for batch in batches)
    )

    assert len(saves) == 2  # the first alone, the five that waited for it together
    stored = await AgentSessionsSession("conv-grouped", manager).get_items()
    assert stored == [item for batch in batches for item in batch]  # in call order


async def test_add_items_after_get_items_saves_the_read_copy_without_loading_again(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentSessionsSession("conv-held", manager)
    await session.add_items(ITEM_SHAPES[:3])
    loads: list[int | None] = []
    load = manager._load

    async def counted(session_id: str, last_events: int | None, now: Any) -> Any:
        loads.append(last_events)
        return await load(session_id, last_events, now)

    monkeypatch.setattr(manager, "_load", counted)
    assert await session.get_items() == ITEM_SHAPES[:3]
    await session.add_items(ITEM_SHAPES[3:4])
    await session.add_items(ITEM_SHAPES[4:5])
    assert loads == [None]  # the read only: both appends saved the copy it loaded
    assert session._held is not None and session._held.events == []  # no history kept
    # Another writer saves in between: the held copy is stale, so the append loads
    # the version again (last_events=0) and lands after the other writer's item.
    other = AgentSessionsSession("conv-held", manager)
    await session.get_items(limit=1)
    await other.add_items([{"role": "user", "content": "from the other writer"}])
    await session.add_items(ITEM_SHAPES[:1])
    stored = await AgentSessionsSession("conv-held", manager).get_items()
    assert stored == [
        *ITEM_SHAPES[:5],
        {"role": "user", "content": "from the other writer"},
        ITEM_SHAPES[0],
    ]
    assert 0 in loads[1:]


async def test_add_items_on_the_read_copy_keeps_the_stored_lineage(
    manager: SessionManager,
) -> None:
    # The copy an append saves carries the lineage its read loaded: the append keeps
    # the stored history's lineage (the one incremental reloads check) instead of
    # writing it as unknown.
    session = AgentSessionsSession("conv-lineage", manager)
    await session.add_items(ITEM_SHAPES[:2])
    now = manager.clock.now()
    before = await manager._load("conv-lineage", 0, now)
    assert before is not None and before.record.lineage
    await session.get_items(limit=1)
    await session.add_items(ITEM_SHAPES[2:3])
    await session.add_items(ITEM_SHAPES[3:4])
    after = await manager._load("conv-lineage", 0, manager.clock.now())
    assert after is not None and after.record.lineage == before.record.lineage
    assert await session.get_items() == ITEM_SHAPES[:4]


async def test_an_encrypted_append_after_a_read_loads_nothing_more(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With encryption a save of events it did not load needs the stored events'
    # sealing shift; the copy a read leaves carries it, so the append is the save alone.
    from agentsessions import connect
    from agentsessions.encryption import Keyring

    keyring = Keyring({"k": os.urandom(32)}, current="k")
    async with connect(f"sqlite:///{tmp_path / 'sealed.db'}", encryption=keyring) as sealed:
        session = AgentSessionsSession("conv-sealed", sealed)
        await session.add_items(ITEM_SHAPES[:3])
        loads: list[int | None] = []
        load = sealed._load

        async def counted(session_id: str, last_events: int | None, now: Any) -> Any:
            loads.append(last_events)
            return await load(session_id, last_events, now)

        monkeypatch.setattr(sealed, "_load", counted)
        assert await session.get_items(limit=2) == ITEM_SHAPES[1:3]
        await session.add_items(ITEM_SHAPES[3:4])
        await session.add_items(ITEM_SHAPES[4:5])
        assert loads == [2]
        monkeypatch.undo()
        assert await AgentSessionsSession("conv-sealed", sealed).get_items() == ITEM_SHAPES[:5]


async def test_concurrent_creation_by_add_items_loses_nothing(manager: SessionManager) -> None:
    batches = [[{"role": "user", "content": f"first write {n}"}] for n in range(5)]
    await asyncio.gather(
        *(AgentSessionsSession("conv-new", manager).add_items(batch) for batch in batches)
    )
    stored = await AgentSessionsSession("conv-new", manager).get_items()
    assert sorted(item["content"] for item in stored) == sorted(b[0]["content"] for b in batches)  # type: ignore[typeddict-item]


async def test_concurrent_pops_return_distinct_items(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentSessionsSession("conv-pops", manager)
    await session.add_items(ITEM_SHAPES[:4])
    racing = RacingSaves(width=2)
    racing.wrap(manager, monkeypatch)
    popped = await asyncio.gather(session.pop_item(), session.pop_item())
    assert racing.conflicts >= 1
    assert sorted(map(str, popped)) == sorted(map(str, ITEM_SHAPES[2:4]))
    assert await session.get_items() == ITEM_SHAPES[:2]


async def test_conflicts_beyond_retries_raise(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentSessionsSession("conv-hot", manager, retries=0)
    await session.add_items(ITEM_SHAPES[:1])
    racing = RacingSaves(width=2)
    async with racing_managers(manager, 2, racing, monkeypatch) as managers:
        outcomes = await asyncio.gather(
            *(
                AgentSessionsSession("conv-hot", each, retries=0).add_items(items)
                for each, items in zip(managers, [ITEM_SHAPES[1:2], ITEM_SHAPES[2:3]], strict=True)
            ),
            return_exceptions=True,
        )
    assert sum(isinstance(o, SessionConflictError) for o in outcomes) == 1
    assert len(await session.get_items()) == 2  # the loser wrote nothing


async def test_add_items_cancelled_mid_save_still_lands(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = AgentSessionsSession("conv-cancel", manager)
    gate = asyncio.Event()
    entered = asyncio.Event()
    real_save = manager.save

    async def slow_save(stored: Any) -> None:
        entered.set()
        await gate.wait()
        await real_save(stored)

    monkeypatch.setattr(manager, "save", slow_save)
    task = asyncio.create_task(session.add_items(ITEM_SHAPES[:2]))
    await entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()  # the save is allowed to finish
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(manager, "save", real_save)
    assert await session.get_items() == ITEM_SHAPES[:2]


async def test_another_users_session_is_refused(manager: SessionManager) -> None:
    await AgentSessionsSession("conv-owned", manager, user_id="alice").add_items(ITEM_SHAPES[:1])
    intruder = AgentSessionsSession("conv-owned", manager, user_id="mallory")
    with pytest.raises(SessionOwnershipError):
        await intruder.get_items()
    with pytest.raises(SessionOwnershipError):
        await intruder.add_items(ITEM_SHAPES[1:2])
    with pytest.raises(SessionOwnershipError):
        await intruder.pop_item()
    with pytest.raises(SessionOwnershipError):
        await intruder.clear_session()
    assert await AgentSessionsSession("conv-owned", manager).get_items() == ITEM_SHAPES[:1]


async def test_bad_items_are_refused_and_nothing_is_written(manager: SessionManager) -> None:
    session = AgentSessionsSession("conv-bad", manager)
    await session.add_items(ITEM_SHAPES[:1])
    with pytest.raises(SessionSerializationError, match=r"items\[1\]\['x'\].*nan"):
        await session.add_items(
            [{"role": "user", "content": "ok"}, {"role": "user", "x": float("nan")}]
        )
    # What code written for the SDK's stores catches (json.dumps raises TypeError there).
    with pytest.raises(TypeError, match="tuple"):
        await session.add_items([{"role": "user", "content": ("not", "json")}])
    with pytest.raises(ItemSerializationError):
        await session.add_items([{"role": "user", "content": object()}])
    bad: list[TResponseInputItem] = ["just a string"]  # type: ignore[list-item]
    with pytest.raises(InvalidInputError, match=r"items\[0\] is a str"):
        await session.add_items(bad)
    with pytest.raises(TypeError):
        await session.add_items(bad)
    assert await session.get_items() == ITEM_SHAPES[:1]


def test_constructor_validates_its_arguments(manager: SessionManager) -> None:
    # Any string the SDK takes is a session id (test_any_session_id_the_sdk_accepts),
    # except what no engine stores.
    with pytest.raises(InvalidInputError, match="session_id"):
        AgentSessionsSession("a\x00b", manager)
    with pytest.raises(InvalidInputError, match="session_id"):
        AgentSessionsSession(42, manager)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="user_id"):
        AgentSessionsSession("s", manager, user_id="x" * 256)
    with pytest.raises(InvalidInputError, match="manager"):
        AgentSessionsSession("s", "sqlite:///x.db")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="retries"):
        AgentSessionsSession("s", manager, retries=-1)
    session = AgentSessionsSession("s", manager, session_settings=SessionSettings(limit=5))
    assert session.session_settings == SessionSettings(limit=5)
    assert AgentSessionsSession("s", manager).session_settings == SessionSettings()
