"""EventList tracking: whatever a caller does to ``session.events``, save() writes it."""

from __future__ import annotations

from typing import Any

import pytest
from agentsessions import Event, MemorySessionManager
from agentsessions._tracking import EventList
from hypothesis import given, settings
from hypothesis import strategies as st

POOL = [Event(author="user", content=index) for index in range(12)]
events_st = st.sampled_from(POOL)
index_st = st.integers(-14, 14)
slice_st = st.builds(
    slice, st.none() | index_st, st.none() | index_st, st.sampled_from([None, 1, 2, -1, -2])
)

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
    session = await manager.create("s")
    session.events.extend(POOL[:6])
    await manager.save(session)
    loaded = await manager.get("s")
    assert loaded is not None
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
