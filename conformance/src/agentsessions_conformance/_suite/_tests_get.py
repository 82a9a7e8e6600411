"""get() and get_or_create(): absent is None, results are detached, last_events windows."""

from __future__ import annotations

import asyncio

import pytest
from agentsessions import Event, SessionManager, SessionOwnershipError

from ._base import SuiteBase, snapshot


class GetTests(SuiteBase):
    async def test_get_returns_none_when_absent(self, manager: SessionManager) -> None:
        """get() of an id never stored returns None (and stores nothing)."""
        session_id = self.new_id()
        assert await manager.get(session_id) is None
        assert await manager.get(session_id, user_id=self.new_user()) is None
        assert await manager.get(session_id, last_events=3) is None
        assert await self.readback(manager, session_id) is None

    async def test_get_returns_detached_copy(self, manager: SessionManager) -> None:
        """Mutating a session returned by get() changes nothing stored until save()."""
        session = await self.session_with_events(manager, 2)
        session.state["mutated"] = {"deep": [1]}
        session.events.append(Event(author="user", content="unsaved"))
        session.events[0] = session.events[0].model_copy(update={"content": "edited"})
        session.user_id = "someone-else"
        again = await manager.get(session.session_id)
        assert again is not None
        assert again.state == {}
        assert [e.content for e in again.events] == ["e0", "e1"]
        assert again.user_id is None
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == ["e0", "e1"]

    async def test_get_twice_gives_independent_objects(self, manager: SessionManager) -> None:
        """Two get() calls return independent objects: changing one does not change the other."""
        session_id = self.new_id()
        created = await manager.create(session_id, state={"list": [1], "map": {"a": 1}})
        created.add_event("user", {"text": "hi"})
        await manager.save(created)
        first = await manager.get(session_id)
        second = await manager.get(session_id)
        assert first is not None and second is not None
        assert first is not second
        assert first.state is not second.state
        assert first.events is not second.events
        first.state["list"].append(2)
        first.state["map"]["b"] = 2
        first.events.append(Event(author="user", content="only in first"))
        assert second.state == {"list": [1], "map": {"a": 1}}
        assert len(second.events) == 1

    async def test_mutating_after_save_changes_nothing_stored(
        self, manager: SessionManager
    ) -> None:
        """Mutating the object passed to save() afterwards changes nothing stored."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        session.state["cart"] = {"items": ["apple"]}
        session.add_event("user", {"parts": ["x"]})
        await manager.save(session)
        expected = snapshot(await self.readback(manager, session_id))
        session.state["cart"]["items"].append("pear")
        session.add_event("user", "after save")
        session.state["new"] = 1
        assert snapshot(await self.readback(manager, session_id)) == expected
        again = await manager.get(session_id)
        assert again is not None and again.state == {"cart": {"items": ["apple"]}}

    async def test_get_last_events_loads_newest(self, manager: SessionManager) -> None:
        """get(last_events=N) loads only the newest N events, oldest of them first."""
        session = await self.session_with_events(manager, 10)
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None
        assert [e.content for e in window.events] == ["e7", "e8", "e9"]
        assert [e.id for e in window.events] == [e.id for e in session.events[-3:]]
        assert window.is_partial
        assert window.first_event_position == 7
        assert window.version == session.version
        assert window.state == session.state

    async def test_get_last_events_zero(self, manager: SessionManager) -> None:
        """get(last_events=0) loads no events but the rest of the session."""
        session = await self.session_with_events(manager, 4)
        window = await manager.get(session.session_id, last_events=0)
        assert window is not None
        assert window.events == []
        assert window.version == session.version
        assert window.first_event_position == 4

    async def test_get_last_events_larger_than_history(self, manager: SessionManager) -> None:
        """get(last_events=N) with N beyond the history loads every event."""
        session = await self.session_with_events(manager, 6)
        # 10 is less than twice the history: a naive events[count - N:] slice goes wrong.
        for last in (10, 50):
            window = await manager.get(session.session_id, last_events=last)
            assert window is not None
            assert [e.content for e in window.events] == [f"e{i}" for i in range(6)]
            assert window.first_event_position == 0

    async def test_get_with_other_user_raises_ownership(self, manager: SessionManager) -> None:
        """get(user_id=...) of a session owned by another user raises SessionOwnershipError."""
        session_id, owner = self.new_id(), self.new_user()
        await manager.create(session_id, owner)
        with pytest.raises(SessionOwnershipError):
            await manager.get(session_id, user_id=self.new_user())
        mine = await manager.get(session_id, user_id=owner)
        assert mine is not None and mine.user_id == owner
        anyone = await manager.get(session_id)
        assert anyone is not None and anyone.user_id == owner

    async def test_get_or_create_creates_once_under_race(self, manager: SessionManager) -> None:
        """20 concurrent get_or_create() calls all get the same session, created once."""
        session_id, user = self.new_id(), self.new_user()
        results = await asyncio.gather(
            *(manager.get_or_create(session_id, user) for _ in range(20))
        )
        assert {s.version for s in results} == {1}
        assert len({s.created_at for s in results}) == 1, "the session was created more than once"
        assert {s.user_id for s in results} == {user}
        page = await manager.list_sessions(user_id=user)
        assert [item.session_id for item in page.items] == [session_id]

    async def test_get_or_create_returns_existing(self, manager: SessionManager) -> None:
        """get_or_create() of a stored session returns it as stored, without resetting it."""
        session = await self.session_with_events(manager, 3)
        got = await manager.get_or_create(session.session_id)
        assert snapshot(got) == snapshot(session)

    async def test_get_or_create_enforces_ownership(self, manager: SessionManager) -> None:
        """get_or_create() with another user's id raises SessionOwnershipError."""
        session_id, owner = self.new_id(), self.new_user()
        await manager.create(session_id, owner)
        with pytest.raises(SessionOwnershipError):
            await manager.get_or_create(session_id, self.new_user())
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.user_id == owner
