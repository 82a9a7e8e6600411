"""Misuse: no input and no ordinary Python move on a loaded session corrupts stored data.

Whatever a careless caller does (change a loaded session's id, copy it, build events
with ``model_construct``, put a list or a lone surrogate in the state, ask for ``10**20``
events) one of two things happens: it round-trips, or a documented `SessionError` is
raised and nothing is stored. Never a raw driver or pydantic exception, never a session
that later fails to load, never a write into another session.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import sys
from collections import Counter
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from agentsessions import (
    Event,
    InvalidInputError,
    InvalidOptionError,
    Session,
    SessionConflictError,
    SessionError,
    SessionManager,
    SessionSerializationError,
    SessionTooLargeError,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ._base import SuiteBase, snapshot

_EAST = timezone(timedelta(hours=5))
_WEST = timezone(timedelta(hours=-5))

# Events a caller can build without validation; each must be refused at the named path.
HAND_BUILT_EVENTS: dict[str, tuple[dict[str, Any], str]] = {
    "empty-author": ({"author": ""}, "author"),
    "empty-id": ({"author": "u", "id": ""}, "id"),
    "long-id": ({"author": "u", "id": "i" * 256}, "id"),
    "int-author": ({"author": 7}, "author"),
    "no-author": ({}, "author"),
    "naive-timestamp": ({"author": "u", "timestamp": datetime(2024, 1, 1)}, "timestamp"),
    "str-timestamp": ({"author": "u", "timestamp": "2024-01-01T00:00:00Z"}, "timestamp"),
    "list-metadata": ({"author": "u", "metadata": [1]}, "metadata"),
    "surrogate-author": ({"author": "\ud800"}, "author"),
    "surrogate-id": ({"author": "u", "id": "x\udfff"}, "id"),
}

NOT_A_STATE: dict[str, object] = {"none": None, "list": [1], "str": "s", "int": 3}

# (where, how to put a lone surrogate there, the path the error must name)
SURROGATES: dict[str, tuple[str, str]] = {
    "state-value": ("state", "state['k']"),
    "state-key": ("state-key", "state['\\ud800']"),
    "content": ("content", "events[1].content['text']"),
    "metadata-value": ("metadata", "events[1].metadata['m']"),
    "metadata-key": ("metadata-key", "events[1].metadata['\\ud800']"),
}

OUT_OF_RANGE_TIMESTAMPS: dict[str, datetime] = {
    "year-1-east": datetime(1, 1, 1, 1, tzinfo=_EAST),
    "year-9999-west": datetime(9999, 12, 31, 23, tzinfo=_WEST),
}

HUGE_LAST_EVENTS: dict[str, int] = {
    "2**31": 2**31,
    "sys.maxsize": sys.maxsize,
    "2**63": 2**63,
    "10**20": 10**20,
}

BAD_COMMON_OPTIONS: dict[str, dict[str, object]] = {
    "ttl-inf": {"ttl": float("inf")},
    "ttl-nan": {"ttl": float("nan")},
    "ttl-1e12": {"ttl": 1e12},
    "ttl-zero": {"ttl": 0},
    "ttl-negative": {"ttl": -1},
    "ttl-text": {"ttl": "soon"},
    "namespace-dash": {"namespace": "a-b"},
    "namespace-long": {"namespace": "n" * 49},
}


class MisuseTests(SuiteBase):
    async def _two_sessions(self, manager: SessionManager) -> tuple[str, str, Any]:
        """Session A with 3 events and session B with 1; returns both ids and B's snapshot."""
        first = await self.session_with_events(manager, 3)
        second = await self.session_with_events(manager, 1)
        return first.session_id, second.session_id, snapshot(second)

    async def _assert_untouched(
        self, manager: SessionManager, session_id: str, before: Any
    ) -> None:
        assert snapshot(await self.readback(manager, session_id)) == before, (
            f"a refused save() must never write into another session: expected {session_id!r} "
            "to read back exactly as it was before the save() of a copy moved onto its id, "
            "the stored session differs"
        )
        listed = {s.session_id: s for s in (await manager.list_sessions(limit=1000)).items}
        if session_id in listed:  # a shared server may list more than a page holds
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None, yet list_sessions() lists it: "
                "a listed session must load"
            )
            assert listed[session_id].event_count == len(stored.events), (
                "list_sessions() must count the stored events: expected event_count="
                f"{len(stored.events)} for {session_id!r} (the events it reads back with), "
                f"found {listed[session_id].event_count}"
            )

    async def test_session_id_cannot_be_reassigned(self, manager: SessionManager) -> None:
        """Assigning another session_id to a loaded session raises InvalidInputError."""
        a_id, b_id, b_before = await self._two_sessions(manager)
        loaded = await manager.get(a_id)
        assert loaded is not None, (
            f"get({a_id!r}) returned None: a session just saved with 3 events must be found"
        )
        with pytest.raises(InvalidInputError):
            loaded.session_id = b_id
        assert loaded.session_id == a_id, (
            "a refused assignment to session_id must leave the loaded session's id as it was: "
            f"expected {a_id!r}, found {loaded.session_id!r}"
        )
        # Forced past the model (object.__setattr__): the save refuses, before any I/O.
        object.__setattr__(loaded, "session_id", b_id)
        with pytest.raises(InvalidInputError, match="loaded as"):
            await manager.save(loaded)
        await self._assert_untouched(manager, b_id, b_before)

    @pytest.mark.parametrize("deep", [False, True], ids=["shallow", "deep"])
    async def test_copy_under_another_id_never_writes_the_other_session(
        self, manager: SessionManager, deep: bool
    ) -> None:
        """A copy of a loaded session with another session_id is refused; the other is intact."""
        a_id, b_id, b_before = await self._two_sessions(manager)
        loaded = await manager.get(a_id)
        assert loaded is not None, (
            f"get({a_id!r}) returned None: a session just saved with 3 events must be found"
        )
        moved = loaded.model_copy(update={"session_id": b_id}, deep=deep)
        with pytest.raises(InvalidInputError, match="loaded as"):
            await manager.save(moved)
        await self._assert_untouched(manager, b_id, b_before)
        # The original is still a working copy of A.
        loaded.add_event("user", "after")
        await manager.save(loaded)
        stored = await self.readback(manager, a_id)
        assert stored is not None, (
            f"get({a_id!r}) (read-back) returned None after save() of the original: the "
            "session must still be found"
        )
        assert [e.content for e in stored.events] == ["e0", "e1", "e2", "after"], (
            f"after the save() of a {'deep' if deep else 'shallow'} copy under another id was "
            "refused, the original must still save as a copy of its own session: expected "
            f"['e0', 'e1', 'e2', 'after'], found {[e.content for e in stored.events[:8]]!r}"
        )

    @pytest.mark.parametrize("how", ["shallow", "deep", "copy.copy", "events-replaced"])
    async def test_a_copy_has_its_own_tracking(self, manager: SessionManager, how: str) -> None:
        """A copy saved first makes the original stale (SessionConflictError): no lost update."""
        session = await self.session_with_events(manager, 2)
        if how == "shallow":
            other = session.model_copy()
        elif how == "deep":
            other = session.model_copy(deep=True)
        elif how == "copy.copy":
            other = copy.copy(session)
        else:
            other = session.model_copy(update={"events": list(session.events)})
        other.add_event("user", "copy")
        other.state["by"] = "copy"
        await manager.save(other)
        expected = snapshot(await self.readback(manager, session.session_id))
        assert expected is not None, (
            f"get({session.session_id!r}) (read-back) returned None after save() of a {how} "
            "copy: the session must still be found"
        )
        assert [e["content"] for e in expected["events"]] == ["e0", "e1", "copy"], (
            f"save() of a {how} copy (one event 'copy' appended) must store the copy: expected "
            f"['e0', 'e1', 'copy'], found {[e['content'] for e in expected['events'][:8]]!r}"
        )
        if how in ("deep", "events-replaced"):  # shallow copies share the events list
            session.add_event("user", "original")
        session.state = {"by": "original"}
        with pytest.raises(SessionConflictError):
            await manager.save(session)
        assert snapshot(await self.readback(manager, session.session_id)) == expected, (
            "a save() of the original that raised SessionConflictError must write nothing: "
            f"expected {session.session_id!r} to read back as the {how} copy saved it "
            f"(version {expected['version']}), the stored session differs"
        )
        other.add_event("user", "copy again")  # the copy keeps saving from its own baseline
        await manager.save(other)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after a second save() of "
            f"the {how} copy: the session must still be found"
        )
        assert [e.content for e in stored.events] == ["e0", "e1", "copy", "copy again"], (
            f"a {how} copy must keep saving from its own baseline after the original's "
            "conflict: expected ['e0', 'e1', 'copy', 'copy again'], found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )

    @pytest.mark.parametrize(
        ("fields", "field"), list(HAND_BUILT_EVENTS.values()), ids=list(HAND_BUILT_EVENTS)
    )
    async def test_hand_built_events_are_validated(
        self, manager: SessionManager, fields: dict[str, Any], field: str
    ) -> None:
        """An Event made with model_construct is checked like any other: the error names
        the field, nothing is written, and the session still loads."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        session.events.append(Event.model_construct(**fields))
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert info.value.path == f"events[1].{field}", (
            f"save() of an Event.model_construct(**{fields!r:.80}) must raise "
            "SessionSerializationError naming the bad field: expected path "
            f"'events[1].{field}', found {info.value.path!r}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "a save() refused with SessionSerializationError must write nothing: expected "
            f"{session.session_id!r} to read back as before the save(), the stored session "
            "differs"
        )

    @pytest.mark.parametrize("value", list(NOT_A_STATE.values()), ids=list(NOT_A_STATE))
    async def test_state_must_be_a_dict(self, manager: SessionManager, value: object) -> None:
        """State that is not a dict is refused by create() and save(); nothing is written."""
        new_id = self.new_id()
        if value is not None:  # create(state=None) means an empty state
            with pytest.raises(SessionSerializationError) as info:
                await manager.create(new_id, state=value)  # type: ignore[arg-type]
            assert info.value.path == "state", (
                f"create(state={value!r}) must raise SessionSerializationError naming the "
                f"state (state must be a dict): expected path 'state', found {info.value.path!r}"
            )
            assert await self.readback(manager, new_id) is None, (
                f"a refused create({new_id!r}, state={value!r}) must store nothing: expected "
                f"get({new_id!r}) to return None, found a session"
            )
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        session.state = value  # type: ignore[assignment]
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert info.value.path == "state", (
            f"save() of a session whose state is {value!r} must raise SessionSerializationError "
            f"naming the state (state must be a dict): expected path 'state', found "
            f"{info.value.path!r}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"a save() refused for a state of {value!r} must write nothing: expected "
            f"{session.session_id!r} to read back as before the save(), the stored session "
            "differs"
        )

    @pytest.mark.parametrize(("where", "path"), list(SURROGATES.values()), ids=list(SURROGATES))
    async def test_lone_surrogates_are_refused_with_the_path(
        self, manager: SessionManager, where: str, path: str
    ) -> None:
        """A lone surrogate anywhere raises SessionSerializationError naming the path."""
        bad = "\ud800"
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        if where == "state":
            session.state["k"] = f"a{bad}"
        elif where == "state-key":
            session.state[bad] = 1
        elif where == "content":
            session.add_event("user", {"text": bad})
        elif where == "metadata":
            session.add_event("user", "x", m=bad)
        else:
            session.events.append(Event(author="user", metadata={bad: 1}))
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert info.value.path.startswith(path), (
            f"save() with a lone surrogate in the {where} must raise SessionSerializationError "
            f"naming where it is: expected a path starting with {path!r}, found "
            f"{info.value.path!r}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"a save() refused for a lone surrogate in the {where} must write nothing: expected "
            f"{session.session_id!r} to read back as before the save(), the stored session "
            "differs"
        )
        if where.startswith("state"):
            new_id = self.new_id()
            with pytest.raises(SessionSerializationError):
                await manager.create(new_id, state=dict(session.state))
            assert await self.readback(manager, new_id) is None, (
                f"a create() refused for a lone surrogate in the {where} must store nothing: "
                f"expected get({new_id!r}) to return None, found a session"
            )

    @pytest.mark.parametrize(
        "when", list(OUT_OF_RANGE_TIMESTAMPS.values()), ids=list(OUT_OF_RANGE_TIMESTAMPS)
    )
    async def test_timestamp_out_of_range_in_utc_is_refused(
        self, manager: SessionManager, when: datetime
    ) -> None:
        """An aware timestamp that leaves datetime's range once in UTC is refused by path."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))
        session.events.append(Event(author="user", timestamp=when))
        with pytest.raises(SessionSerializationError) as info:
            await manager.save(session)
        assert info.value.path == "events[1].timestamp", (
            f"save() of an event timestamped {when.isoformat()} (outside datetime's range once "
            "in UTC) must raise SessionSerializationError naming the timestamp: expected path "
            f"'events[1].timestamp', found {info.value.path!r}"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"a save() refused for an out-of-range timestamp must write nothing: expected "
            f"{session.session_id!r} to read back as before the save(), the stored session "
            "differs"
        )

    @pytest.mark.parametrize("count", list(HUGE_LAST_EVENTS.values()), ids=list(HUGE_LAST_EVENTS))
    async def test_huge_last_events_loads_everything(
        self, manager: SessionManager, count: int
    ) -> None:
        """last_events past any history (up to 10**20) is clamped: the whole history loads."""
        session = await self.session_with_events(manager, 3)
        loaded = await manager.get(session.session_id, last_events=count)
        assert loaded is not None, (
            f"get({session.session_id!r}, last_events={count}) returned None: a session just "
            "saved with 3 events must be found, however large last_events is"
        )
        assert [e.content for e in loaded.events] == ["e0", "e1", "e2"], (
            f"get(last_events={count}) past the history must be clamped and load every event: "
            f"expected ['e0', 'e1', 'e2'], found {[e.content for e in loaded.events[:8]]!r}"
        )
        assert loaded.first_event_position == 0, (
            f"get(last_events={count}) that loads the whole history must report "
            f"first_event_position=0, found {loaded.first_event_position}"
        )
        loaded.add_event("user", "e3")
        await manager.save(loaded)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after save() of a "
            f"last_events={count} load: the session must still be found"
        )
        assert [e.content for e in stored.events] == ["e0", "e1", "e2", "e3"], (
            f"save() of a get(last_events={count}) load with one event appended must store "
            "the whole history plus that event: expected ['e0', 'e1', 'e2', 'e3'], found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )

    @pytest.mark.parametrize(
        "changes", list(BAD_COMMON_OPTIONS.values()), ids=list(BAD_COMMON_OPTIONS)
    )
    async def test_out_of_range_options_are_refused_at_connect(
        self, manager: SessionManager, changes: dict[str, object]
    ) -> None:
        """Infinite, huge, zero or negative ttl and malformed namespaces raise InvalidOptionError
        naming the option when the manager is built (before any I/O)."""
        (name,) = changes
        with pytest.raises(InvalidOptionError, match=repr(name)):
            manager.with_options(**changes)

    async def test_too_large_event_or_state_is_refused_before_io(
        self, manager: SessionManager
    ) -> None:
        """Past the backend's declared size limits save() raises SessionTooLargeError stating
        the size and the limit, with no payload in the message, and writes nothing (without
        declared limits, a 1 MiB event and state round-trip)."""
        limits = manager.capabilities
        session = await self.session_with_events(manager, 1)
        marker = "0123456789abcdef"
        if limits.max_event_bytes is None and limits.max_state_bytes is None:
            # No declared limit: a MiB-sized event and state are just values.
            session.add_event("user", marker * 65536)
            session.state["big"] = marker * 65536
            await manager.save(session)
            assert snapshot(await self.readback(manager, session.session_id)) == snapshot(
                session
            ), (
                "without declared size limits (max_event_bytes and max_state_bytes None), "
                "save() of a 1 MiB event and a 1 MiB state value must round-trip: expected "
                f"{session.session_id!r} to read back as saved (version {session.version}), "
                "the stored session differs"
            )
            return
        before = snapshot(await self.readback(manager, session.session_id))
        if limits.max_event_bytes is not None:
            payload = marker * (limits.max_event_bytes // len(marker) + 1)
            session.add_event("user", payload)
            with pytest.raises(SessionTooLargeError) as info:
                await manager.save(session)
            message = str(info.value)
            assert info.value.path == "events[1]", (
                f"save() of an event over max_event_bytes={limits.max_event_bytes} must raise "
                "SessionTooLargeError naming the event: expected path 'events[1]', found "
                f"{info.value.path!r}"
            )
            assert str(limits.max_event_bytes) in message, (
                "SessionTooLargeError for an event must state the limit: expected "
                f"{limits.max_event_bytes} in the message, found {message[:200]!r}"
            )
            assert marker not in message, (
                "SessionTooLargeError must never echo the value it refused: the message holds "
                f"the event's content: {message[:200]!r}"
            )
            session.events.pop()
        if limits.max_state_bytes is not None:
            session.state["big"] = marker * (limits.max_state_bytes // len(marker) + 1)
            with pytest.raises(SessionTooLargeError) as info:
                await manager.save(session)
            assert info.value.path == "state", (
                f"save() of a state over max_state_bytes={limits.max_state_bytes} must raise "
                "SessionTooLargeError naming the state: expected path 'state', found "
                f"{info.value.path!r}"
            )
            assert marker not in str(info.value), (
                "SessionTooLargeError must never echo the value it refused: the message holds "
                f"the state's content: {str(info.value)[:200]!r}"
            )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "a save() refused with SessionTooLargeError must write nothing (it is refused "
            f"before any I/O): expected {session.session_id!r} to read back as before, the "
            "stored session differs"
        )


# -- the fuzz: hostile ids, values, events, options and misuse, every one a contract check --

#: Examples per fuzz clause. Small by default (a CI run stays cheap and, derandomized,
#: the same every time); set AGENTSESSIONS_FUZZ_EXAMPLES=300 (or more) for a deep,
#: randomized run.
FUZZ_EXAMPLES_ENV = "AGENTSESSIONS_FUZZ_EXAMPLES"
_DEFAULT_EXAMPLES = 15
_CASE_TIMEOUT = 60.0

_SPECIAL_TEXT = [
    "",
    " ",
    "\x00",
    "\ud800",
    "a\udfffb",
    "x" * 256,
    "é" * 255,
    "$where",
    "{a}",
    "'; DROP TABLE x; --",
    "*",
    "../",
    "\n",
    "🤖",
]
_TEXT = st.one_of(
    st.sampled_from(_SPECIAL_TEXT),
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=12),
    st.text(st.characters(blacklist_categories=()), max_size=12),  # surrogates too
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
_JSON_ISH = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_TEXT, inner, max_size=4),
    ),
    max_leaves=12,
)
_CLEAN_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_NOT_JSON = st.sampled_from(
    [(1, 2), {1, 2}, b"raw", datetime(2024, 1, 1, tzinfo=timezone.utc), {1: "a"}, object()]
)
# Half valid JSON (which must round-trip), half hostile (which must be refused).
_VALUES = st.one_of(_CLEAN_JSON, _CLEAN_JSON, _CLEAN_JSON, _JSON_ISH, _NOT_JSON)
_STATES = st.one_of(
    st.dictionaries(st.text(max_size=8), _VALUES, max_size=4),
    st.dictionaries(_TEXT, _VALUES, max_size=4),
    _VALUES,
)
_AUTHORS = st.one_of(st.text(min_size=1, max_size=12), _TEXT, st.integers(), st.none())
_TIMESTAMPS = st.one_of(
    st.datetimes(timezones=st.just(timezone.utc)),
    st.datetimes(timezones=st.just(timezone.utc)),
    st.datetimes(),  # naive
    st.sampled_from(list(OUT_OF_RANGE_TIMESTAMPS.values())),
    st.datetimes(timezones=st.sampled_from([_EAST, _WEST, timezone.utc])),
    st.sampled_from(["2024-01-01T00:00:00Z", 0, None]),
)


