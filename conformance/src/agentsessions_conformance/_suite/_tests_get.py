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
        assert await manager.get(session_id) is None, (
            f"get({session_id!r}) of an id never stored must return None, found a session"
        )
        assert await manager.get(session_id, user_id=self.new_user()) is None, (
            f"get({session_id!r}, user_id=<some user>) of an id never stored must return None "
            "(not raise, not create), found a session"
        )
        assert await manager.get(session_id, last_events=3) is None, (
            f"get({session_id!r}, last_events=3) of an id never stored must return None, "
            "found a session"
        )
        assert await self.readback(manager, session_id) is None, (
            f"get() of an absent id must store nothing: a later get({session_id!r}) "
            "(read-back) found a session"
        )

    async def test_get_returns_detached_copy(self, manager: SessionManager) -> None:
        """Mutating a session returned by get() changes nothing stored until save()."""
        session = await self.session_with_events(manager, 2)
        session.state["mutated"] = {"deep": [1]}
        session.events.append(Event(author="user", content="unsaved"))
        session.events[0] = session.events[0].model_copy(update={"content": "edited"})
        session.user_id = "someone-else"
        again = await manager.get(session.session_id)
        assert again is not None, (
            f"get({session.session_id!r}) returned None: a session just saved must be found"
        )
        assert again.state == {}, (
            "get() must return a detached copy: mutating an earlier get()'s state without "
            f"save() must change nothing, yet a second get() returns state {again.state!r} "
            "instead of {}"
        )
        assert [e.content for e in again.events] == ["e0", "e1"], (
            "get() must return a detached copy: appending to and editing an earlier get()'s "
            "events without save() must change nothing, yet a second get() returns "
            f"{[e.content for e in again.events[:8]]!r} instead of ['e0', 'e1']"
        )
        assert again.user_id is None, (
            "get() must return a detached copy: setting an earlier get()'s user_id without "
            f"save() must change nothing, yet a second get() returns user_id {again.user_id!r} "
            "instead of None"
        )
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None: a session just saved "
            "must be found"
        )
        assert [e.content for e in stored.events] == ["e0", "e1"], (
            "mutating a session returned by get() must change nothing stored until save(): "
            f"expected ['e0', 'e1'], read back {[e.content for e in stored.events[:8]]!r}"
        )

    async def test_get_twice_gives_independent_objects(self, manager: SessionManager) -> None:
        """Two get() calls return independent objects: changing one does not change the other."""
        session_id = self.new_id()
        created = await manager.create(session_id, state={"list": [1], "map": {"a": 1}})
        created.add_event("user", {"text": "hi"})
        await manager.save(created)
        first = await manager.get(session_id)
        second = await manager.get(session_id)
        assert first is not None and second is not None, (
            f"get({session_id!r}) twice must find a session just saved both times: found "
            f"{'None' if first is None else 'a session'} and "
            f"{'None' if second is None else 'a session'}"
        )
        assert first is not second, (
            f"two get({session_id!r}) calls must return two independent objects, not the "
            "same Session object twice (a cache must hand out copies)"
        )
        assert first.state is not second.state, (
            f"two get({session_id!r}) calls must return independent objects: both share one "
            "state dict"
        )
        assert first.events is not second.events, (
            f"two get({session_id!r}) calls must return independent objects: both share one "
            "events list"
        )
        first.state["list"].append(2)
        first.state["map"]["b"] = 2
        first.events.append(Event(author="user", content="only in first"))
        assert second.state == {"list": [1], "map": {"a": 1}}, (
            "changing nested values in one get()'s state must not change another get()'s: "
            f"expected {{'list': [1], 'map': {{'a': 1}}}}, the second copy has {second.state!r} "
            "(nested lists or dicts are shared)"
        )
        assert len(second.events) == 1, (
            "appending to one get()'s events must not change another get()'s: expected 1 "
            f"event in the second copy, found {len(second.events)}"
        )

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
        assert snapshot(await self.readback(manager, session_id)) == expected, (
            "mutating the object passed to save() afterwards must change nothing stored (the "
            "backend must not keep a reference to it): expected the stored session to stay "
            f"version {expected and expected['version']} with "
            f"{expected and len(expected['events'])} events and state "
            f"{expected and expected['state']!r}, but what get() reads back now differs"
        )
        again = await manager.get(session_id)
        assert again is not None and again.state == {"cart": {"items": ["apple"]}}, (
            "mutating the object passed to save() afterwards must not change what the same "
            "manager's get() returns: expected state {'cart': {'items': ['apple']}}, found "
            f"{'no session' if again is None else repr(again.state)}"
        )

    async def test_get_last_events_loads_newest(self, manager: SessionManager) -> None:
        """get(last_events=N) loads only the newest N events, oldest of them first."""
        session = await self.session_with_events(manager, 10)
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None, (
            f"get({session.session_id!r}, last_events=3) returned None: a session just saved "
            "with 10 events must be found"
        )
        assert [e.content for e in window.events] == ["e7", "e8", "e9"], (
            "get(last_events=3) of e0..e9 must load only the newest 3 events, oldest first: "
            f"expected ['e7', 'e8', 'e9'], found {[e.content for e in window.events[:8]]!r}"
        )
        assert [e.id for e in window.events] == [e.id for e in session.events[-3:]], (
            "get(last_events=3) must return the newest 3 events with their stored ids: "
            f"expected {[e.id for e in session.events[-3:]]!r}, found "
            f"{[e.id for e in window.events[:8]]!r}"
        )
        assert window.is_partial, (
            "get(last_events=3) of a 10-event session must return a partial session: "
            f"is_partial is False (first_event_position={window.first_event_position})"
        )
        assert window.first_event_position == 7, (
            "get(last_events=3) of a 10-event session must report the position of its first "
            f"loaded event: expected first_event_position=7, found {window.first_event_position}"
        )
        assert window.version == session.version, (
            "get(last_events=3) must return the stored version like a full get(): expected "
            f"version {session.version}, found {window.version}"
        )
        assert window.state == session.state, (
            "get(last_events=3) must return the whole state like a full get(): expected "
            f"{session.state!r}, found {window.state!r}"
        )

    async def test_get_last_events_zero(self, manager: SessionManager) -> None:
        """get(last_events=0) loads no events but the rest of the session."""
        session = await self.session_with_events(manager, 4)
        window = await manager.get(session.session_id, last_events=0)
        assert window is not None, (
            f"get({session.session_id!r}, last_events=0) returned None: a session just saved "
            "with 4 events must be found"
        )
        assert window.events == [], (
            "get(last_events=0) must load no events: expected [], found "
            f"{len(window.events)} events {[e.content for e in window.events[:8]]!r}"
        )
        assert window.version == session.version, (
            "get(last_events=0) must still return the stored version: expected version "
            f"{session.version}, found {window.version}"
        )
        assert window.first_event_position == 4, (
            "get(last_events=0) of a 4-event session must report first_event_position=4 (the "
            f"end of the history), found {window.first_event_position}"
        )

    async def test_get_last_events_larger_than_history(self, manager: SessionManager) -> None:
        """get(last_events=N) with N beyond the history loads every event."""
        session = await self.session_with_events(manager, 6)
        # 10 is less than twice the history: a naive events[count - N:] slice goes wrong.
        for last in (10, 50):
            window = await manager.get(session.session_id, last_events=last)
            assert window is not None, (
                f"get({session.session_id!r}, last_events={last}) returned None: a session "
                "just saved with 6 events must be found"
            )
            assert [e.content for e in window.events] == [f"e{i}" for i in range(6)], (
                f"get(last_events={last}) of a 6-event session must load every event: "
                f"expected e0..e5, found {[e.content for e in window.events[:8]]!r}"
            )
            assert window.first_event_position == 0, (
                f"get(last_events={last}) of a 6-event session loads it all and must report "
                f"first_event_position=0, found {window.first_event_position}"
            )

    async def test_get_with_other_user_raises_ownership(self, manager: SessionManager) -> None:
        """get(user_id=...) of a session owned by another user raises SessionOwnershipError."""
        session_id, owner = self.new_id(), self.new_user()
        await manager.create(session_id, owner)
        with pytest.raises(SessionOwnershipError):
            await manager.get(session_id, user_id=self.new_user())
        mine = await manager.get(session_id, user_id=owner)
        assert mine is not None and mine.user_id == owner, (
            f"get({session_id!r}, user_id=<its owner>) must return the owner's session: "
            f"expected user_id {owner!r}, found "
            f"{'no session' if mine is None else repr(mine.user_id)}"
        )
        anyone = await manager.get(session_id)
        assert anyone is not None and anyone.user_id == owner, (
            f"get({session_id!r}) without a user_id must return the session with its owner: "
            f"expected user_id {owner!r}, found "
            f"{'no session' if anyone is None else repr(anyone.user_id)}"
        )

    async def test_get_or_create_creates_once_under_race(self, manager: SessionManager) -> None:
        """20 concurrent get_or_create() calls all get the same session, created once."""
        session_id, user = self.new_id(), self.new_user()
        results = await asyncio.gather(
            *(manager.get_or_create(session_id, user) for _ in range(20))
        )
        assert {s.version for s in results} == {1}, (
            "20 concurrent get_or_create() calls of a new id must all return the one session "
            f"created, at version 1: found versions {sorted({s.version for s in results})}"
        )
        assert len({s.created_at for s in results}) == 1, "the session was created more than once"
        assert {s.user_id for s in results} == {user}, (
            "20 concurrent get_or_create(sid, user) calls must all return the session owned "
            f"by {user!r}: found user_ids {sorted({str(s.user_id) for s in results})}"
        )
        page = await manager.list_sessions(user_id=user)
        assert [item.session_id for item in page.items] == [session_id], (
            "after 20 concurrent get_or_create() calls of one id, list_sessions(user_id=...) "
            f"must list exactly that session once: expected [{session_id!r}], found "
            f"{[item.session_id for item in page.items[:8]]!r}"
        )

    async def test_get_or_create_returns_existing(self, manager: SessionManager) -> None:
        """get_or_create() of a stored session returns it as stored, without resetting it."""
        session = await self.session_with_events(manager, 3)
        got = await manager.get_or_create(session.session_id)
        assert snapshot(got) == snapshot(session), (
            f"get_or_create({session.session_id!r}) of a stored session must return it as "
            f"stored, not reset: expected version {session.version} with "
            f"{[e.content for e in session.events]!r} and state {session.state!r}, found "
            f"version {got.version} with {[e.content for e in got.events[:8]]!r} and state "
            f"{got.state!r}"
        )

    async def test_get_or_create_enforces_ownership(self, manager: SessionManager) -> None:
        """get_or_create() with another user's id raises SessionOwnershipError."""
        session_id, owner = self.new_id(), self.new_user()
        await manager.create(session_id, owner)
        with pytest.raises(SessionOwnershipError):
            await manager.get_or_create(session_id, self.new_user())
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.user_id == owner, (
            "get_or_create() with another user's id must raise SessionOwnershipError and "
            f"leave the session as it was: expected user_id {owner!r}, read back "
            f"{'no session' if stored is None else repr(stored.user_id)}"
        )
