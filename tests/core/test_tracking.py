"""EventList tracking: whatever a caller does to ``session.events``, save() writes it."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest
from agentsessions import Event, InvalidInputError, MemorySessionManager, Session
from agentsessions._tracking import (
    EventList,
    LazyEvents,
    StoredEvents,
    event_contents,
    event_ids,
)
from hypothesis import given, settings
from hypothesis import strategies as st

POOL = [Event(author="user", content=index) for index in range(12)]
events_st = st.sampled_from(POOL)
index_st = st.integers(-14, 14)
slice_st = st.builds(
    slice, st.none() | index_st, st.none() | index_st, st.sampled_from([None, 1, 2, -1, -2])
)


async def _loaded_pool(manager: MemorySessionManager) -> Session:
    """Session "s" saved with the first six events of POOL, then loaded back."""
    session = await manager.create("s")
    session.events.extend(POOL[:6])
    await manager.save(session)
    loaded = await manager.get("s")
    assert loaded is not None
    return loaded


operations = st.one_of(
    st.tuples(st.just("append"), events_st),
    st.tuples(st.just("extend"), st.lists(events_st, max_size=3)),
    st.tuples(st.just("iadd"), st.lists(events_st, max_size=3)),
    st.tuples(st.just("setitem"), index_st, events_st),
    st.tuples(st.just("setslice"), slice_st, st.lists(events_st, max_size=3)),
    st.tuples(st.just("delitem"), index_st),
    st.tuples(st.just("delslice"), slice_st),
    st.tuples(st.just("insert"), index_st, events_st),
    st.tuples(st.just("pop"), index_st),
    st.tuples(st.just("remove"), events_st),
    st.tuples(st.just("clear")),
    st.tuples(st.just("sort")),
    st.tuples(st.just("reverse")),
    st.tuples(st.just("imul"), st.integers(-1, 2)),
)


def _apply(target: list[Event], op: tuple[Any, ...]) -> None:
    name, *args = op
    try:
        if name == "append":
            target.append(args[0])
        elif name == "extend":
            target.extend(args[0])
        elif name == "iadd":
            target += args[0]
        elif name == "setitem" or name == "setslice":
            target[args[0]] = args[1]
        elif name == "delitem" or name == "delslice":
            del target[args[0]]
        elif name == "insert":
            target.insert(args[0], args[1])
        elif name == "pop":
            target.pop(args[0])
        elif name == "remove":
            target.remove(args[0])
        elif name == "clear":
            target.clear()
        elif name == "sort":
            target.sort(key=lambda event: -event.content)
        elif name == "reverse":
            target.reverse()
        elif name == "imul":
            target *= args[0]
    except (IndexError, ValueError):
        pass  # the same error on a plain list: nothing changed


@given(st.lists(events_st, max_size=8), st.lists(operations, max_size=6))
def test_positions_before_first_change_are_untouched(
    start: list[Event], ops: list[tuple[Any, ...]]
) -> None:
    tracked, plain = EventList(start), list(start)
    for op in ops:
        _apply(tracked, op)
        _apply(plain, op)
    assert list(tracked) == plain
    assert 0 <= tracked.first_change <= len(tracked)
    assert tracked[: tracked.first_change] == start[: tracked.first_change]


@settings(max_examples=60, deadline=None)
@given(st.lists(operations, min_size=1, max_size=5))
async def test_any_edit_is_saved_exactly(ops: list[tuple[Any, ...]]) -> None:
    manager = MemorySessionManager()
    loaded = await _loaded_pool(manager)
    expected = list(loaded.events)
    for op in ops:
        _apply(loaded.events, op)
        _apply(expected, op)
    if len({event.id for event in expected}) != len(expected):
        return  # duplicate ids are refused, tested elsewhere
    await manager.save(loaded)
    stored = await manager.get("s")
    assert stored is not None
    assert stored.events == expected


async def test_an_append_hands_over_no_old_event_even_after_a_replaced_list() -> None:
    manager = MemorySessionManager()
    session = await manager.create("s")
    session.events = list(POOL[:3])  # a plain list: compared once, then tracked
    await manager.save(session)
    assert isinstance(session.events, EventList)
    session.add_event("user", "new")
    assert session.events.first_change == 3
    await manager.save(session)
    stored = await manager.get("s")
    assert stored is not None
    assert [event.content for event in stored.events] == [0, 1, 2, "new"]


@pytest.mark.parametrize("mutate", [lambda e: e.pop(), lambda e: e.__delitem__(0)])
async def test_removals_are_saved(mutate: Any) -> None:
    manager = MemorySessionManager()
    session = await manager.create("s")
    session.events.extend(POOL[:3])
    await manager.save(session)
    expected = list(session.events)
    mutate(session.events)
    mutate(expected)
    await manager.save(session)
    stored = await manager.get("s")
    assert stored is not None
    assert stored.events == expected


# -- LazyEvents: loaded events decode on first use -------------------------------------

STORED = [event.model_dump_json() for event in POOL[:6]]
# What never needs the loaded events decoded.
appends = st.one_of(
    st.tuples(st.just("append"), events_st),
    st.tuples(st.just("extend"), st.lists(events_st, max_size=3)),
    st.tuples(st.just("iadd"), st.lists(events_st, max_size=3)),
)

reads = st.one_of(
    st.tuples(st.just("len")),
    st.tuples(st.just("getitem"), index_st),
    st.tuples(st.just("getslice"), slice_st),
    st.tuples(st.just("iter")),
    st.tuples(st.just("reversed")),
    st.tuples(st.just("contains"), events_st),
    st.tuples(st.just("eq")),
    st.tuples(st.just("add")),
    st.tuples(st.just("radd")),
    st.tuples(st.just("index"), events_st),
    st.tuples(st.just("count"), events_st),
    st.tuples(st.just("bool")),
)


def _read(target: list[Event], op: tuple[Any, ...]) -> Any:
    name, *args = op
    try:
        if name == "len":
            return len(target)
        if name == "getitem":
            return target[args[0]]
        if name == "getslice":
            return target[args[0]]
        if name == "iter":
            return list(iter(target))
        if name == "reversed":
            return list(reversed(target))
        if name == "contains":
            return args[0] in target
        if name == "eq":
            return [target == POOL[:6], target != POOL[:6], POOL[:6] == target]
        if name == "add":
            return target + POOL[:1]
        if name == "radd":
            return POOL[:1] + target
        if name == "index":
            return target.index(args[0])
        if name == "count":
            return target.count(args[0])
        return bool(target)
    except (IndexError, ValueError) as exc:
        return type(exc)


def _lazy() -> LazyEvents:
    return LazyEvents(StoredEvents(STORED))


@given(st.lists(st.one_of(operations, reads.map(lambda op: ("read", op))), max_size=8))
def test_a_lazy_list_behaves_as_the_plain_list_of_its_events(ops: list[tuple[Any, ...]]) -> None:
    lazy, plain = _lazy(), list(POOL[:6])
    for op in ops:
        if op[0] == "read":
            assert _read(lazy, op[1]) == _read(plain, op[1])
        else:
            _apply(lazy, op)
            _apply(plain, op)
        assert len(lazy) == len(plain)
        assert 0 <= lazy.first_change <= len(lazy)
    assert lazy == plain
    assert list(lazy) == plain
    assert lazy[: lazy.first_change] == POOL[: lazy.first_change]


@given(st.lists(appends, max_size=6))
def test_appending_never_decodes_the_loaded_events(ops: list[tuple[Any, ...]]) -> None:
    lazy, plain = _lazy(), list(POOL[:6])
    for op in ops:
        _apply(lazy, op)
        _apply(plain, op)
    assert len(lazy) == len(plain)
    assert lazy[6:] == plain[6:]
    if len(plain) > 6:  # the last event is an appended one
        assert lazy[-1] == plain[-1]
        assert lazy.pop() == plain.pop()
    del lazy[6:]
    del plain[6:]
    assert lazy.first_change == 6
    assert not lazy.decoded
    assert lazy == plain  # only now decoded
    assert lazy.decoded


def test_the_decoded_events_are_shared_by_siblings_and_survive_copies() -> None:
    lazy = _lazy()
    sibling = lazy.sibling()
    assert isinstance(sibling, LazyEvents)
    assert all(a is b for a, b in zip(lazy, sibling, strict=True))
    for copied in (copy.copy(_lazy()), copy.deepcopy(_lazy()), pickle.loads(pickle.dumps(_lazy()))):
        assert type(copied) is EventList
        assert copied == POOL[:6]
    fresh = _lazy()
    assert repr(fresh).count("Event(") == 6
    assert repr(fresh) == repr(list(fresh))


def test_ids_and_contents_come_without_building_events() -> None:
    lazy = _lazy()
    lazy.append(POOL[7])
    assert list(event_ids(lazy)) == [event.id for event in [*POOL[:6], POOL[7]]]
    assert event_contents(lazy) == [0, 1, 2, 3, 4, 5, 7]
    assert not lazy.decoded
    lazy.materialize()
    assert event_contents(lazy) == [0, 1, 2, 3, 4, 5, 7]
    assert list(event_ids(lazy)) == [event.id for event in lazy]


@settings(max_examples=60, deadline=None)
@given(st.lists(operations, min_size=1, max_size=5))
async def test_any_edit_of_an_undecoded_load_is_saved_exactly(ops: list[tuple[Any, ...]]) -> None:
    manager = MemorySessionManager()
    loaded = await _loaded_pool(manager)
    assert isinstance(loaded.events, LazyEvents)
    assert not loaded.events.decoded
    expected = list(POOL[:6])
    for op in ops:
        _apply(loaded.events, op)
        _apply(expected, op)
    if len({event.id for event in expected}) != len(expected):
        with pytest.raises(InvalidInputError, match="duplicate event id"):
            await manager.save(loaded)
        return
    await manager.save(loaded)
    stored = await manager.get("s")
    assert stored is not None
    assert stored.events == expected


async def test_a_turn_on_a_loaded_history_decodes_nothing() -> None:
    manager = MemorySessionManager()
    loaded = await _loaded_pool(manager)
    for turn in range(2):
        loaded.add_event("user", f"question {turn}")
        loaded.add_event("assistant", f"answer {turn}")
        await manager.save(loaded)
    assert isinstance(loaded.events, LazyEvents)
    assert not loaded.events.decoded
    assert loaded._loaded is not None
    assert isinstance(loaded._loaded.events, LazyEvents)
    assert not loaded._loaded.events.decoded
    # A stored id appended again is still refused, found without decoding the events.
    loaded.events.append(POOL[2])
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(loaded)
    assert not loaded.events.decoded
    stored = await manager.get("s")
    assert stored is not None
    contents = [event.content for event in stored.events]
    assert contents == [0, 1, 2, 3, 4, 5, "question 0", "answer 0", "question 1", "answer 1"]


async def test_events_add_event_made_are_saved_without_reading_the_loaded_ids(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    manager = MemorySessionManager()
    loaded = await _loaded_pool(manager)
    parsed: list[int] = []
    real_ids = StoredEvents.ids

    def counting(self: StoredEvents) -> list[str]:
        parsed.append(len(self))
        return real_ids(self)

    monkeypatch.setattr(StoredEvents, "ids", counting)
    loaded.add_event("user", "fresh")
    loaded.add_event("assistant", "fresh too")
    await manager.save(loaded)
    assert parsed == []  # random ids drawn just now: nothing to compare them with
    loaded.events.append(Event(author="user", content="built by the caller"))
    await manager.save(loaded)
    assert parsed == [6]  # an Event the caller built may carry any id: checked
    stored = await manager.get("s")
    assert stored is not None and len(stored.events) == 9


async def test_an_event_add_event_made_is_still_refused_where_its_id_exists() -> None:
    manager = MemorySessionManager()
    await manager.create("s")
    first = await manager.get("s")
    second = await manager.get("s")
    assert first is not None and second is not None
    made = first.add_event("user", "once")
    first.events.append(made)  # the same object twice in one save
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(first)
    del first.events[-1]
    await manager.save(first)
    first.events.append(made)  # saved already: its id is stored now
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(first)
    del first.events[-1]
    first.events.append(made.model_copy(update={"content": "a copy keeps the id"}))
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(first)
    # Made in one copy, saved through another: the first copy's save is checked in full.
    made_in_second = second.add_event("user", "twice")
    third = await manager.get("s")
    assert third is not None
    third.events.append(made_in_second)
    await manager.save(third)
    reloaded = await manager.get("s")
    assert reloaded is not None
    reloaded.events.append(made_in_second)
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(reloaded)


def test_unsent_events_dropped_unsaved_leave_no_entries_behind() -> None:
    from agentsessions import _models

    session = Session(session_id="s")
    for _ in range(5_000):
        session.add_event("user", "never saved")
        session.events.clear()
    # Entries of events gone are swept as the table grows: it stays near what is alive.
    assert len(_models._unsent) <= 2 * _models._SWEEP_MIN
    kept = session.add_event("user", "kept")
    assert _models.all_unsent([kept])
    assert not _models.all_unsent([kept.model_copy()])
    assert not _models.all_unsent([kept, kept])


async def test_an_undecoded_session_validates_serialises_and_copies_whole() -> None:
    manager = MemorySessionManager()
    session = await manager.create("s")
    session.events.extend(POOL[:6])
    await manager.save(session)

    async def fresh() -> Session:
        loaded = await manager.get("s")
        assert loaded is not None
        assert not loaded.events.decoded  # type: ignore[attr-defined]
        return loaded

    assert len((await fresh()).model_dump()["events"]) == 6
    assert Session.model_validate_json((await fresh()).model_dump_json()).events == POOL[:6]
    assert Session(**dict((await fresh()).__dict__)).events == POOL[:6]
    validated = Session.model_validate({"session_id": "x", "events": (await fresh()).events})
    assert validated.events == POOL[:6]
    assert (await fresh()).model_copy(deep=True).events == POOL[:6]
    assert copy.deepcopy((await fresh()).events) == POOL[:6]


@pytest.mark.parametrize("as_bytes", [False, True])
def test_ids_are_read_off_stored_texts_as_a_parse_reads_them(as_bytes: bool) -> None:
    events = [
        Event(id="plain", author="a"),
        Event(id='quo"te', author="a"),
        Event(id="back\\slash", author="a"),
        Event(id="üñí", author="a"),
    ]
    texts: list[Any] = [event.model_dump_json() for event in events]
    # Another encoder's layout: spaces, id last, id written with escapes.
    texts += ['{ "id": "spaced", "author": "a"}', '{"author": "a", "id": "last"}']
    texts += ['{"id":"\\u0041scaped","author":"a"}']
    if as_bytes:
        texts = [text.encode() for text in texts]
    expected = [event.id for event in events] + ["spaced", "last", "Ascaped"]
    assert StoredEvents(texts).ids() == expected


async def test_an_event_add_event_made_and_restored_is_refused_when_appended_again() -> None:
    manager = MemorySessionManager()
    built = Session(session_id="s", version=1)
    made = built.add_event("user", "restored")
    await manager.restore(built)
    loaded = await manager.get("s")
    assert loaded is not None
    loaded.events.append(made)  # stored by the restore: not a fresh id any more
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(loaded)
