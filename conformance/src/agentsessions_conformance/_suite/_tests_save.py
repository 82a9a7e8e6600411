"""save(): writes exactly what changed, whole or not at all, only onto the version it read."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import (
    Event,
    PartialSessionError,
    Session,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
    SessionSerializationError,
)

from ._base import SuiteBase, pictured, snapshot


def _contents(session: Session | None) -> list[object]:
    assert session is not None, "the session is not stored"
    return [event.content for event in session.events]


class SaveTests(SuiteBase):
    async def test_save_appends_events(self, manager: SessionManager) -> None:
        """Events appended to a loaded session are appended to the stored history."""
        session = await self.session_with_events(manager, 3)
        session.add_event("assistant", "e3")
        session.add_event("user", "e4")
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["e0", "e1", "e2", "e3", "e4"], (
            "save() of a loaded 3-event session with 2 events appended must append them to "
            "the stored history: expected ['e0', 'e1', 'e2', 'e3', 'e4'], read back "
            f"{_contents(stored)[:8]!r}"
        )
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back after save()) returned None: a session "
            "just saved must be found"
        )
        assert [e.id for e in stored.events] == [e.id for e in session.events], (
            "save() must store appended events under their own ids: expected ids "
            f"{[e.id for e in session.events]!r}, read back {[e.id for e in stored.events]!r}"
        )
        await self.check_positions(manager, session.session_id, 5)

    async def test_save_removes_events_from_end(self, manager: SessionManager) -> None:
        """Events removed from the end of a loaded session are removed from storage."""
        session = await self.session_with_events(manager, 5)
        del session.events[3:]
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == ["e0", "e1", "e2"], (
            "save() of a loaded 5-event session with its last 2 events deleted must remove "
            "them from storage: expected ['e0', 'e1', 'e2'], but get() reads back a "
            "different history"
        )
        await self.check_positions(manager, session.session_id, 3)
        session.add_event("user", "after truncation")
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == [
            "e0",
            "e1",
            "e2",
            "after truncation",
        ], (
            "save() appending one event after a truncating save must land it right after "
            "the kept events: expected ['e0', 'e1', 'e2', 'after truncation'], but get() "
            "reads back a different history"
        )
        await self.check_positions(manager, session.session_id, 4)

    async def test_save_rewrites_edited_events(self, manager: SessionManager) -> None:
        """An event edited with model_copy in the middle of the history is rewritten in place."""
        session = await self.session_with_events(manager, 5)
        session.events[1] = session.events[1].model_copy(update={"content": "edited"})
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["e0", "edited", "e2", "e3", "e4"], (
            "save() of a session whose event 1 was replaced with model_copy() must rewrite "
            "that event in place: expected ['e0', 'edited', 'e2', 'e3', 'e4'], read back "
            f"{_contents(stored)[:8]!r}"
        )
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back after save()) returned None: a session "
            "just saved must be found"
        )
        assert [e.id for e in stored.events] == [e.id for e in session.events], (
            "save() of an edited event must keep every event id and its position: expected "
            f"ids {[e.id for e in session.events]!r}, read back "
            f"{[e.id for e in stored.events]!r}"
        )
        await self.check_positions(manager, session.session_id, 5)

    async def test_save_rewrites_compacted_history(self, manager: SessionManager) -> None:
        """Replacing the history with a summary (compaction) rewrites the list atomically."""
        session = await self.session_with_events(manager, 8)
        summary = Event(author="system", content="summary of e0..e5")
        session.events = [summary, *session.events[6:]]
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["summary of e0..e5", "e6", "e7"], (
            "save() of a session whose first 6 events were replaced by one summary event must "
            "store exactly the new list: expected ['summary of e0..e5', 'e6', 'e7'], read back "
            f"{_contents(stored)[:8]!r}"
        )
        assert stored is not None and stored.events[0].id == summary.id, (
            "save() of a compacted history must store the summary event under its own id: "
            f"expected {summary.id!r}, read back "
            f"{'no session' if stored is None else repr(stored.events[0].id)}"
        )
        await self.check_positions(manager, session.session_id, 3)

    async def test_save_clears_events(self, manager: SessionManager) -> None:
        """Clearing the events of a loaded session stores an empty history."""
        session = await self.session_with_events(manager, 4)
        session.events.clear()
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == [], (
            "save() of a loaded 4-event session after events.clear() must store an empty "
            "history, but get() still reads back events"
        )
        await self.check_positions(manager, session.session_id, 0)

    async def test_save_writes_state_and_updated_at(self, manager: SessionManager) -> None:
        """save() writes the state and a new updated_at; created_at stays."""
        session_id = self.new_id()
        created = await manager.create(session_id, state={"step": 1, "drop": True})
        await asyncio.sleep(0.002)  # updated_at must be able to move on coarse clocks
        created.state["step"] = 2
        del created.state["drop"]
        created.state["added"] = {"x": [None]}
        await manager.save(created)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after save()) returned None: a session just "
            "saved must be found"
        )
        assert stored.state == {"step": 2, "added": {"x": [None]}}, (
            "save() must store the whole new state (a key changed, one deleted, one added): "
            "expected {'step': 2, 'added': {'x': [None]}}, read back "
            f"{stored.state!r}"
        )
        assert stored.updated_at == created.updated_at, (
            "save() must store the updated_at it set on the saved object: expected "
            f"{created.updated_at.isoformat()}, read back {stored.updated_at.isoformat()}"
        )
        assert stored.updated_at > stored.created_at, (
            "save() must move updated_at past created_at: read back created_at "
            f"{stored.created_at.isoformat()} and updated_at {stored.updated_at.isoformat()}"
        )
        assert stored.created_at == created.created_at, (
            "save() must not change created_at: expected "
            f"{created.created_at.isoformat()}, read back {stored.created_at.isoformat()}"
        )

    async def test_save_advances_version(self, manager: SessionManager) -> None:
        """Each save() advances the stored version, and the saved object's version with it."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        assert session.version == 1, (
            f"create() must return a session at version 1, found version {session.version}"
        )
        await manager.save(session)
        assert session.version == 2, (
            "save() must bump the saved object's version by exactly one: expected version 2 "
            f"after one save of a new session, the object has {session.version}"
        )
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.version == 2, (
            "save() must bump the stored version by exactly one: expected version 2 after "
            "one save of a new session, read back "
            f"{'no session' if stored is None else f'version {stored.version}'}"
        )

    async def test_save_twice_from_same_object(self, manager: SessionManager) -> None:
        """Saving the same object twice in a row works: it tracks the version it wrote."""
        session = await self.session_with_events(manager, 1)
        session.add_event("user", "second")
        await manager.save(session)
        session.add_event("user", "third")
        session.state["n"] = 3
        await manager.save(session)
        session.events.pop()
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["e0", "second"], (
            "three save() calls in a row from one object (append, append with a state "
            "change, pop) must each land: expected ['e0', 'second'], read back "
            f"{_contents(stored)[:8]!r}"
        )
        assert stored is not None and stored.state == {"n": 3}, (
            "the state set by the second of three save() calls from one object must be "
            f"stored: expected {{'n': 3}}, read back "
            f"{'no session' if stored is None else repr(stored.state)}"
        )
        assert stored.version == session.version, (
            "after save() calls from one object, the stored version must be the version the "
            f"object tracks: expected {session.version}, read back {stored.version}"
        )

    async def test_save_never_changes_owner_or_created_at(self, manager: SessionManager) -> None:
        """A save keeps the stored user_id and created_at whatever the copy says."""
        session_id, owner = self.new_id(), self.new_user()
        session = await manager.create(session_id, owner)
        original_created = session.created_at
        session.user_id = self.new_user()
        session.created_at = datetime(2001, 1, 1, tzinfo=timezone.utc)
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after save()) returned None: a session just "
            "saved must be found"
        )
        assert stored.user_id == owner, (
            "save() must never change the stored owner, whatever the copy's user_id says: "
            f"expected user_id {owner!r}, read back {stored.user_id!r}"
        )
        assert stored.created_at == original_created, (
            "save() must never change the stored created_at, whatever the copy says: "
            f"expected {original_created.isoformat()}, read back "
            f"{stored.created_at.isoformat()}"
        )

    async def test_save_stale_copy_raises_conflict(self, manager: SessionManager) -> None:
        """Saving a stale copy raises SessionConflictError and writes nothing."""
        session = await self.session_with_events(manager, 2)
        stale = await manager.get(session.session_id)
        assert stale is not None, (
            f"get({session.session_id!r}) returned None: a session just saved must be found"
        )
        session.add_event("user", "winner")
        await manager.save(session)
        before = snapshot(await self.readback(manager, session.session_id))
        stale.add_event("user", "loser")
        stale.state["loser"] = True
        with pytest.raises(SessionConflictError):
            await manager.save(stale)
        del stale.events[0]  # a truncating stale save must not land either
        with pytest.raises(SessionConflictError):
            await manager.save(stale)
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "save() of a stale copy (appending, then truncating) must raise "
            "SessionConflictError and write nothing: expected the stored session to stay "
            f"{pictured(before)}, but what get() reads back now differs"
        )

    async def test_save_copy_of_earlier_life_raises_conflict(self, manager: SessionManager) -> None:
        """A copy loaded from an earlier life of its id (deleted or expired, then created or
        restored again) is stale even where its version equals the new life's: its save
        raises SessionConflictError and writes nothing.

        On the kit's frozen clock, so the lives' ``created_at`` are equal too: the version
        and the creation time alone cannot tell them apart.
        """
        frozen = await self.frozen(manager)

        async def refused(store: SessionManager, old: Session, now: Session) -> None:
            assert old.version == now.version, (  # the case a version check alone misses
                "kit self-check: the copy of the earlier life and the new life must be at the "
                f"same version for this clause, found {old.version} and {now.version}"
            )
            before = snapshot(await self.readback(store, now.session_id))
            old.add_event("user", "from the earlier life")
            old.state["earlier"] = True
            with pytest.raises(SessionConflictError):
                await store.save(old)
            old.events.clear()  # a rewriting save must not land either
            with pytest.raises(SessionConflictError):
                await store.save(old)
            assert snapshot(await self.readback(store, now.session_id)) == before, (
                "save() of a copy loaded from an earlier life of the id (appending, then "
                "rewriting) must raise SessionConflictError and write nothing into the new "
                f"life: expected the stored session to stay {pictured(before)}, but what "
                "get() reads back now differs"
            )
            # The new life's own copy still saves: only the old one is refused.
            now.add_event("user", "current life")
            await store.save(now)
            stored = await self.readback(store, now.session_id)
            assert _contents(stored) == [event.content for event in now.events], (
                "save() of the new life's own copy must still land after the old copy was "
                f"refused: expected {[event.content for event in now.events][:8]!r}, read "
                f"back {_contents(stored)[:8]!r}"
            )

        # Deleted, then created again: both at version 1.
        session_id = self.new_id()
        old = await frozen.create(session_id, state={"life": 1})
        assert await frozen.delete(session_id) is True, (
            f"delete({session_id!r}) of a session just created must return True"
        )
        await refused(frozen, old, await frozen.create(session_id, state={"life": 2}))

        # Deleted after a save, created again and saved once: both at version 2.
        session_id = self.new_id()
        first = await frozen.create(session_id)
        first.add_event("user", "first life")
        await frozen.save(first)
        saved_copy = await frozen.get(session_id)
        assert saved_copy is not None, (
            f"get({session_id!r}) returned None: a session just saved must be found"
        )
        assert await frozen.delete(session_id) is True, (
            f"delete({session_id!r}) of a session just saved must return True"
        )
        now = await frozen.create(session_id)
        now.add_event("user", "second life")
        await frozen.save(now)
        await refused(frozen, saved_copy, now)

        # Deleted, then restored from a copy at the same version (an import).
        session_id = self.new_id()
        await frozen.create(session_id)
        loaded_copy = await frozen.get(session_id)
        exported = await frozen.get(session_id)
        assert loaded_copy is not None and exported is not None, (
            f"get({session_id!r}) of a session just created must find it (twice): found "
            f"{'None' if loaded_copy is None else 'a session'} and "
            f"{'None' if exported is None else 'a session'}"
        )
        assert await frozen.delete(session_id) is True, (
            f"delete({session_id!r}) of a session just created must return True"
        )
        await refused(frozen, loaded_copy, await frozen.restore(exported))

        # Expired, then created again.
        if manager.capabilities.ttl:
            expiring = await self.frozen(manager, ttl=60.0)
            session_id = self.new_id()
            old = await expiring.create(session_id)
            self.clock.advance(61.0)
            now = await expiring.create(session_id)
            assert old.created_at != now.created_at, (  # the clock moved: still refused
                "create() of an id whose session expired 61 s ago (on the kit's frozen clock) "
                "must give the new life a new created_at: both lives have "
                f"{now.created_at.isoformat()}"
            )
            await refused(expiring, old, now)

    async def test_save_deleted_session_raises_not_found(self, manager: SessionManager) -> None:
        """Saving a session that was deleted raises SessionNotFoundError and recreates nothing."""
        session = await self.session_with_events(manager, 2)
        assert await manager.delete(session.session_id) is True, (
            f"delete({session.session_id!r}) of a session just saved must return True"
        )
        session.add_event("user", "into the void")
        with pytest.raises(SessionNotFoundError):
            await manager.save(session)
        assert await self.readback(manager, session.session_id) is None, (
            "save() of a deleted session must raise SessionNotFoundError and recreate "
            f"nothing: expected get({session.session_id!r}) to return None, found a session"
        )

    async def test_save_never_created_raises_not_found(self, manager: SessionManager) -> None:
        """Saving a hand-built session that was never created raises SessionNotFoundError."""
        session = Session(session_id=self.new_id())
        session.add_event("user", "hello")
        with pytest.raises(SessionNotFoundError):
            await manager.save(session)
        assert await self.readback(manager, session.session_id) is None, (
            "save() of a hand-built session that was never created must raise "
            f"SessionNotFoundError and store nothing: expected get({session.session_id!r}) "
            "to return None, found a session"
        )

    @pytest.mark.parametrize("where", ["state", "content", "metadata"])
    async def test_save_failing_writes_nothing(self, manager: SessionManager, where: str) -> None:
        """A save rejected for a non-JSON value leaves the stored session exactly as it was."""
        session = await self.session_with_events(manager, 3)
        session.state["ok"] = 1
        await manager.save(session)
        before = snapshot(await self.readback(manager, session.session_id))
        # A valid change in the same save (append, edit, state) must not land either.
        session.events[0] = session.events[0].model_copy(update={"content": "edited"})
        session.add_event("user", "valid")
        session.state["ok"] = 2
        bad = datetime.now(timezone.utc)
        if where == "state":
            session.state["bad"] = {"when": bad}
        elif where == "content":
            session.add_event("user", {"when": bad})
        else:
            session.add_event("user", "x", when=bad)
        with pytest.raises(SessionSerializationError):
            await manager.save(session)
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"a save() rejected for a non-JSON datetime in {where} must write nothing, not "
            "even the valid edit, append and state change of the same save: expected the "
            f"stored session to stay {pictured(before)}, but what get() reads back now "
            "differs"
        )
        await self.check_positions(manager, session.session_id, 3)

    async def test_save_partial_load_appends_after_full_history(
        self, manager: SessionManager
    ) -> None:
        """Events appended to a last_events load land after the full stored history."""
        session = await self.session_with_events(manager, 6)
        window = await manager.get(session.session_id, last_events=2)
        assert window is not None, (
            f"get({session.session_id!r}, last_events=2) returned None: a session just "
            "saved with 6 events must be found"
        )
        window.add_event("user", "e6")
        window.add_event("user", "e7")
        await manager.save(window)
        window.add_event("user", "e8")
        await manager.save(window)
        assert _contents(await self.readback(manager, session.session_id)) == [
            f"e{i}" for i in range(9)
        ], (
            "save() of a last_events=2 load of a 6-event session, twice, appending e6, e7 then "
            "e8, must append after the full stored history: expected e0..e8, but get() reads "
            "back a different history"
        )
        await self.check_positions(manager, session.session_id, 9)

    async def test_save_partial_load_removes_from_end(self, manager: SessionManager) -> None:
        """Events removed from the end of a last_events load are removed from the full history."""
        session = await self.session_with_events(manager, 6)
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None, (
            f"get({session.session_id!r}, last_events=3) returned None: a session just "
            "saved with 6 events must be found"
        )
        del window.events[1:]
        await manager.save(window)
        assert _contents(await self.readback(manager, session.session_id)) == [
            "e0",
            "e1",
            "e2",
            "e3",
        ], (
            "save() of a last_events=3 load of e0..e5 with its last 2 events (e4, e5) deleted "
            "must remove just those from the full history: expected ['e0', 'e1', 'e2', 'e3'], "
            "but get() reads back a different history"
        )
        await self.check_positions(manager, session.session_id, 4)

    async def test_save_partial_load_replacing_raises_partial_error(
        self, manager: SessionManager
    ) -> None:
        """Replacing events of a last_events load raises PartialSessionError; writes nothing."""
        session = await self.session_with_events(manager, 6)
        before = snapshot(await self.readback(manager, session.session_id))
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None, (
            f"get({session.session_id!r}, last_events=3) returned None: a session just "
            "saved with 6 events must be found"
        )
        window.events[0] = window.events[0].model_copy(update={"content": "edited"})
        window.state["x"] = 1
        with pytest.raises(PartialSessionError):
            await manager.save(window)
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "save() of a last_events load with a loaded event replaced must raise "
            "PartialSessionError and write nothing, not even the state change: expected the "
            f"stored session to stay {pictured(before)}, but what get() reads back now "
            "differs"
        )

    async def test_save_keeps_event_timestamps(self, manager: SessionManager) -> None:
        """Saved events keep the timestamps they were given, however old."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        when = datetime.now(timezone.utc) - timedelta(days=400)
        session.events.append(Event(author="user", content="old", timestamp=when))
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.events[0].timestamp == when, (
            "save() must keep the timestamp an event was given, even 400 days old: expected "
            f"{when.isoformat()}, read back "
            f"{'no session' if stored is None else stored.events[0].timestamp.isoformat()}"
        )
