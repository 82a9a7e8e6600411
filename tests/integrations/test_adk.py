"""`AgentSessionsSessionService` under Google ADK's real `Runner`, on every backend.

The model is a scripted `BaseLlm` (no network): it answers from a list and records
the contents of each request, which is how the tests see that the conversation
history really came from the store.
"""

from __future__ import annotations

import asyncio
import gc
import os
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from pydantic import Field

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("google.adk", reason="needs the adk extra")

from agentsessions import SessionManager, SessionSerializationError
from agentsessions._tracking import LazyEvents
from agentsessions.integrations.adk import AgentSessionsSessionService
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps.app import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, InMemorySessionService, Session
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types


class ScriptedLlm(BaseLlm):
    """Answers each request with the next canned text; keeps what each request held."""

    replies: list[str]
    requests: list[list[tuple[str, str]]] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(
            [
                (content.role or "", "".join(part.text or "" for part in content.parts or []))
                for content in llm_request.contents
            ]
        )
        text = self.replies.pop(0)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text=text)]))


def user_says(text: str) -> types.Content:
    return types.Content(role="user", parts=[types.Part(text=text)])


async def run_turn(runner: Runner, user_id: str, session_id: str, text: str) -> list[Event]:
    return [
        event
        async for event in runner.run_async(
            user_id=user_id, session_id=session_id, new_message=user_says(text)
        )
    ]


def state_event(delta: dict[str, Any], author: str = "agent", text: str = "") -> Event:
    content = types.Content(role="model", parts=[types.Part(text=text or "noted")])
    return Event(
        author=author,
        invocation_id="inv-1",
        content=content,
        actions=EventActions(state_delta=delta),
    )


# -- the Runner, every backend --------------------------------------------------------


