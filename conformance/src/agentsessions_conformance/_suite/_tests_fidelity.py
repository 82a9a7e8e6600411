"""Fidelity: what is saved comes back exactly, value for value, type for type, in order."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agentsessions import Event, InvalidInputError, SessionManager, SessionSerializationError
from pydantic import BaseModel

from ._base import SuiteBase, snapshot

UNICODE = {
    "emoji": "🤖👩🏽‍💻🏳️‍🌈",
    "rtl": "مرحبا بالعالم שלום",
    "combining": "e\u0301 a\u0308 \u1100\u1161\u11a8",
    "cjk": "会话 セッション 세션",
    "astral": "\U0001d518\U0001d52b\U0001d526 \U0010fffd",  # outside the BMP
    "controls": "tab\tnewline\ncr\r\x1b[0m\u2028\u2029",
    "quotes": "'\"\\ `${x}` <script>",
}


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for level in range(depth - 1):
        value = {"d": value} if level % 2 else [value]
    return value


def _depth(value: Any) -> int:
    depth = 1
    while isinstance(value, dict | list):
        value = value["d"] if isinstance(value, dict) else value[0]
        depth += 1
    return depth


class _Profile(BaseModel):
    name: str
    tags: list[str]
    score: float
    joined: datetime


class FidelityTests(SuiteBase):
    async def _roundtrip(
        self, manager: SessionManager, *, state: dict[str, Any] | None = None, events: list[Event]
    ) -> tuple[Any, Any]:
        session_id = self.new_id()
        session = await manager.create(session_id, self.new_user())
        if state is not None:
            session.state = state
        session.events.extend(events)
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        return session, stored

    async def test_unicode_round_trips(self, manager: SessionManager) -> None:
        """Emoji, RTL text, combining marks and control characters round-trip everywhere."""
        events = [
            Event(author=f"author {UNICODE['emoji']}", content={key: text}, metadata={text: key})
            for key, text in UNICODE.items()
        ]
        _, stored = await self._roundtrip(
            manager, state={v: v for v in UNICODE.values()}, events=events
        )
        assert stored.state == {v: v for v in UNICODE.values()}
        assert [e.model_dump() for e in stored.events] == [e.model_dump() for e in events]

    async def test_nul_in_content_round_trips(self, manager: SessionManager) -> None:
        """A NUL character inside content, metadata and state strings round-trips."""
        events = [Event(author="user", content="before\x00after", metadata={"k": "\x00"})]
        _, stored = await self._roundtrip(
            manager, state={"nul": "a\x00b", "k\x00ey": 1}, events=events
        )
        assert stored.state == {"nul": "a\x00b", "k\x00ey": 1}
        assert stored.events[0].content == "before\x00after"
        assert stored.events[0].metadata == {"k": "\x00"}

    async def test_deeply_nested_json_round_trips(self, manager: SessionManager) -> None:
        """JSON nested 90 levels deep round-trips in state and in event content."""
        deep = _nested(90)
        _, stored = await self._roundtrip(
            manager, state={"deep": deep}, events=[Event(author="user", content=deep)]
        )
        assert stored.state["deep"] == deep
        assert stored.events[0].content == deep
        assert _depth(stored.events[0].content) == 90

    async def test_too_deep_json_is_rejected(self, manager: SessionManager) -> None:
        """JSON nested more than 100 levels raises SessionSerializationError and writes nothing."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        session.state["deep"] = _nested(102)
        with pytest.raises(SessionSerializationError):
            await manager.save(session)
        del session.state["deep"]
        session.add_event("user", _nested(102))
        with pytest.raises(SessionSerializationError):
            await manager.save(session)
        with pytest.raises(SessionSerializationError):
            await manager.create(self.new_id(), state={"deep": _nested(102)})
        assert snapshot(await self.readback(manager, session.session_id)) == before

    async def test_int64_bounds_round_trip(self, manager: SessionManager) -> None:
        """Integers from -2**63 to 2**63-1 round-trip exactly and stay ints."""
        values = [2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1, 0, 1, -1, 2**31, -(2**31) - 1]
        _, stored = await self._roundtrip(
            manager,
            state={"ints": values, "max": 2**63 - 1},
            events=[Event(author="user", content=values, metadata={"min": -(2**63)})],
        )
        for got in (stored.state["ints"], stored.events[0].content):
            assert got == values
            assert all(type(v) is int for v in got)
        assert stored.state["max"] == 2**63 - 1
        assert stored.events[0].metadata == {"min": -(2**63)}

    async def test_int_beyond_int64_is_rejected(self, manager: SessionManager) -> None:
        """An int outside 64 bits raises SessionSerializationError and writes nothing."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        for bad in (2**63, -(2**63) - 1, 10**30):
            session.state["n"] = bad
            with pytest.raises(SessionSerializationError):
                await manager.save(session)
        del session.state["n"]
        session.add_event("user", {"n": 2**63})
        with pytest.raises(SessionSerializationError):
            await manager.save(session)
        assert snapshot(await self.readback(manager, session.session_id)) == before

    async def test_floats_round_trip(self, manager: SessionManager) -> None:
        """Floats round-trip exactly (1e308, -0.0, 5e-324, 0.1, 1.0) and stay floats."""
        values = [1e308, -1e308, -0.0, 0.0, 5e-324, 0.1, 1.0, -2.5, 1 / 3, 2.0**53]
        _, stored = await self._roundtrip(
            manager, state={"floats": values}, events=[Event(author="user", content=values)]
        )
        for got in (stored.state["floats"], stored.events[0].content):
            assert got == values
            assert all(type(v) is float for v in got), [type(v).__name__ for v in got]
            assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in values]

    async def test_booleans_and_null_round_trip(self, manager: SessionManager) -> None:
        """true, false and null round-trip as True, False and None, also as content itself."""
        value = {"t": True, "f": False, "n": None, "list": [True, False, None, 0, 1, ""]}
        events = [Event(author="user", content=c) for c in (value, True, False, None, 0, "")]
        _, stored = await self._roundtrip(manager, state=dict(value), events=events)
        assert stored.state == value
        assert [e.content for e in stored.events] == [value, True, False, None, 0, ""]
        assert type(stored.events[1].content) is bool and type(stored.events[4].content) is int
        assert type(stored.state["list"][0]) is bool and type(stored.state["list"][3]) is int

    async def test_empty_values_round_trip(self, manager: SessionManager) -> None:
        """Empty strings, lists and dicts round-trip without being dropped or turned into null."""
        value: dict[str, Any] = {"s": "", "l": [], "d": {}, "nested": {"l": [[]], "d": [{}]}}
        _, stored = await self._roundtrip(
            manager,
            state=dict(value),
            events=[Event(author="user", content=value), Event(author="user", content=[])],
        )
        assert stored.state == value
        assert stored.events[0].content == value
        assert stored.events[1].content == []
        assert stored.events[0].metadata == {}

    async def test_large_event_round_trips(self, manager: SessionManager) -> None:
        """A 1 MiB event round-trips intact."""
        size = 1024 * 1024
        limit = manager.capabilities.max_event_bytes
        if limit is not None and limit < size + 1024:
            pytest.skip(f"the backend stores events up to {limit} bytes (max_event_bytes)")
        blob = "".join(chr(0x41 + i % 26) for i in range(size - 8)) + "ünïcødé"
        _, stored = await self._roundtrip(manager, events=[Event(author="user", content=blob)])
        assert stored.events[0].content == blob

    async def test_ten_thousand_events_in_order(self, manager: SessionManager) -> None:
        """10,000 events appended in a few saves come back complete and in order."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for batch in range(4):
            for i in range(2500):
                session.add_event("user", batch * 2500 + i)
            await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == list(range(10_000))
        assert [e.id for e in stored.events] == [e.id for e in session.events]
        window = await manager.get(session_id, last_events=10)
        assert window is not None and [e.content for e in window.events] == list(
            range(9990, 10_000)
        )
        await self.check_positions(manager, session_id, 10_000)

    async def test_identical_timestamps_keep_order(self, manager: SessionManager) -> None:
        """Events with identical timestamps come back in the order they were saved."""
        when = datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=timezone.utc)
        events = [Event(author="user", content=i, timestamp=when) for i in (5, 3, 9, 1, 7, 0, 8)]
        _, stored = await self._roundtrip(manager, events=events)
        assert [e.content for e in stored.events] == [5, 3, 9, 1, 7, 0, 8]
        assert [e.id for e in stored.events] == [e.id for e in events]

    async def test_timestamps_round_trip_to_microsecond(self, manager: SessionManager) -> None:
        """Event and session timestamps round-trip as aware UTC, to the microsecond."""
        plus_five = timezone(timedelta(hours=5, minutes=30))
        stamps = [
            datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc),
            datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=plus_five),
            datetime(2038, 1, 19, 3, 14, 8, 1, tzinfo=timezone.utc),
        ]
        events = [Event(author="user", content=i, timestamp=t) for i, t in enumerate(stamps)]
        session, stored = await self._roundtrip(manager, events=events)
        for got, want in zip(stored.events, stamps, strict=True):
            assert got.timestamp == want
            assert got.timestamp.utcoffset() == timedelta(0)
            assert got.timestamp.microsecond == want.astimezone(timezone.utc).microsecond
        for name in ("created_at", "updated_at"):
            got_time: datetime = getattr(stored, name)
            assert got_time.tzinfo is not None and got_time.utcoffset() == timedelta(0)
            assert got_time == getattr(session, name), name
        listed = await manager.list_sessions(user_id=session.user_id)
        assert [(i.created_at, i.updated_at) for i in listed.items] == [
            (session.created_at, session.updated_at)
        ]
        item = listed.items[0]
        assert item.created_at.utcoffset() == timedelta(0) == item.updated_at.utcoffset()

    async def test_state_round_trips(self, manager: SessionManager) -> None:
        """A state of mixed nested JSON, with $ and dots in keys, round-trips exactly."""
        state = {
            "z": 1,
            "a": {"nested": [1, "two", 3.5, None, {"k": [True]}]},
            "m": [[], {}, ""],
            "$dollar": "ok",
            "dotted.key": {"a.b": 1},
            "": "empty key",
        }
        _, stored = await self._roundtrip(manager, state=state, events=[])
        assert stored.state == state

    async def test_key_order_round_trips(self, manager: SessionManager) -> None:
        """Object keys come back in the order they were saved (Python dicts are ordered)."""
        keys = ["zeta", "a", "mm", "b", "longer_key", "c"]
        value = {key: {k: i for i, k in enumerate(reversed(keys))} for key in keys}
        _, stored = await self._roundtrip(
            manager, state=dict(value), events=[Event(author="user", content=value)]
        )
        assert list(stored.state) == keys
        assert list(stored.state["zeta"]) == keys[::-1]
        assert list(stored.events[0].content) == keys

    async def test_event_metadata_round_trips(self, manager: SessionManager) -> None:
        """Event ids, authors, content and metadata round-trip exactly."""
        events = [
            Event(
                id="custom-id-1",
                author="tool:search",
                content={"q": "x"},
                metadata={"ms": 12, "ok": True},
            ),
            Event(author="assistant", content=None, metadata={"usage": {"in": 3, "out": [1, 2]}}),
        ]
        _, stored = await self._roundtrip(manager, events=events)
        assert [e.model_dump() for e in stored.events] == [e.model_dump() for e in events]

    async def test_pydantic_model_in_state_round_trips(self, manager: SessionManager) -> None:
        """A pydantic model stored with put_model reads back, validated, with get_model."""
        profile = _Profile(
            name="Zoë", tags=["a", "b"], score=0.5, joined=datetime(2020, 5, 1, tzinfo=timezone.utc)
        )
        session_id = self.new_id()
        session = await manager.create(session_id)
        session.put_model("profile", profile)
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.get_model("profile", _Profile) == profile
        assert stored.get_model("absent", _Profile) is None

    async def test_event_size_limit_is_exact(self, manager: SessionManager) -> None:
        """A backend declaring max_event_bytes stores an event of exactly that many encoded
        bytes, and refuses a larger one with InvalidInputError, storing nothing of that save."""
        limit = manager.capabilities.max_event_bytes
        if limit is None:
            pytest.skip("the backend declares no max_event_bytes (1 MiB round-trips elsewhere)")
        if limit > 32 * 1024 * 1024:
            pytest.skip(f"max_event_bytes={limit} is too large to exercise cheaply")
        when = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)

        def sized(event_id: str, size: int) -> Event:
            blank = Event(id=event_id, author="user", content="", timestamp=when)
            event = blank.model_copy(
                update={"content": "x" * (size - len(blank.model_dump_json().encode()))}
            )
            assert len(event.model_dump_json().encode()) == size
            return event

        session = await self.session_with_events(manager, 1)
        session.events.append(sized("at-limit", limit))
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None and len(stored.events) == 2
        assert stored.events[1] == session.events[1], "the event at the limit did not round-trip"
        before = snapshot(stored)
        session.add_event("user", "small, before the big one")
        session.events.append(sized("over-limit", limit + 1))
        session.state["touched"] = True
        with pytest.raises(InvalidInputError) as info:
            await manager.save(session)
        assert isinstance(info.value, ValueError) and str(limit) in str(info.value)
        assert snapshot(await self.readback(manager, session.session_id)) == before
        await self.check_positions(manager, session.session_id, 2)
