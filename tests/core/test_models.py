"""The model: immutable UTC events, sessions with typed state helpers."""

from __future__ import annotations

import datetime as dt

import pydantic
import pytest
from agentsessions import Event, MemorySessionManager, Session


def test_event_defaults() -> None:
    event = Event(author="user", content="hi")
    assert event.id and len(event.id) == 32
    assert event.timestamp.utcoffset() == dt.timedelta(0)
    assert event.metadata == {}
    assert Event(author="user").id != event.id


def test_events_are_immutable() -> None:
    event = Event(author="user", content="hi")
    with pytest.raises(pydantic.ValidationError):
        event.content = "changed"  # type: ignore[misc]
    assert event.model_copy(update={"content": "changed"}).content == "changed"


async def test_naive_timestamps_are_rejected_and_offsets_are_stored_as_utc() -> None:
    with pytest.raises(pydantic.ValidationError, match="timezone"):
        Event(author="user", timestamp=dt.datetime(2026, 1, 1, 12))
    paris = dt.timezone(dt.timedelta(hours=1))
    event = Event(author="user", timestamp=dt.datetime(2026, 1, 1, 12, tzinfo=paris))
    assert '"2026-01-01T11:00:00Z"' in event.model_dump_json()
    manager = MemorySessionManager()
    session = await manager.create("s")
    session.events.append(event)
    await manager.save(session)
    stored = await manager.get("s")
    assert stored is not None
    (back,) = stored.events
    assert back.timestamp == dt.datetime(2026, 1, 1, 11, tzinfo=dt.timezone.utc)
    assert back.timestamp.utcoffset() == dt.timedelta(0)


def test_event_rejects_unknown_fields_and_empty_author() -> None:
    with pytest.raises(pydantic.ValidationError):
        Event(author="user", colour="red")  # type: ignore[call-arg]
    with pytest.raises(pydantic.ValidationError):
        Event(author="")


class Pending(pydantic.BaseModel):
    tool: str
    when: dt.datetime


def test_models_in_state_go_in_as_json_and_come_back_validated() -> None:
    session = Session(session_id="s")
    when = dt.datetime(2026, 11, 29, 12, 0, 0, 123456, tzinfo=dt.timezone.utc)
    session.put_model("pending", Pending(tool="send_note", when=when))
    assert session.state["pending"] == {"tool": "send_note", "when": "2026-11-29T12:00:00.123456Z"}
    restored = session.get_model("pending", Pending)
    assert restored == Pending(tool="send_note", when=when)
    assert session.get_model("absent", Pending) is None
    assert session.pop_model("pending", Pending) == restored
    assert "pending" not in session.state


def test_add_event_appends_and_returns_it() -> None:
    session = Session(session_id="s")
    event = session.add_event("user", {"text": "hi"}, channel="web")
    assert session.events == [event]
    assert event.metadata == {"channel": "web"}
    assert not session.is_partial
    assert session.first_event_position == 0


def test_session_fields_keep_their_documented_order() -> None:
    # The JSON Lines export writes fields in this order; a mixin must not reorder them.
    assert list(Session.model_fields) == [
        "session_id",
        "user_id",
        "events",
        "state",
        "created_at",
        "updated_at",
        "version",
    ]


async def test_loaded_sessions_compare_by_their_fields() -> None:
    async with MemorySessionManager() as manager:
        session = await manager.create("eq", "u", state={"n": 1})
        session.add_event("user", "hello")
        await manager.save(session)
        first, second = await manager.get("eq"), await manager.get("eq")
        assert first is not None and second is not None
        assert first == second and first == session  # tracking is not compared
        assert first == Session.model_validate(first.model_dump())
        second.state["n"] = 2
        assert first != second
        assert first != "eq"
        with pytest.raises(TypeError, match="unhashable"):
            hash(first)
