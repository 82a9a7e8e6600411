"""``last_events`` on get_or_create, update and session(): the backend reads only the tail."""

from __future__ import annotations

from datetime import datetime

import pytest
from agentsessions import (
    InvalidInputError,
    MemorySessionManager,
    PartialSessionError,
    Session,
    SessionConflictError,
)
from agentsessions.backend import LoadedSession


class LoadSpy(MemorySessionManager):
    """The memory backend, recording the ``last_events`` of every load it is asked for
    (and, as ``("since", n)``, each read of what followed a copy of *n* events)."""

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url, None)
        self.loads: list[int | tuple[str, int] | None] = []

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        self.loads.append(last_events)
        return await super()._load(session_id, last_events, now)

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        self.loads.append(("since", event_count))
        return await super()._load_since(session_id, event_count, lineage, now)


async def _stored(manager: LoadSpy, count: int, session_id: str = "s") -> None:
    session = await manager.create(session_id, "ada")
    for index in range(count):
        session.add_event("user", index)
    await manager.save(session)
    manager.loads.clear()


async def _contents(manager: LoadSpy, session_id: str = "s") -> list[object]:
    stored = await manager.get(session_id)
    assert stored is not None
    return [event.content for event in stored.events]


async def test_get_or_create_loads_only_the_tail_and_appends_after_the_history() -> None:
    manager = LoadSpy()
    await _stored(manager, 5)
    session = await manager.get_or_create("s", "ada", last_events=2)
    assert manager.loads == [2]
    assert [event.content for event in session.events] == [3, 4]
    session.add_event("user", "new")
    await manager.save(session)
    assert await _contents(manager) == [0, 1, 2, 3, 4, "new"]


async def test_get_or_create_with_last_events_creates_an_absent_session() -> None:
    manager = LoadSpy()
    session = await manager.get_or_create("fresh", "ada", last_events=3)
    assert manager.loads == [3]
    assert (session.events, session.user_id, session.version) == ([], "ada", 1)
    session.add_event("user", "first")
    await manager.save(session)
    assert await _contents(manager, "fresh") == ["first"]


async def test_update_with_last_events_zero_appends_without_reading_the_history() -> None:
    manager = LoadSpy()
    await _stored(manager, 4)
    seen: list[int] = []

    def append(session: Session) -> None:
        seen.append(len(session.events))
        session.add_event("agent", "reply")

    done = await manager.update("s", append, user_id="ada", last_events=0)
    assert (manager.loads, seen) == ([0], [0])
    assert done.version == 3
    assert await _contents(manager) == [0, 1, 2, 3, "reply"]


async def test_update_with_last_events_reloads_the_tail_on_each_conflict() -> None:
    manager = LoadSpy()
    await _stored(manager, 3)
    rivals = iter(["rival 1", "rival 2"])
    windows: list[tuple[int, list[object]]] = []

    async def interfere_twice(session: Session) -> None:
        windows.append((session.first_event_position, [event.content for event in session.events]))
        rival = next(rivals, None)
        if rival is not None:
            other = await manager.get("s")  # a full load: recorded as None
            assert other is not None
            other.add_event("rival", rival)
            await manager.save(other)
        session.add_event("agent", "mine")

    await manager.update("s", interfere_twice, last_events=1, retries=2)
    # Each retry reads only the events after the copy that lost (4, then 5 of them),
    # and still hands fn the newest one alone.
    assert manager.loads == [1, None, ("since", 3), None, ("since", 4)]
    assert windows == [(2, [2]), (3, ["rival 1"]), (4, ["rival 2"])]
    assert await _contents(manager) == [0, 1, 2, "rival 1", "rival 2", "mine"]


async def test_update_create_with_last_events_creates_then_appends() -> None:
    manager = LoadSpy()
    done = await manager.update(
        "new", lambda s: s.add_event("user", "hi"), user_id="ada", create=True, last_events=0
    )
    assert manager.loads[0] == 0
    assert done.version == 2
    assert await _contents(manager, "new") == ["hi"]


async def test_update_on_a_tail_cannot_replace_loaded_events_and_writes_nothing() -> None:
    manager = LoadSpy()
    await _stored(manager, 3)

    def replace_last(session: Session) -> None:
        session.events.pop()
        session.add_event("user", "rewritten")

    with pytest.raises(PartialSessionError):
        await manager.update("s", replace_last, last_events=1)
    assert await _contents(manager) == [0, 1, 2]


async def test_update_gives_up_on_a_tail_as_on_a_full_load() -> None:
    manager = LoadSpy()
    await _stored(manager, 1)

    async def always_lose(session: Session) -> None:
        other = await manager.get("s", last_events=0)
        assert other is not None
        await manager.save(other)
        session.add_event("user", "lost")

    with pytest.raises(SessionConflictError):
        await manager.update("s", always_lose, last_events=0, retries=1)
    assert await _contents(manager) == [0]


@pytest.mark.parametrize("bad", [-1, 1.5, "2", True])
async def test_a_bad_last_events_is_refused_before_anything_is_created(bad: object) -> None:
    manager = LoadSpy()
    with pytest.raises(InvalidInputError, match="last_events"):
        await manager.get_or_create("s", last_events=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="last_events"):
        await manager.update("s", lambda s: None, create=True, last_events=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="last_events"):
        async with manager.session("s", last_events=bad):  # type: ignore[arg-type]
            pass
    assert manager.loads == []
    assert await manager.get("s") is None


async def test_session_block_with_last_events_saves_the_appended_tail() -> None:
    manager = LoadSpy()
    await _stored(manager, 6)
    async with manager.session("s", user_id="ada", last_events=2) as session:
        assert [event.content for event in session.events] == [4, 5]
        session.add_event("user", "more")
    assert manager.loads == [2]
    assert await _contents(manager) == [0, 1, 2, 3, 4, 5, "more"]
