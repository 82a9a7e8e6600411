"""A change made to a Session while one of its writes is in flight (another task adding
an event, say) is never taken for stored: it stays a change, and the next save sends it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import agentsessions
import pytest
import pytest_asyncio
from agentsessions import BackendUnavailableError, Event, Session, SessionManager


@pytest_asyncio.fixture
async def manager() -> AsyncIterator[SessionManager]:
    async with agentsessions.connect("memory://") as found:
        yield found


def _held(manager: SessionManager, name: str, gate: asyncio.Event, fail: bool = False) -> None:
    """Make the backend's *name* wait for *gate* (a write in flight), then run (or fail)."""
    original = getattr(manager, name)

    async def held(*args: Any, **kwargs: Any) -> Any:
        await asyncio.wait_for(gate.wait(), 5)
        if fail:
            raise BackendUnavailableError("memory://", "refused while held")
        return await original(*args, **kwargs)

    setattr(manager, name, held)


async def _while_in_flight(call: Any, change: Callable[[], object], gate: asyncio.Event) -> Any:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)  # the call is now waiting inside the backend
    change()
    gate.set()
    return await asyncio.wait_for(task, 5)


async def _three_saved(manager: SessionManager, held: str) -> tuple[Session, asyncio.Event]:
    """A stored session of events "a", "b", "c", and the gate that holds the backend's *held*."""
    session = await manager.create("s")
    for text in ("a", "b", "c"):
        session.add_event("user", text)
    await manager.save(session)
    gate = asyncio.Event()
    _held(manager, held, gate)
    return session, gate


def _texts(events: list[Event]) -> list[Any]:
    return [event.content for event in events]


async def _stored(manager: SessionManager) -> list[Any]:
    found = await manager.get("s")
    assert found is not None
    return _texts(found.events)


async def _saving(
    manager: SessionManager, *texts: str, fail: bool = False
) -> tuple[Session, asyncio.Event]:
    """A new session holding unsaved events *texts*, and the gate that holds its save."""
    session = await manager.create("s")
    for text in texts:
        session.add_event("user", text)
    gate = asyncio.Event()
    _held(manager, "_save", gate, fail=fail)
    return session, gate


async def test_an_event_added_while_a_save_is_in_flight_goes_in_the_next_save(
    manager: SessionManager,
) -> None:
    session, gate = await _saving(manager, "one")
    await _while_in_flight(manager.save(session), lambda: session.add_event("user", "two"), gate)
    del manager._save  # the class's own again
    assert await _stored(manager) == ["one"]  # what that save sent
    await manager.save(session)
    assert await _stored(manager) == ["one", "two"]


async def test_an_event_removed_while_a_save_is_in_flight_is_removed_by_the_next(
    manager: SessionManager,
) -> None:
    session, gate = await _saving(manager, "one", "two")
    await _while_in_flight(manager.save(session), lambda: session.events.pop(0), gate)
    del manager._save
    await manager.save(session)
    assert await _stored(manager) == ["two"]


async def test_a_failed_save_leaves_its_changes_and_the_ones_made_meanwhile(
    manager: SessionManager,
) -> None:
    session, gate = await _saving(manager, "one", fail=True)
    with pytest.raises(BackendUnavailableError):
        await _while_in_flight(
            manager.save(session), lambda: session.add_event("user", "two"), gate
        )
    del manager._save
    await manager.save(session)
    assert await _stored(manager) == ["one", "two"]


async def test_an_event_added_while_a_compaction_is_in_flight_is_kept_unsaved(
    manager: SessionManager,
) -> None:
    session, gate = await _three_saved(manager, "_compact")
    summary = Event(author="summary", content="a+b")
    await _while_in_flight(
        manager.compact(session, session.events[1].id, [summary]),
        lambda: session.add_event("user", "d"),
        gate,
    )
    assert _texts(session.events) == ["a+b", "c", "d"]
    assert await _stored(manager) == ["a+b", "c"]
    await manager.save(session)
    assert await _stored(manager) == ["a+b", "c", "d"]


async def test_an_event_added_while_a_rewind_is_in_flight_is_kept_unsaved(
    manager: SessionManager,
) -> None:
    session, gate = await _three_saved(manager, "_rewind")
    await _while_in_flight(
        manager.rewind(session, session.events[0].id),
        lambda: session.add_event("user", "d"),
        gate,
    )
    assert _texts(session.events) == ["a", "d"]
    assert await _stored(manager) == ["a"]
    await manager.save(session)
    assert await _stored(manager) == ["a", "d"]