@st.composite
def _events(draw: st.DrawFn) -> object:
    """An event built any way a caller can: validated, or with ``model_construct``."""
    fields: dict[str, Any] = {"author": draw(_AUTHORS)}
    if draw(st.booleans()):
        fields["id"] = draw(_TEXT)
    if draw(st.booleans()):
        fields["content"] = draw(_VALUES)
    if draw(st.booleans()):
        fields["timestamp"] = draw(_TIMESTAMPS)
    if draw(st.booleans()):
        fields["metadata"] = draw(st.one_of(st.dictionaries(_TEXT, _VALUES, max_size=3), _VALUES))
    if draw(st.booleans()):
        return Event.model_construct(**fields)
    try:
        return Event(**fields)
    except ValueError:  # pydantic refused it: the caller can still build it unvalidated
        return Event.model_construct(**fields)


_MISUSE = st.one_of(
    st.tuples(st.just("create"), _TEXT, st.one_of(st.none(), _TEXT), _STATES),
    st.tuples(st.just("append"), st.lists(_events(), min_size=1, max_size=3)),
    st.tuples(st.just("state"), _STATES),
    st.tuples(st.just("state-item"), _TEXT, _VALUES),
    st.tuples(st.just("replace-events"), st.lists(_events(), max_size=3)),
    st.tuples(st.just("move-to-sentinel"), st.booleans()),
    st.tuples(st.just("copy-then-original"), st.booleans(), st.lists(_events(), max_size=2)),
    st.tuples(
        st.just("last-events"),
        st.one_of(st.integers(min_value=-3, max_value=10**20), st.sampled_from([sys.maxsize])),
    ),
    st.tuples(
        st.just("options"),
        st.sampled_from(["ttl", "namespace"]),
        st.one_of(st.floats(), st.integers(), _TEXT, st.none()),
    ),
)


