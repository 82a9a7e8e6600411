"""A change made to a Session while one of its writes is in flight (another task adding
an event, say) is never taken for stored: it stays a change, and the next save sends it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import agentsessions
import pytest
import pytest_asyncio
from agentsessions import BackendUnavailableError, Event, SessionManager


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


async def _while_in_flight(call: Any, change: Callable[[], None], gate: asyncio.Event) -> Any:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)  # the call is now waiting inside the backend
    change()
    gate.set()
    return await asyncio.wait_for(task, 5)


def _texts(events: list[Event]) -> list[Any]:
    return [event.content for event in events]


async def test_an_event_added_while_a_save_is_in_flight_goes_in_the_next_save(
    manager: SessionManager,
) -> None:
    session = await manager.create("s")
    session.add_event("user", "one")
    gate = asyncio.Event()
    _held(manager, "_save", gate)
    await _while_in_flight(manager.save(session), lambda: session.add_event("user", "two"), gate)
    del manager._save  # type: ignore[attr-defined]  # the class's own again
    assert _texts((await manager.get("s")).events) == ["one"]  # what that save sent
    await manager.save(session)
    assert _texts((await manager.get("s")).events) == ["one", "two"]


async def test_an_event_removed_while_a_save_is_in_flight_is_removed_by_the_next(
    manager: SessionManager,
) -> None:
    session = await manager.create("s")
    session.add_event("user", "one")
    session.add_event("user", "two")
    gate = asyncio.Event()
    _held(manager, "_save", gate)
    await _while_in_flight(manager.save(session), lambda: session.events.pop(0), gate)
    del manager._save  # type: ignore[attr-defined]
    await manager.save(session)
    assert _texts((await manager.get("s")).events) == ["two"]


async def test_a_failed_save_leaves_its_changes_and_the_ones_made_meanwhile(
    manager: SessionManager,
) -> None:
    session = await manager.create("s")
    session.add_event("user", "one")
    gate = asyncio.Event()
    _held(manager, "_save", gate, fail=True)
    with pytest.raises(BackendUnavailableError):
        await _while_in_flight(
            manager.save(session), lambda: session.add_event("user", "two"), gate
        )
    del manager._save  # type: ignore[attr-defined]
    await manager.save(session)
    assert _texts((await manager.get("s")).events) == ["one", "two"]


async def test_an_event_added_while_a_compaction_is_in_flight_is_kept_unsaved(
    manager: SessionManager,
) -> None:
    session = await manager.create("s")
    for text in ("a", "b", "c"):
        session.add_event("user", text)
    await manager.save(session)
    gate = asyncio.Event()
    _held(manager, "_compact", gate)
    summary = Event(author="summary", content="a+b")
    await _while_in_flight(
        manager.compact(session, session.events[1].id, [summary]),
        lambda: session.add_event("user", "d"),
        gate,
    )
    assert _texts(session.events) == ["a+b", "c", "d"]
    assert _texts((await manager.get("s")).events) == ["a+b", "c"]
    await manager.save(session)
    assert _texts((await manager.get("s")).events) == ["a+b", "c", "d"]


async def test_an_event_added_while_a_rewind_is_in_flight_is_kept_unsaved(
    manager: SessionManager,
) -> None:
    session = await manager.create("s")
    for text in ("a", "b", "c"):
        session.add_event("user", text)
    await manager.save(session)
    gate = asyncio.Event()
    _held(manager, "_rewind", gate)
    await _while_in_flight(
        manager.rewind(session, session.events[0].id),
        lambda: session.add_event("user", "d"),
        gate,
    )
    assert _texts(session.events) == ["a", "d"]
    assert _texts((await manager.get("s")).events) == ["a"]
    await manager.save(session)
    assert _texts((await manager.get("s")).events) == ["a", "d"]
