"""Fidelity: what is saved comes back exactly, value for value, type for type, in order."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agentsessions import Event, InvalidInputError, SessionManager, SessionSerializationError
from pydantic import BaseModel

from ._base import SuiteBase, pictured, short, snapshot

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


def _difference(found: Any, expected: list[Any] | str) -> str:
    """Where *found* first departs from *expected* (a list or a str), for a failure message."""
    if not isinstance(found, list | str):
        return f"expected a {type(expected).__name__}, found {type(found).__name__} {short(found)}"
    for index, (got, want) in enumerate(zip(found, expected, strict=False)):
        if got != want:
            return f"first difference at index {index}: expected {short(want)}, found {short(got)}"
    return f"expected {len(expected)} items, found {len(found)}"


def _dumped(events: list[Event]) -> list[dict[str, Any]]:
    return [event.model_dump() for event in events]


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
        assert stored is not None, (
            f"get({session_id!r}) (read-back after create() and save()) returned None: a "
            f"session just saved with {len(events)} events must be found"
        )
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
        assert stored.state == {v: v for v in UNICODE.values()}, (
            "save() then get() must return Unicode state keys and values (emoji, RTL, "
            "combining marks, control characters) unchanged: expected "
            f"{short({v: v for v in UNICODE.values()}, 400)}, read back "
            f"{short(stored.state, 400)}"
        )
        assert [e.model_dump() for e in stored.events] == [e.model_dump() for e in events], (
            "save() then get() must return events with Unicode authors, content and metadata "
            f"unchanged, in order: {len(events)} events saved, {len(stored.events)} read back, "
            f"{_difference(_dumped(stored.events), _dumped(events))}"
        )

    async def test_nul_in_content_round_trips(self, manager: SessionManager) -> None:
        """A NUL character inside content, metadata and state strings round-trips."""
        events = [Event(author="user", content="before\x00after", metadata={"k": "\x00"})]
        _, stored = await self._roundtrip(
            manager, state={"nul": "a\x00b", "k\x00ey": 1}, events=events
        )
        assert stored.state == {"nul": "a\x00b", "k\x00ey": 1}, (
            "save() then get() must keep NUL characters in state keys and values: expected "
            f"{{'nul': 'a\\x00b', 'k\\x00ey': 1}}, read back {short(stored.state)}"
        )
        assert stored.events[0].content == "before\x00after", (
            "save() then get() must keep a NUL character inside event content: expected "
            f"'before\\x00after', read back {short(stored.events[0].content)}"
        )
        assert stored.events[0].metadata == {"k": "\x00"}, (
            "save() then get() must keep a NUL character inside event metadata: expected "
            f"{{'k': '\\x00'}}, read back {short(stored.events[0].metadata)}"
        )

    async def test_deeply_nested_json_round_trips(self, manager: SessionManager) -> None:
        """JSON nested 90 levels deep round-trips in state and in event content."""
        deep = _nested(90)
        _, stored = await self._roundtrip(
            manager, state={"deep": deep}, events=[Event(author="user", content=deep)]
        )
        assert stored.state["deep"] == deep, (
            "save() then get() must return JSON nested 90 levels deep in state unchanged: "
            f"expected {short(deep)}, read back {short(stored.state['deep'])}"
        )
        assert stored.events[0].content == deep, (
            "save() then get() must return JSON nested 90 levels deep in event content "
            f"unchanged: expected {short(deep)}, read back {short(stored.events[0].content)}"
        )
        assert _depth(stored.events[0].content) == 90, (
            "save() then get() must keep all 90 levels of nested event content: expected "
            f"depth 90, read back depth {_depth(stored.events[0].content)}"
        )

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
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "save() of JSON nested 102 levels deep (in state, then in an event) must raise "
            "SessionSerializationError and write nothing: expected the stored session to "
            f"stay {pictured(before)}, but what get() reads back now differs"
        )

    async def test_int64_bounds_round_trip(self, manager: SessionManager) -> None:
        """Integers from -2**63 to 2**63-1 round-trip exactly and stay ints."""
        values = [2**63 - 1, -(2**63), 2**53 + 1, -(2**53) - 1, 0, 1, -1, 2**31, -(2**31) - 1]
        _, stored = await self._roundtrip(
            manager,
            state={"ints": values, "max": 2**63 - 1},
            events=[Event(author="user", content=values, metadata={"min": -(2**63)})],
        )
        for got in (stored.state["ints"], stored.events[0].content):
            assert got == values, (
                "save() then get() must return integers up to the 64-bit bounds exactly, in "
                f"state and in event content: expected {values!r}, read back {short(got, 400)}"
            )
            assert all(type(v) is int for v in got), (
                "save() then get() must return integers as int, not float or str: read back "
                f"types {[type(v).__name__ for v in got]!r}"
            )
        assert stored.state["max"] == 2**63 - 1, (
            "save() then get() must return state 2**63-1 exactly: expected "
            f"{2**63 - 1}, read back {short(stored.state['max'])}"
        )
        assert stored.events[0].metadata == {"min": -(2**63)}, (
            "save() then get() must return event metadata -2**63 exactly: expected "
            f"{{'min': {-(2**63)}}}, read back {short(stored.events[0].metadata)}"
        )

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
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "save() of an int outside 64 bits (in state, then in an event) must raise "
            "SessionSerializationError and write nothing: expected the stored session to "
            f"stay {pictured(before)}, but what get() reads back now differs"
        )

    async def test_floats_round_trip(self, manager: SessionManager) -> None:
        """Floats round-trip exactly (1e308, -0.0, 5e-324, 0.1, 1.0) and stay floats."""
        values = [1e308, -1e308, -0.0, 0.0, 5e-324, 0.1, 1.0, -2.5, 1 / 3, 2.0**53]
        _, stored = await self._roundtrip(
            manager, state={"floats": values}, events=[Event(author="user", content=values)]
        )
        for got in (stored.state["floats"], stored.events[0].content):
            assert got == values, (
                "save() then get() must return floats exactly (no rounding), in state and in "
                f"event content: expected {values!r}, read back {short(got, 400)}"
            )
            assert all(type(v) is float for v in got), [type(v).__name__ for v in got]
            assert [math.copysign(1, v) for v in got] == [math.copysign(1, v) for v in values], (
                "save() then get() must keep the sign of every float, -0.0 included: expected "
                f"signs {[math.copysign(1, v) for v in values]!r}, read back "
                f"{[math.copysign(1, v) for v in got]!r} from {got!r}"
            )

    async def test_booleans_and_null_round_trip(self, manager: SessionManager) -> None:
        """true, false and null round-trip as True, False and None, also as content itself."""
        value = {"t": True, "f": False, "n": None, "list": [True, False, None, 0, 1, ""]}
        events = [Event(author="user", content=c) for c in (value, True, False, None, 0, "")]
        _, stored = await self._roundtrip(manager, state=dict(value), events=events)
        assert stored.state == value, (
            "save() then get() must return true, false and null in state as True, False and "
            f"None: expected {value!r}, read back {short(stored.state)}"
        )
        assert [e.content for e in stored.events] == [value, True, False, None, 0, ""], (
            "save() then get() must return events whose whole content is True, False, None, "
            f"0 or '' unchanged: expected {[value, True, False, None, 0, '']!r}, read back "
            f"{short([e.content for e in stored.events[:8]], 400)}"
        )
        assert type(stored.events[1].content) is bool and type(stored.events[4].content) is int, (
            "save() then get() must keep event content True a bool and 0 an int (not 1/0 or "
            f"False): read back {stored.events[1].content!r} of type "
            f"{type(stored.events[1].content).__name__} and {stored.events[4].content!r} of "
            f"type {type(stored.events[4].content).__name__}"
        )
        assert type(stored.state["list"][0]) is bool and type(stored.state["list"][3]) is int, (
            "save() then get() must keep True a bool and 0 an int inside a state list: read "
            f"back {stored.state['list'][0]!r} of type {type(stored.state['list'][0]).__name__} "
            f"and {stored.state['list'][3]!r} of type {type(stored.state['list'][3]).__name__}"
        )

    async def test_empty_values_round_trip(self, manager: SessionManager) -> None:
        """Empty strings, lists and dicts round-trip without being dropped or turned into null."""
        value: dict[str, Any] = {"s": "", "l": [], "d": {}, "nested": {"l": [[]], "d": [{}]}}
        _, stored = await self._roundtrip(
            manager,
            state=dict(value),
            events=[Event(author="user", content=value), Event(author="user", content=[])],
        )
        assert stored.state == value, (
            "save() then get() must keep empty strings, lists and dicts in state (not drop "
            f"them or turn them into null): expected {value!r}, read back {short(stored.state)}"
        )
        assert stored.events[0].content == value, (
            "save() then get() must keep empty strings, lists and dicts in event content: "
            f"expected {value!r}, read back {short(stored.events[0].content)}"
        )
        assert stored.events[1].content == [], (
            "save() then get() must return an event whose content is [] as [] (not None or "
            f"{{}}): read back {short(stored.events[1].content)}"
        )
        assert stored.events[0].metadata == {}, (
            "save() then get() must return empty event metadata as {} (not None): read back "
            f"{short(stored.events[0].metadata)}"
        )

    async def test_large_event_round_trips(self, manager: SessionManager) -> None:
        """A 1 MiB event round-trips intact."""
        size = 1024 * 1024
        limit = manager.capabilities.max_event_bytes
        if limit is not None and limit < size + 1024:
            pytest.skip(f"the backend stores events up to {limit} bytes (max_event_bytes)")
        blob = "".join(chr(0x41 + i % 26) for i in range(size - 8)) + "ünïcødé"
        _, stored = await self._roundtrip(manager, events=[Event(author="user", content=blob)])
        assert stored.events[0].content == blob, (
            f"save() then get() must return a 1 MiB event ({len(blob)} chars) intact: "
            f"{_difference(stored.events[0].content, blob)}"
        )

    async def test_ten_thousand_events_in_order(self, manager: SessionManager) -> None:
        """10,000 events appended in a few saves come back complete and in order."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for batch in range(4):
            for i in range(2500):
                session.add_event("user", batch * 2500 + i)
            await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None: a session just saved with "
            "10,000 events must be found"
        )
        assert [e.content for e in stored.events] == list(range(10_000)), (
            "4 save() calls appending 2,500 events each must store all 10,000 in order: read "
            f"back {len(stored.events)} events, "
            f"{_difference([e.content for e in stored.events], list(range(10_000)))}"
        )
        assert [e.id for e in stored.events] == [e.id for e in session.events], (
            "4 save() calls appending 2,500 events each must keep every event id: "
            f"{_difference([e.id for e in stored.events], [e.id for e in session.events])}"
        )
        window = await manager.get(session_id, last_events=10)
        assert window is not None and [e.content for e in window.events] == list(
            range(9990, 10_000)
        ), (
            f"get({session_id!r}, last_events=10) of a 10,000-event history must return the "
            f"last 10 events: expected {list(range(9990, 10_000))!r}, found "
            f"{'None' if window is None else short([e.content for e in window.events[:12]])}"
        )
        await self.check_positions(manager, session_id, 10_000)

    async def test_identical_timestamps_keep_order(self, manager: SessionManager) -> None:
        """Events with identical timestamps come back in the order they were saved."""
        when = datetime(2024, 2, 29, 12, 0, 0, 123456, tzinfo=timezone.utc)
        events = [Event(author="user", content=i, timestamp=when) for i in (5, 3, 9, 1, 7, 0, 8)]
        _, stored = await self._roundtrip(manager, events=events)
        assert [e.content for e in stored.events] == [5, 3, 9, 1, 7, 0, 8], (
            "save() then get() must return events with identical timestamps in the order "
            "they were saved (not sorted by content, id or anything else): expected "
            f"[5, 3, 9, 1, 7, 0, 8], read back {short([e.content for e in stored.events])}"
        )
        assert [e.id for e in stored.events] == [e.id for e in events], (
            "save() then get() must return events with identical timestamps in saved order, "
            f"ids included: {_difference([e.id for e in stored.events], [e.id for e in events])}"
        )

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
            assert got.timestamp == want, (
                f"save() then get() must return event {got.content!r}'s timestamp as the same "
                f"instant: expected {want.isoformat()}, read back {got.timestamp.isoformat()}"
            )
            assert got.timestamp.utcoffset() == timedelta(0), (
                f"get() must return event timestamps in UTC: event {got.content!r} read back "
                f"as {got.timestamp.isoformat()} (utcoffset {got.timestamp.utcoffset()})"
            )
            assert got.timestamp.microsecond == want.astimezone(timezone.utc).microsecond, (
                "save() then get() must keep event timestamps to the microsecond: expected "
                f"microsecond {want.astimezone(timezone.utc).microsecond}, event "
                f"{got.content!r} read back {got.timestamp.microsecond}"
            )
        for name in ("created_at", "updated_at"):
            got_time: datetime = getattr(stored, name)
            assert got_time.tzinfo is not None and got_time.utcoffset() == timedelta(0), (
                f"get() must return the session's {name} as an aware UTC datetime: read back "
                f"{got_time.isoformat()} (utcoffset {got_time.utcoffset()})"
            )
            assert got_time == getattr(session, name), name
        listed = await manager.list_sessions(user_id=session.user_id)
        assert [(i.created_at, i.updated_at) for i in listed.items] == [
            (session.created_at, session.updated_at)
        ], (
            f"list_sessions(user_id={session.user_id!r}) must list the user's one session "
            "with the created_at and updated_at that save() set: expected "
            f"[({session.created_at.isoformat()}, {session.updated_at.isoformat()})], found "
            f"{[(i.created_at.isoformat(), i.updated_at.isoformat()) for i in listed.items[:8]]}"
        )
        item = listed.items[0]
        assert item.created_at.utcoffset() == timedelta(0) == item.updated_at.utcoffset(), (
            "list_sessions() must return created_at and updated_at in UTC: found utcoffsets "
            f"{item.created_at.utcoffset()} and {item.updated_at.utcoffset()}"
        )

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
        assert stored.state == state, (
            "save() then get() must return a state of mixed nested JSON, with '$', dots and "
            f"an empty string in keys, exactly: expected {state!r}, read back "
            f"{short(stored.state, 400)}"
        )

    async def test_key_order_round_trips(self, manager: SessionManager) -> None:
        """Object keys come back in the order they were saved (Python dicts are ordered)."""
        keys = ["zeta", "a", "mm", "b", "longer_key", "c"]
        value = {key: {k: i for i, k in enumerate(reversed(keys))} for key in keys}
        _, stored = await self._roundtrip(
            manager, state=dict(value), events=[Event(author="user", content=value)]
        )
        assert list(stored.state) == keys, (
            "save() then get() must return state keys in the order they were saved (not "
            f"sorted): expected {keys!r}, read back {list(stored.state)!r}"
        )
        assert list(stored.state["zeta"]) == keys[::-1], (
            "save() then get() must keep the key order of a dict nested in state: expected "
            f"{keys[::-1]!r}, read back {list(stored.state['zeta'])!r}"
        )
        assert list(stored.events[0].content) == keys, (
            "save() then get() must return the keys of event content in the order they were "
            f"saved: expected {keys!r}, read back {short(list(stored.events[0].content))}"
        )

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
        assert [e.model_dump() for e in stored.events] == [e.model_dump() for e in events], (
            "save() then get() must return every event field (id, author, content, timestamp, "
            f"metadata) exactly: {len(events)} events saved, {len(stored.events)} read back, "
            f"{_difference(_dumped(stored.events), _dumped(events))}"
        )

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
        assert stored is not None, (
            f"get({session_id!r}) (read-back after put_model() and save()) returned None: a "
            "session just saved must be found"
        )
        assert stored.get_model("profile", _Profile) == profile, (
            "a model stored with put_model() and save() must read back equal with get_model(): "
            f"expected {profile!r}, read back {short(stored.get_model('profile', _Profile))} "
            f"from state {short(stored.state)}"
        )
        assert stored.get_model("absent", _Profile) is None, (
            "get_model() of a key never stored must return None: found "
            f"{short(stored.get_model('absent', _Profile))}"
        )

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
            assert len(event.model_dump_json().encode()) == size, (
                f"kit self-check: an event padded to {size} encoded bytes encodes to "
                f"{len(event.model_dump_json().encode())}: Event's JSON encoding is not what "
                "the kit assumes (report this to the kit's maintainers)"
            )
            return event

        session = await self.session_with_events(manager, 1)
        session.events.append(sized("at-limit", limit))
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None and len(stored.events) == 2, (
            f"save() of an event of exactly max_event_bytes ({limit}) encoded bytes must store "
            "it: expected 2 events read back, found "
            f"{'no session' if stored is None else len(stored.events)}"
        )
        assert stored.events[1] == session.events[1], "the event at the limit did not round-trip"
        before = snapshot(stored)
        session.add_event("user", "small, before the big one")
        session.events.append(sized("over-limit", limit + 1))
        session.state["touched"] = True
        with pytest.raises(InvalidInputError) as info:
            await manager.save(session)
        assert isinstance(info.value, ValueError) and str(limit) in str(info.value), (
            f"save() of an event of {limit + 1} encoded bytes must raise an InvalidInputError "
            f"that is a ValueError and names the limit {limit} in its message: got "
            f"{type(info.value).__name__}: {short(str(info.value))}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"a save() refused for an event over max_event_bytes ({limit}) must write nothing "
            "of that save, not even the smaller event or the state change before it: "
            f"expected the stored session to stay {pictured(before)}, but what get() reads "
            "back now differs"
        )
        await self.check_positions(manager, session.session_id, 2)
