"""The model: immutable UTC events, sessions with typed state helpers."""

from __future__ import annotations

import datetime as dt
import uuid

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
        "forked_from",
    ]


def test_add_event_builds_what_the_validator_builds() -> None:
    # add_event skips pydantic's validator for a valid author: the Event must be the
    # one Event(...) would have built, down to the fields it counts as set.
    session = Session(session_id="s")
    fast = session.add_event("user", {"text": ["hi", 1]}, channel="web")
    validated = Event(
        author="user",
        content={"text": ["hi", 1]},
        metadata={"channel": "web"},
        id=fast.id,
        timestamp=fast.timestamp,
    )
    assert fast == validated
    assert fast.model_dump_json() == validated.model_dump_json()
    assert fast.model_fields_set == {"author", "content", "metadata"}
    assert Event.model_validate_json(fast.model_dump_json()) == fast
    assert fast.timestamp.tzinfo is dt.timezone.utc
    uuid_form = uuid.UUID(hex=fast.id)
    assert uuid_form.version == 4 and uuid_form.hex == fast.id
    with pytest.raises(pydantic.ValidationError):
        fast.author = "other"  # type: ignore[misc]


@pytest.mark.parametrize("author", ["", "x" * 256, 7, None])
def test_add_event_still_refuses_a_bad_author(author: object) -> None:
    session = Session(session_id="s")
    with pytest.raises(pydantic.ValidationError):
        session.add_event(author)  # type: ignore[arg-type]
    assert session.events == []


class _Tagged(Event):
    """A subclass, as an application might define: it is encoded by its own model."""

    @pydantic.field_serializer("author")
    def _shout(self, value: str) -> str:
        return value.upper()


@pytest.mark.parametrize(
    "event",
    [
        Event(author="user", content={"t": 'é\u2028"\\/', "n": [1, 2.5, None, True]}),
        Event(author="tool", content=[{"k": {}}], metadata={"m": 1}),
        Event(author="user", timestamp=dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone.utc)),
        # Not UTC: the model's own serializer converts it.
        Event(
            author="user",
            timestamp=dt.datetime(2026, 1, 1, 12, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        ),
        _Tagged(author="user", content="hi"),
    ],
)
def test_saved_events_are_encoded_as_the_model_dumps_them(event: Event) -> None:
    # encode_event writes UTC events of plain JSON without calling model_dump_json: its
    # text must be the model's, byte for byte, whatever the content.
    from agentsessions._records import encode_event

    expected = event.model_dump_json()
    if event.timestamp.utcoffset():
        expected = event.model_copy(
            update={"timestamp": event.timestamp.astimezone(dt.timezone.utc)}
        ).model_dump_json()
    assert encode_event(event, 3, "events[3]").data == expected
    assert Event.model_validate_json(expected).timestamp == event.timestamp


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