async def test_second_run_sees_the_first_runs_history(manager: SessionManager) -> None:
    llm = ScriptedLlm(model="scripted", replies=["Hello Ada!", "Your name is Ada."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Be brief.", output_key="last_reply")
    service = AgentSessionsSessionService(manager)
    assert isinstance(service, BaseSessionService)
    session = await service.create_session(
        app_name="support", user_id="ada", state={"topic": "intro"}
    )

    events = await run_turn(
        Runner(app_name="support", agent=agent, session_service=service),
        "ada",
        session.id,
        "Hi, I am Ada.",
    )
    assert [
        event.content.parts[0].text for event in events if event.content and event.content.parts
    ] == ["Hello Ada!"]

    # The second run goes through a fresh manager and service: what it sees can only
    # come from the store.
    async with manager.with_options() as other_manager:
        other = AgentSessionsSessionService(other_manager)
        runner = Runner(app_name="support", agent=agent, session_service=other)
        await run_turn(runner, "ada", session.id, "What is my name?")
        stored = await other.get_session(app_name="support", user_id="ada", session_id=session.id)

    assert llm.requests[0] == [("user", "Hi, I am Ada.")]
    assert llm.requests[1] == [
        ("user", "Hi, I am Ada."),
        ("model", "Hello Ada!"),
        ("user", "What is my name?"),
    ]
    assert stored is not None
    assert [
        (e.author, e.content.parts[0].text) for e in stored.events if e.content and e.content.parts
    ] == [
        ("user", "Hi, I am Ada."),
        ("assistant", "Hello Ada!"),
        ("user", "What is my name?"),
        ("assistant", "Your name is Ada."),
    ]
    assert stored.state == {"topic": "intro", "last_reply": "Your name is Ada."}


# -- state scopes ------------------------------------------------------------------------


async def test_state_scopes(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    first = await service.create_session(
        app_name="shop",
        user_id="u1",
        session_id="s1",
        state={"app:theme": "dark", "user:lang": "fr", "temp:draft": "x", "cart": 1},
    )
    assert first.state == {"app:theme": "dark", "user:lang": "fr", "cart": 1}

    # app: is shared by the application, user: by the user's sessions, the rest is the
    # session's own.
    same_user = await service.create_session(app_name="shop", user_id="u1", session_id="s2")
    assert same_user.state == {"app:theme": "dark", "user:lang": "fr"}
    other_user = await service.create_session(app_name="shop", user_id="u2", session_id="s1")
    assert other_user.state == {"app:theme": "dark"}
    other_app = await service.create_session(app_name="blog", user_id="u1", session_id="s1")
    assert other_app.state == {}

    event = state_event({"app:count": 2, "user:score": 5, "temp:scratch": 9, "cart": 2})
    await service.append_event(first, event)
    # temp: reaches the live session only, and is cut from the stored delta.
    assert first.state["temp:scratch"] == 9
    assert event.actions.state_delta == {"app:count": 2, "user:score": 5, "cart": 2}

    reread = await service.get_session(app_name="shop", user_id="u1", session_id="s1")
    assert reread is not None
    assert reread.state == {
        "app:theme": "dark",
        "app:count": 2,
        "user:lang": "fr",
        "user:score": 5,
        "cart": 2,
    }
    assert reread.events[-1].actions.state_delta == {"app:count": 2, "user:score": 5, "cart": 2}
    sibling = await service.get_session(app_name="shop", user_id="u1", session_id="s2")
    assert sibling is not None
    assert sibling.state == {
        "app:theme": "dark",
        "app:count": 2,
        "user:lang": "fr",
        "user:score": 5,
    }
    stranger = await service.get_session(app_name="shop", user_id="u2", session_id="s1")
    assert stranger is not None
    assert stranger.state == {"app:theme": "dark", "app:count": 2}
    assert await service.get_user_state(app_name="shop", user_id="u1") == {"lang": "fr", "score": 5}
    assert await service.get_user_state(app_name="shop", user_id="nobody") == {}
    elsewhere = await service.get_session(app_name="blog", user_id="u1", session_id="s1")
    assert elsewhere is not None
    assert elsewhere.state == {}


async def test_state_values_are_stored_as_json_or_refused(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    with pytest.raises(SessionSerializationError, match="Unable to serialize"):
        await service.append_event(session, state_event({"fn": print}))
    with pytest.raises(SessionSerializationError, match="Unable to serialize"):
        await service.create_session(
            app_name="a", user_id="u", session_id="t", state={"user:fn": print}
        )
    assert await service.get_session(app_name="a", user_id="u", session_id="t") is None
    assert await service.get_user_state(app_name="a", user_id="u") == {}
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert stored.events == []
    # What ADK's database services store for a tuple or a set: a list.
    await service.append_event(session, state_event({"pair": (1, 2)}))
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert stored.state == {"pair": [1, 2]}


# -- staleness -------------------------------------------------------------------------


async def test_append_from_a_stale_copy_is_rejected(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    await service.create_session(app_name="a", user_id="u", session_id="s")
    copy_a = await service.get_session(app_name="a", user_id="u", session_id="s")
    copy_b = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert copy_a is not None
    assert copy_b is not None

    await service.append_event(copy_a, state_event({"k": "a"}, text="from a"))
    await service.append_event(
        copy_a, state_event({"k": "a2"}, text="a again")
    )  # its own marker moved on
    with pytest.raises(StaleSessionError):
        await service.append_event(copy_b, state_event({"k": "b"}, text="from b"))

    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert [e.content.parts[0].text for e in stored.events if e.content and e.content.parts] == [
        "from a",
        "a again",
    ]
    assert stored.state == {"k": "a2"}
    # A reloaded copy appends fine.
    await service.append_event(stored, state_event({"k": "c"}))
    assert len(stored.events) == 3


async def test_an_append_after_a_write_by_another_service_is_stale(
    manager: SessionManager,
) -> None:
    # The copy a service holds for a session it returned saves without a load; a write
    # by another service (or process) in between must still make the append stale.
    first, second = AgentSessionsSessionService(manager), AgentSessionsSessionService(manager)
    await first.create_session(app_name="a", user_id="u", session_id="s")
    mine = await first.get_session(app_name="a", user_id="u", session_id="s")
    theirs = await second.get_session(app_name="a", user_id="u", session_id="s")
    assert mine is not None and theirs is not None
    await second.append_event(theirs, state_event({"k": "theirs"}, text="theirs"))
    with pytest.raises(StaleSessionError):
        await first.append_event(mine, state_event({"k": "mine"}, text="mine"))
    # The same through the manager directly, on a copy that appended before.
    fresh = await first.get_session(app_name="a", user_id="u", session_id="s")
    assert fresh is not None
    await first.append_event(fresh, state_event({}, text="one"))
    stored = await manager.get("adk/s/a/u/s")
    assert stored is not None
    stored.state["state"] = {"k": "outside"}
    await manager.save(stored)
    with pytest.raises(StaleSessionError):
        await first.append_event(fresh, state_event({}, text="two"))
    final = await first.get_session(app_name="a", user_id="u", session_id="s")
    assert final is not None
    assert [e.content.parts[0].text for e in final.events if e.content and e.content.parts] == [
        "theirs",
        "one",
    ]
    assert final.state == {"k": "outside"}


async def test_held_copies_go_with_their_sessions(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    created = await service.create_session(app_name="a", user_id="u", session_id="s")
    await service.append_event(created, state_event({}, text="one"))
    loaded = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert loaded is not None
    assert len(service._copies) == 2
    # An append through the held copy reads the newest id without decoding the history.
    await service.append_event(loaded, state_event({}, text="two"))
    held = service._copies.get(loaded)
    assert held is not None
    if isinstance(held.events, LazyEvents):
        assert not held.events.decoded
    del created, loaded, held
    gc.collect()
    assert len(service._copies) == 0


async def test_copies_without_a_marker_are_checked_by_time_and_last_event(
    manager: SessionManager,
) -> None:
    service = AgentSessionsSessionService(manager)
    created = await service.create_session(app_name="a", user_id="u", session_id="s")
    await service.append_event(created, state_event({}, text="one"))
    loaded = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert loaded is not None

    # Built by hand, up to date: same newest event, older time -> accepted (as ADK's DB).
    by_hand = Session(
        app_name="a", user_id="u", id="s", events=list(loaded.events), last_update_time=0.0
    )
    await service.append_event(by_hand, state_event({}, text="two"))
    # Built by hand, behind: storage moved on past its newest event -> stale.
    behind = Session(
        app_name="a", user_id="u", id="s", events=list(loaded.events), last_update_time=0.0
    )
    with pytest.raises(StaleSessionError):
        await service.append_event(behind, state_event({}, text="three"))
    empty = Session(app_name="a", user_id="u", id="s", events=[], last_update_time=0.0)
    with pytest.raises(StaleSessionError):
        await service.append_event(empty, state_event({}, text="three"))


async def test_parallel_appends_through_one_session_object_both_land(
    manager: SessionManager,
) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    await asyncio.gather(
        *(service.append_event(session, state_event({f"k{n}": n}, text=f"e{n}")) for n in range(5))
    )
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert sorted(
        e.content.parts[0].text for e in stored.events if e.content and e.content.parts
    ) == [f"e{n}" for n in range(5)]
    assert stored.state == {f"k{n}": n for n in range(5)}


async def test_redelivered_event_is_not_stored_twice(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    event = state_event({"n": 1})
    await service.append_event(session, event)
    assert await service.append_event(session, event) is event
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert [e.id for e in stored.events] == [event.id]


async def test_append_to_a_missing_session_raises(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    ghost = Session(app_name="a", user_id="u", id="ghost")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(ghost, state_event({}))
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    await service.delete_session(app_name="a", user_id="u", session_id="s")
    with pytest.raises(SessionNotFoundError):
        await service.append_event(session, state_event({}))


async def test_partial_events_are_not_stored(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    chunk = state_event({"k": 1})
    chunk.partial = True
    assert await service.append_event(session, chunk) is chunk
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert stored.events == []
    assert stored.state == {}


# -- identity, create, get, list, delete --------------------------------------------------


async def test_ids_of_apps_and_users_never_collide(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    triples = [
        ("a/b", "c", "s"),
        ("a", "b/c", "s"),
        ("a", "b", "c/s"),
        ("a%2Fb", "c", "s"),
        ("a~", "b", "s"),
        ("a", "", "s"),
        ("", "a", "s"),
    ]
    for number, (app, user, sid) in enumerate(triples):
        created = await service.create_session(
            app_name=app,
            user_id=user,
            session_id=sid,
            state={"n": number, "user:n": number, "app:n": number},
        )
        assert created.state == {"n": number, "user:n": number, "app:n": number}
    # Every (app, user) pair above is distinct; app "a" has three sessions, so its
    # app: state holds the last value written.
    last_of_app = {app: number for number, (app, _, _) in enumerate(triples)}
    for number, (app, user, sid) in enumerate(triples):
        got = await service.get_session(app_name=app, user_id=user, session_id=sid)
        assert got is not None
        assert (got.app_name, got.user_id, got.id) == (app, user, sid)
        assert got.state == {"n": number, "user:n": number, "app:n": last_of_app[app]}
        assert await service.get_user_state(app_name=app, user_id=user) == {"n": number}


async def test_long_ids_are_hashed_to_fit_and_stay_distinct(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    app, user = "app-" + "x" * 300, "user-" + "é" * 300
    long_ids = ["s" * 1000 + "1", "s" * 1000 + "2", "/" * 200]
    for number, sid in enumerate(long_ids):
        await service.create_session(
            app_name=app, user_id=user, session_id=sid, state={"n": number, "user:u": 1}
        )
    for number, sid in enumerate(long_ids):
        got = await service.get_session(app_name=app, user_id=user, session_id=sid)
        assert got is not None
        assert got.id == sid
        assert got.state == {"n": number, "user:u": 1}
    listed = await service.list_sessions(app_name=app, user_id=user)
    assert sorted(s.id for s in listed.sessions) == sorted(long_ids)
    page = await manager.list_sessions()
    assert page.items
    assert all(len(summary.session_id) <= 255 for summary in page.items)


async def test_create_refuses_a_taken_id_and_generates_one_when_absent(
    manager: SessionManager,
) -> None:
    service = AgentSessionsSessionService(manager)
    await service.create_session(app_name="a", user_id="u", session_id="s", state={"v": 1})
    with pytest.raises(AlreadyExistsError):
        await service.create_session(
            app_name="a", user_id="u", session_id="s", state={"v": 2, "app:x": 1}
        )
    kept = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert kept is not None
    assert kept.state == {"v": 1}  # nothing of the refused create was written
    generated = await service.create_session(app_name="a", user_id="u")
    assert generated.id
    assert generated.id != "s"
    assert await service.get_session(app_name="a", user_id="u", session_id=generated.id) is not None


async def test_get_session_config(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    originals = []
    for number in range(5):
        event = state_event({}, text=f"e{number}")
        event.timestamp = 1_700_000_000.0 + number
        originals.append(event)
        await service.append_event(session, event)

    async def texts(config: GetSessionConfig | None) -> list[str]:
        got = await service.get_session(app_name="a", user_id="u", session_id="s", config=config)
        assert got is not None
        return [e.content.parts[0].text for e in got.events if e.content and e.content.parts]

    assert await texts(None) == [f"e{n}" for n in range(5)]
    assert await texts(GetSessionConfig(num_recent_events=2)) == ["e3", "e4"]
    assert await texts(GetSessionConfig(num_recent_events=50)) == [f"e{n}" for n in range(5)]
    assert await texts(GetSessionConfig(num_recent_events=0)) == []
    assert await texts(GetSessionConfig(after_timestamp=1_700_000_002.0)) == ["e2", "e3", "e4"]
    assert await texts(GetSessionConfig(num_recent_events=4, after_timestamp=1_700_000_003.0)) == [
        "e3",
        "e4",
    ]
    got = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert got is not None
    assert got.events == originals  # every field round-trips


async def test_events_round_trip_exactly(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    call = types.FunctionCall(id="call-1", name="lookup", args={"q": "ünïcode", "n": 3, "f": 0.1})
    events = [
        Event(
            author="user",
            invocation_id="i",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(text="see picture"),
                    types.Part(
                        inline_data=types.Blob(mime_type="image/png", data=b"\x89PNG\x00\xff")
                    ),
                ],
            ),
        ),
        Event(
            author="agent",
            invocation_id="i",
            content=types.Content(role="model", parts=[types.Part(function_call=call)]),
        ),
        Event(
            author="agent",
            invocation_id="i",
            content=types.Content(
                role="user",
                parts=[
                    types.Part(
                        function_response=types.FunctionResponse(
                            id="call-1", name="lookup", response={"ok": True, "rows": [1, None]}
                        )
                    )
                ],
            ),
            actions=EventActions(state_delta={"seen": ["x"]}, skip_summarization=True),
        ),
    ]
    for event in events:
        await service.append_event(session, event)
    got = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert got is not None
    assert got.events == events
    assert got.events == session.events


async def test_list_sessions(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    s1 = await service.create_session(
        app_name="a", user_id="u1", session_id="s1", state={"k": 1, "app:x": 1}
    )
    await service.create_session(app_name="a", user_id="u2", session_id="s2", state={"user:y": 2})
    await service.create_session(app_name="a", user_id="u1", session_id="s3")
    await service.create_session(app_name="other", user_id="u1", session_id="s9")
    await service.append_event(s1, state_event({"k": 2}))  # s1 is now the most recently updated

    everyone = await service.list_sessions(app_name="a")
    assert [(s.user_id, s.id) for s in everyone.sessions] == [
        ("u2", "s2"),
        ("u1", "s3"),
        ("u1", "s1"),
    ]
    assert all(s.events == [] for s in everyone.sessions)
    by_id = {s.id: s for s in everyone.sessions}
    assert by_id["s1"].state == {"k": 2, "app:x": 1}
    assert by_id["s2"].state == {"app:x": 1, "user:y": 2}
    times = [s.last_update_time for s in everyone.sessions]
    assert times == sorted(times)

    mine = await service.list_sessions(app_name="a", user_id="u1")
    assert [s.id for s in mine.sessions] == ["s3", "s1"]
    assert (await service.list_sessions(app_name="a", user_id="nobody")).sessions == []
    assert (await service.list_sessions(app_name="missing")).sessions == []
    # A listed session can be appended to: it carries its marker.
    await service.append_event(mine.sessions[0], state_event({}))


async def test_delete_session(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    await service.create_session(app_name="a", user_id="u", session_id="s", state={"user:keep": 1})
    await service.create_session(app_name="a", user_id="other", session_id="s")
    await service.delete_session(app_name="a", user_id="u", session_id="s")
    assert await service.get_session(app_name="a", user_id="u", session_id="s") is None
    assert await service.get_session(app_name="a", user_id="other", session_id="s") is not None
    assert await service.get_user_state(app_name="a", user_id="u") == {"keep": 1}
    await service.delete_session(app_name="a", user_id="u", session_id="s")  # absent: no error
    # The id is free again.
    again = await service.create_session(app_name="a", user_id="u", session_id="s")
    assert again.state == {"user:keep": 1}


async def test_cancelled_append_still_lands_and_updates_the_session(
    manager: SessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = AgentSessionsSessionService(manager)
    session = await service.create_session(app_name="a", user_id="u", session_id="s")
    gate, entered = asyncio.Event(), asyncio.Event()
    real_save = manager.save

    async def slow_save(stored: Any) -> None:
        entered.set()
        await gate.wait()
        await real_save(stored)

    monkeypatch.setattr(manager, "save", slow_save)
    event = state_event({"k": 1})
    task = asyncio.create_task(service.append_event(session, event))
    await entered.wait()
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(manager, "save", real_save)
    # Storage and the live session agree, so the session object can go on appending.
    assert session.events == [event]
    assert session.state == {"k": 1}
    await service.append_event(session, state_event({"k": 2}))
    stored = await service.get_session(app_name="a", user_id="u", session_id="s")
    assert stored is not None
    assert len(stored.events) == 2
    assert stored.state == {"k": 2}


def _timed_event(text: str, when: float) -> Event:
    event = state_event({}, text=text)
    event.timestamp = when
    return event


async def _update_times(service: BaseSessionService) -> dict[str, float]:
    created = await service.create_session(app_name="t", user_id="u", session_id="s")
    times = {"created": created.last_update_time}
    await service.append_event(created, _timed_event("one", 1_700_000_000.25))
    times["live after one"] = created.last_update_time
    await service.append_event(created, _timed_event("two", 1_700_000_100.5))
    times["live after two"] = created.last_update_time
    loaded = await service.get_session(app_name="t", user_id="u", session_id="s")
    assert loaded is not None
    times["get"] = loaded.last_update_time
    (listed,) = (await service.list_sessions(app_name="t", user_id="u")).sessions
    times["list"] = listed.last_update_time
    (listed_all,) = (await service.list_sessions(app_name="t")).sessions
    times["list all users"] = listed_all.last_update_time
    # A copy built by hand that holds the newest event and its time is up to date.
    by_hand = Session(
        app_name="t",
        user_id="u",
        id="s",
        events=list(loaded.events),
        last_update_time=loaded.last_update_time,
    )
    await service.append_event(by_hand, _timed_event("three", 1_700_000_200.75))
    times["by hand"] = by_hand.last_update_time
    return times


async def test_last_update_time_is_the_newest_events_time_as_in_adk(
    manager: SessionManager,
) -> None:
    ours = await _update_times(AgentSessionsSessionService(manager))
    reference = await _update_times(InMemorySessionService())
    assert abs(ours.pop("created") - reference.pop("created")) < 60
    assert ours == reference
    assert reference["get"] == 1_700_000_100.5


async def _id_handling(service: BaseSessionService) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    created = await service.create_session(app_name="i", user_id="u", session_id="  padded \t")
    seen["created id"] = created.id
    found = await service.get_session(app_name="i", user_id="u", session_id=" padded ")
    seen["found padded"] = None if found is None else found.id
    try:
        await service.create_session(app_name="i", user_id="u", session_id="padded  ")
    except AlreadyExistsError:
        seen["padded duplicate"] = "AlreadyExistsError"
    blank = await service.create_session(app_name="i", user_id="u", session_id="   ")
    seen["blank is generated"] = bool(blank.id.strip()) and blank.id != "   "
    empty = await service.create_session(app_name="i", user_id="u", session_id="")
    seen["empty is generated"] = bool(empty.id.strip()) and empty.id != blank.id
    await service.delete_session(app_name="i", user_id="u", session_id="\tpadded ")
    seen["after delete"] = await service.get_session(app_name="i", user_id="u", session_id="padded")
    return seen


async def test_session_ids_are_handled_as_in_adk(manager: SessionManager) -> None:
    ours = await _id_handling(AgentSessionsSessionService(manager))
    reference = await _id_handling(InMemorySessionService())
    assert ours == reference
    assert reference == {
        "created id": "padded",
        "found padded": "padded",
        "padded duplicate": "AlreadyExistsError",
        "blank is generated": True,
        "empty is generated": True,
        "after delete": None,
    }


# -- ADK's own compaction ---------------------------------------------------------------


class CountingSummarizer(BaseEventsSummarizer):
    """Summarises without a model: the summary names how many events it covers."""

    def __init__(self) -> None:
        self.calls: list[list[Event]] = []

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        self.calls.append(list(events))
        return Event(
            author="user",
            invocation_id=Event.new_id(),
            actions=EventActions(
                compaction=EventCompaction(
                    start_timestamp=events[0].timestamp,
                    end_timestamp=events[-1].timestamp,
                    compacted_content=types.Content(
                        role="model", parts=[types.Part(text=f"{len(events)} events summarised")]
                    ),
                )
            ),
        )


@pytest.mark.filterwarnings("ignore:.*EXPERIMENTAL.*:UserWarning")
async def test_compaction_events_are_stored_and_read_back(manager: SessionManager) -> None:
    service = AgentSessionsSessionService(manager)
    summarizer = CountingSummarizer()
    app = App(
        name="compacting",
        root_agent=LlmAgent(
            name="agent", model=ScriptedLlm(model="scripted", replies=[f"r{i}" for i in range(6)])
        ),
        events_compaction_config=EventsCompactionConfig(
            summarizer=summarizer, compaction_interval=2, overlap_size=1
        ),
    )
    runner = Runner(app=app, session_service=service)
    await service.create_session(app_name="compacting", user_id="u", session_id="s")
    for turn in range(6):
        await run_turn(runner, "u", "s", f"turn {turn}")
    assert summarizer.calls, "ADK never compacted"
    stored = await service.get_session(app_name="compacting", user_id="u", session_id="s")
    assert stored is not None
    compactions = [e for e in stored.events if e.actions and e.actions.compaction]
    assert len(compactions) == len(summarizer.calls)
    texts = [e.actions.compaction.compacted_content.parts[0].text for e in compactions]  # type: ignore[union-attr]
    assert texts == [f"{len(call)} events summarised" for call in summarizer.calls]
    # A fresh service on the same store reads them back exactly, as ADK's own would.
    again = await AgentSessionsSessionService(manager.with_options()).get_session(
        app_name="compacting", user_id="u", session_id="s"
    )
    assert again is not None and again.events == stored.events


# -- forks -------------------------------------------------------------------------------


async def test_fork_session_branches_a_conversation_under_the_runner(
    manager: SessionManager,
) -> None:
    llm = ScriptedLlm(model="scripted", replies=["Paris.", "Rome.", "Madrid."])
    agent = LlmAgent(name="assistant", model=llm, instruction="Be brief.", output_key="last")
    service = AgentSessionsSessionService(manager)
    runner = Runner(app_name="trips", agent=agent, session_service=service)
    session = await service.create_session(app_name="trips", user_id="ada", state={"k": 1})
    await run_turn(runner, "ada", session.id, "A city in France?")
    await run_turn(runner, "ada", session.id, "One in Italy?")
    source = await service.get_session(app_name="trips", user_id="ada", session_id=session.id)
    assert source is not None and len(source.events) == 4
    # Try the second question again, differently: fork after the first answer.
    fork = await service.fork_session(
        app_name="trips",
        user_id="ada",
        session_id=session.id,
        new_session_id="retry",
        through_event_id=source.events[1].id,
    )
    assert fork.id == "retry" and [e.id for e in fork.events] == [e.id for e in source.events[:2]]
    # State has no history: the fork starts from the source's state as it is now.
    assert fork.state == {"k": 1, "last": "Rome."}
    await run_turn(runner, "ada", "retry", "One in Spain?")
    assert llm.requests[-1] == [
        ("user", "A city in France?"),
        ("model", "Paris."),
        ("user", "One in Spain?"),
    ]
    again = await service.get_session(app_name="trips", user_id="ada", session_id=session.id)
    assert again is not None and [e.id for e in again.events] == [e.id for e in source.events]
    listed = await service.list_sessions(app_name="trips", user_id="ada")
    assert {s.id for s in listed.sessions} == {session.id, "retry"}
    with pytest.raises(AlreadyExistsError):
        await service.fork_session(
            app_name="trips", user_id="ada", session_id=session.id, new_session_id="retry"
        )
    with pytest.raises(SessionNotFoundError):
        await service.fork_session(app_name="trips", user_id="ada", session_id="absent")
    with pytest.raises(SessionNotFoundError):  # another user's session is not theirs to fork
        await service.fork_session(app_name="trips", user_id="bob", session_id=session.id)


# -- how get_session reads (memory only: the choice depends on the backend's kind) ------


def _in_flight_counter(service: AgentSessionsSessionService) -> list[int]:
    """Wrap the manager's get to record the most reads in flight at once."""
    manager = service.manager
    original = manager.get
    state = {"now": 0}
    peaks: list[int] = [0]

    async def counted(*args: Any, **kwargs: Any) -> Any:
        state["now"] += 1
        peaks[0] = max(peaks[0], state["now"])
        try:
            await asyncio.sleep(0)  # where a read over the network would wait
            return await original(*args, **kwargs)
        finally:
            state["now"] -= 1

    manager.get = counted  # type: ignore[method-assign]
    return peaks


async def test_get_session_reads_in_turn_in_process_and_concurrently_elsewhere() -> None:
    import dataclasses

    import agentsessions

    for persistent, expected_peak in ((False, 1), (True, 3)):
        async with agentsessions.connect("memory://") as manager:
            # A private memory store is in-process; the same store declared persistent
            # stands for a backend whose reads wait on I/O.
            manager.capabilities = dataclasses.replace(manager.capabilities, persistent=persistent)
            service = AgentSessionsSessionService(manager)
            await service.create_session(app_name="app", user_id="u", session_id="s")
            peaks = _in_flight_counter(service)
            found = await service.get_session(app_name="app", user_id="u", session_id="s")
            assert found is not None and found.id == "s"
            assert peaks[0] == expected_peak, (persistent, peaks[0])


async def test_a_failed_read_in_process_leaves_no_read_behind(
    recwarn: pytest.WarningsRecorder,
) -> None:
    import agentsessions
    from agentsessions import BackendUnavailableError

    async with agentsessions.connect("memory://") as manager:
        service = AgentSessionsSessionService(manager)
        await service.create_session(app_name="app", user_id="u", session_id="s")
        calls: list[str] = []

        async def failing(session_id: str, **kwargs: Any) -> Any:
            calls.append(session_id)
            raise BackendUnavailableError("memory://", "the first read failed")

        manager.get = failing  # type: ignore[method-assign]
        with pytest.raises(BackendUnavailableError, match="the first read failed"):
            await service.get_session(app_name="app", user_id="u", session_id="s")
        gc.collect()
    assert len(calls) == 1  # the reads after the failed one never ran
    assert not [w for w in recwarn if "never awaited" in str(w.message)]
