"""What the base manager hands a backend: one SaveRequest that says exactly what changed."""

from __future__ import annotations

from datetime import datetime

import pytest
from agentsessions import (
    Event,
    InvalidInputError,
    ManagerClosedError,
    MemorySessionManager,
    PartialSessionError,
    Session,
    SessionConflictError,
    SessionNotFoundError,
)
from agentsessions.backend import SaveRequest


class Spy(MemorySessionManager):
    """The memory backend, recording every SaveRequest it is handed."""

    def __init__(self, url: str = "memory://", options: object = None) -> None:
        super().__init__(url, None)
        self.requests: list[SaveRequest] = []

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        self.requests.append(request)
        await super()._save(request, now)


async def _session_with(manager: Spy, count: int) -> Session:
    session = await manager.create("s")
    for index in range(count):
        session.add_event("user", index)
    await manager.save(session)
    manager.requests.clear()
    return session


async def test_an_append_hands_over_only_the_new_events() -> None:
    manager = Spy()
    session = await _session_with(manager, 5)
    session.add_event("user", "new")
    await manager.save(session)
    (request,) = manager.requests
    assert (request.keep, request.stored_event_count, request.truncates) == (5, 5, False)
    assert [event.position for event in request.new_events] == [5]
    assert request.expected_version == 2
    assert request.record.version == 3
    assert session.version == 3


async def test_removing_from_the_end_truncates_without_rewriting() -> None:
    manager = Spy()
    session = await _session_with(manager, 5)
    del session.events[3:]
    await manager.save(session)
    (request,) = manager.requests
    assert (request.keep, request.truncates, request.new_events) == (3, True, [])
    assert request.record.event_count == 3


async def test_an_edit_rewrites_from_the_first_changed_event() -> None:
    manager = Spy()
    session = await _session_with(manager, 5)
    session.events[2] = session.events[2].model_copy(update={"content": "edited"})
    await manager.save(session)
    (request,) = manager.requests
    assert request.keep == 2
    assert [event.position for event in request.new_events] == [2, 3, 4]
    stored = await manager.get("s")
    assert stored is not None
    assert [event.content for event in stored.events] == [0, 1, "edited", 3, 4]


async def test_an_equal_copy_of_an_event_is_not_a_change() -> None:
    manager = Spy()
    session = await _session_with(manager, 3)
    session.events[0] = session.events[0].model_copy()
    await manager.save(session)
    assert manager.requests[0].new_events == []
    assert not manager.requests[0].truncates


async def test_a_partial_load_appends_after_the_whole_history() -> None:
    manager = Spy()
    await _session_with(manager, 5)
    partial = await manager.get("s", last_events=2)
    assert partial is not None
    assert partial.is_partial and partial.first_event_position == 3
    partial.add_event("user", "tail")
    await manager.save(partial)
    assert manager.requests[0].keep == 5
    full = await manager.get("s")
    assert full is not None
    assert [event.content for event in full.events] == [0, 1, 2, 3, 4, "tail"]


async def test_a_partial_load_may_drop_its_tail() -> None:
    manager = Spy()
    await _session_with(manager, 5)
    partial = await manager.get("s", last_events=2)
    assert partial is not None
    partial.events.pop()
    await manager.save(partial)
    full = await manager.get("s")
    assert full is not None
    assert [event.content for event in full.events] == [0, 1, 2, 3]


async def test_a_partial_load_cannot_replace_loaded_events() -> None:
    manager = Spy()
    await _session_with(manager, 5)
    partial = await manager.get("s", last_events=2)
    assert partial is not None
    partial.events[0] = Event(author="user", content="replaced")
    with pytest.raises(PartialSessionError, match="last_events"):
        await manager.save(partial)
    assert manager.requests == []


async def test_duplicate_event_ids_and_non_events_are_refused_before_io() -> None:
    manager = Spy()
    session = await _session_with(manager, 2)
    session.events.append(Event(id=session.events[0].id, author="user"))
    with pytest.raises(InvalidInputError, match="duplicate event id"):
        await manager.save(session)
    session.events[-1] = {"author": "user"}  # type: ignore[call-overload]
    with pytest.raises(InvalidInputError, match=r"events\[2\] is a dict"):
        await manager.save(session)
    assert manager.requests == []


async def test_a_failed_save_can_be_retried_with_the_same_events() -> None:
    manager = Spy()
    session = await _session_with(manager, 70)
    session.add_event("user", "x")
    other = await manager.get("s")
    assert other is not None
    other.add_event("user", "winner")
    await manager.save(other)
    with pytest.raises(SessionConflictError):
        await manager.save(session)
    # The id set cached on the session must not remember the events that failed.
    fresh = await manager.get("s")
    assert fresh is not None
    fresh.events.append(session.events[-1])
    await manager.save(fresh)


async def test_a_hand_built_session_is_saved_as_a_full_rewrite() -> None:
    manager = Spy()
    with pytest.raises(SessionNotFoundError):
        await manager.save(Session(session_id="nope"))
    await _session_with(manager, 3)
    with pytest.raises(SessionConflictError):
        await manager.save(Session(session_id="s", version=1))
    await manager.save(Session(session_id="s", version=2, events=[Event(author="a", content=1)]))
    (request,) = manager.requests
    assert request.keep == 0 and request.truncates
    stored = await manager.get("s")
    assert stored is not None
    assert [event.content for event in stored.events] == [1]


async def test_update_gives_up_after_its_retries() -> None:
    manager = Spy()
    await manager.create("s")

    async def interfere(session: Session) -> None:
        other = await manager.get("s")
        assert other is not None
        await manager.save(other)
        session.add_event("user", "lost race")

    with pytest.raises(SessionConflictError):
        await manager.update("s", interfere, retries=2)
    assert len(manager.requests) == 6  # 3 attempts, each losing to one interfering save


async def test_with_options_gives_a_new_manager_on_the_same_store() -> None:
    manager = MemorySessionManager("memory://shared-with-options")
    other = manager.with_options(namespace="b")
    assert other.options.namespace == "b"
    await manager.create("s")
    assert await other.get("s") is None
    assert await manager.with_options().get("s") is not None


async def test_a_closed_manager_refuses_calls_and_close_is_idempotent() -> None:
    manager = MemorySessionManager()
    async with manager:
        await manager.create("s")
    await manager.close()
    with pytest.raises(ManagerClosedError):
        await manager.get("s")