class FuzzTally:
    """What the fuzz saw: outcomes by kind, and the three that must stay at zero."""

    def __init__(self) -> None:
        self.outcomes: Counter[str] = Counter()
        self.raw = self.poisoned = self.cross_session = 0

    @property
    def cases(self) -> int:
        return sum(self.outcomes.values())

    def summary(self) -> str:
        kinds = ", ".join(f"{name}={count}" for name, count in sorted(self.outcomes.items()))
        return (
            f"{self.cases} hostile cases: raw exceptions={self.raw}, poisoned sessions="
            f"{self.poisoned}, cross-session writes={self.cross_session} ({kinds})"
        )


class MisuseFuzzTests(SuiteBase):
    async def test_hostile_input_and_misuse_never_corrupt_anything(
        self, manager: SessionManager, request: pytest.FixtureRequest
    ) -> None:
        """Hypothesis throws hostile ids, values, hand-built events, options and misuse of
        loaded sessions at the backend: each case round-trips or raises a documented
        SessionError with nothing stored; never a raw exception, never a session that
        fails to load, never a change to another session."""
        if manager.capabilities.namespaces:
            manager = await self.variant(manager, namespace=self.new_namespace())
            prefix = ""
        else:
            prefix = self.new_id("fz") + "-"
        sentinel = await self.session_with_events(manager, 2, user_id=self.new_user())
        sentinel_before = snapshot(await self.readback(manager, sentinel.session_id))
        tally = FuzzTally()
        loop = asyncio.get_running_loop()

        async def one_case(case: tuple[Any, ...]) -> None:
            session = await self.session_with_events(manager, 1)
            session.state["k"] = 1
            await manager.save(session)
            session_before = snapshot(await self.readback(manager, session.session_id))
            try:
                outcome = await self._misuse(manager, session, sentinel.session_id, prefix, case)
            except SessionError as exc:
                outcome = f"refused:{type(exc).__name__}"
                stored = snapshot(await self.readback(manager, session.session_id))
                if stored != session_before:
                    tally.poisoned += 1
                    raise AssertionError(f"{outcome} but the session changed: {stored}") from exc
            except Exception as exc:
                tally.raw += 1
                raise AssertionError(f"raw {type(exc).__name__}: {exc!r:.300}") from exc
            try:
                await manager.get(session.session_id)
                await manager.get(session.session_id, last_events=1)
            except Exception as exc:
                tally.poisoned += 1
                raise AssertionError(f"the session no longer loads: {exc!r:.300}") from exc
            if snapshot(await self.readback(manager, sentinel.session_id)) != sentinel_before:
                tally.cross_session += 1
                raise AssertionError(f"case {case!r:.200} changed another session")
            tally.outcomes[outcome] += 1

        examples = int(os.environ.get(FUZZ_EXAMPLES_ENV, _DEFAULT_EXAMPLES))

        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=FUZZ_EXAMPLES_ENV not in os.environ,
            suppress_health_check=list(HealthCheck),
        )
        @given(_MISUSE)
        def run(case: tuple[Any, ...]) -> None:
            # Hypothesis drives a sync function: it runs in a worker thread, and each
            # case runs on the test's own loop, where the manager lives.
            asyncio.run_coroutine_threadsafe(one_case(case), loop).result(_CASE_TIMEOUT)

        try:
            await asyncio.to_thread(run)
        finally:
            request.node.user_properties.append(("misuse_fuzz", tally.summary()))
            print(f"\n{type(manager).__name__} fuzz: {tally.summary()}")
        assert tally.cases >= min(examples, 1), (
            f"the misuse fuzz must run at least one case ({FUZZ_EXAMPLES_ENV}={examples}): "
            f"it ran {tally.cases}"
        )

    async def _misuse(
        self,
        manager: SessionManager,
        session: Session,
        sentinel_id: str,
        prefix: str,
        case: tuple[Any, ...],
    ) -> str:
        """Apply one hostile case; on success check the round trip, and say what happened."""
        kind = case[0]
        if kind == "create":
            _, raw_id, user_id, state = case
            session_id = prefix + raw_id
            try:
                before = snapshot(await manager.get(session_id))
            except InvalidInputError:
                before = None
            try:
                created = await manager.create(session_id, user_id, state=state)
            except SessionError:
                if before is None:
                    with contextlib.suppress(InvalidInputError):
                        assert await manager.get(session_id) is None, (
                            f"a create({session_id!r:.80}) refused with a SessionError must "
                            "store nothing: expected get() to return None, found a session"
                        )
                raise
            self.track(session_id)
            assert snapshot(await self.readback(manager, session_id)) == snapshot(created), (
                f"a create({session_id!r:.80}) that succeeded must read back as it returned: "
                "the stored session differs or is missing"
            )
            return "stored"
        if kind == "last-events":
            loaded = await manager.get(session.session_id, last_events=case[1])
            assert loaded is not None and len(loaded.events) == min(max(case[1], 0), 1), (
                f"get(sid, last_events={case[1]}) of a 1-event session must load "
                f"{min(max(case[1], 0), 1)} event(s), found "
                f"{'None' if loaded is None else f'{len(loaded.events)} event(s)'}"
            )
            return "loaded"
        if kind == "options":
            _, name, value = case
            varied = manager.with_options(**{name: value})
            try:
                await varied.open()
                probe = await varied.create(self.new_id("opt"))
                assert snapshot(await varied.get(probe.session_id)) == snapshot(probe), (
                    f"with_options({name}={value!r:.60}) was accepted, so a create() through it "
                    "must read back with get() as created: the session read back differs"
                )
                await varied.delete(probe.session_id)
            finally:
                await varied.close()
            return "options accepted"
        if kind == "move-to-sentinel":
            moved = session.model_copy(update={"session_id": sentinel_id}, deep=case[1])
            moved.add_event("user", "moved")
            await manager.save(moved)
            raise AssertionError("a copy was saved under another session's id")
        if kind == "copy-then-original":
            _, deep, events = case
            copied = session.model_copy(deep=deep)
            copied.events.extend(events)
            await manager.save(copied)
            expected = snapshot(copied)
            with contextlib.suppress(SessionConflictError):
                session.state = {"original": True}
                await manager.save(session)
                raise AssertionError("the original saved over its copy's save")
            assert snapshot(await self.readback(manager, session.session_id)) == expected, (
                "a save() of the original that raised SessionConflictError must write nothing: "
                "the stored session must be the one its copy saved, it differs"
            )
            return "stored"
        if kind == "append":
            session.events.extend(case[1])
        elif kind == "replace-events":
            session.events = list(case[1])
        elif kind == "state":
            session.state = case[1]
        else:
            session.state[case[1]] = case[2]
        await manager.save(session)
        assert snapshot(await self.readback(manager, session.session_id)) == snapshot(session), (
            f"a save() that succeeded after {kind!r} must round-trip: expected the stored "
            f"session to read back as saved (version {session.version}), it differs"
        )
        return "stored"
