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

from ._base import SuiteBase, snapshot


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
        assert _contents(stored) == ["e0", "e1", "e2", "e3", "e4"]
        assert stored is not None
        assert [e.id for e in stored.events] == [e.id for e in session.events]
        await self.check_positions(manager, session.session_id, 5)

    async def test_save_removes_events_from_end(self, manager: SessionManager) -> None:
        """Events removed from the end of a loaded session are removed from storage."""
        session = await self.session_with_events(manager, 5)
        del session.events[3:]
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == ["e0", "e1", "e2"]
        await self.check_positions(manager, session.session_id, 3)
        session.add_event("user", "after truncation")
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == [
            "e0",
            "e1",
            "e2",
            "after truncation",
        ]
        await self.check_positions(manager, session.session_id, 4)

    async def test_save_rewrites_edited_events(self, manager: SessionManager) -> None:
        """An event edited with model_copy in the middle of the history is rewritten in place."""
        session = await self.session_with_events(manager, 5)
        session.events[1] = session.events[1].model_copy(update={"content": "edited"})
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["e0", "edited", "e2", "e3", "e4"]
        assert stored is not None
        assert [e.id for e in stored.events] == [e.id for e in session.events]
        await self.check_positions(manager, session.session_id, 5)

    async def test_save_rewrites_compacted_history(self, manager: SessionManager) -> None:
        """Replacing the history with a summary (compaction) rewrites the list atomically."""
        session = await self.session_with_events(manager, 8)
        summary = Event(author="system", content="summary of e0..e5")
        session.events = [summary, *session.events[6:]]
        await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert _contents(stored) == ["summary of e0..e5", "e6", "e7"]
        assert stored is not None and stored.events[0].id == summary.id
        await self.check_positions(manager, session.session_id, 3)

    async def test_save_clears_events(self, manager: SessionManager) -> None:
        """Clearing the events of a loaded session stores an empty history."""
        session = await self.session_with_events(manager, 4)
        session.events.clear()
        await manager.save(session)
        assert _contents(await self.readback(manager, session.session_id)) == []
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
        assert stored is not None
        assert stored.state == {"step": 2, "added": {"x": [None]}}
        assert stored.updated_at == created.updated_at
        assert stored.updated_at > stored.created_at
        assert stored.created_at == created.created_at

    async def test_save_advances_version(self, manager: SessionManager) -> None:
        """Each save() advances the stored version, and the saved object's version with it."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        assert session.version == 1
        await manager.save(session)
        assert session.version == 2
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.version == 2

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
        assert _contents(stored) == ["e0", "second"]
        assert stored is not None and stored.state == {"n": 3}
        assert stored.version == session.version

    async def test_save_never_changes_owner_or_created_at(self, manager: SessionManager) -> None:
        """A save keeps the stored user_id and created_at whatever the copy says."""
        session_id, owner = self.new_id(), self.new_user()
        session = await manager.create(session_id, owner)
        original_created = session.created_at
        session.user_id = self.new_user()
        session.created_at = datetime(2001, 1, 1, tzinfo=timezone.utc)
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.user_id == owner
        assert stored.created_at == original_created

    async def test_save_stale_copy_raises_conflict(self, manager: SessionManager) -> None:
        """Saving a stale copy raises SessionConflictError and writes nothing."""
        session = await self.session_with_events(manager, 2)
        stale = await manager.get(session.session_id)
        assert stale is not None
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
        assert snapshot(await self.readback(manager, session.session_id)) == before

    async def test_save_copy_of_earlier_life_raises_conflict(self, manager: SessionManager) -> None:
        """A copy loaded from an earlier life of its id (deleted or expired, then created or
        restored again) is stale even where its version equals the new life's: its save
        raises SessionConflictError and writes nothing.

        On the kit's frozen clock, so the lives' ``created_at`` are equal too: the version
        and the creation time alone cannot tell them apart.
        """
        frozen = await self.frozen(manager)

        async def refused(store: SessionManager, old: Session, now: Session) -> None:
            assert old.version == now.version  # the case a version check alone misses
            before = snapshot(await self.readback(store, now.session_id))
            old.add_event("user", "from the earlier life")
            old.state["earlier"] = True
            with pytest.raises(SessionConflictError):
                await store.save(old)
            old.events.clear()  # a rewriting save must not land either
            with pytest.raises(SessionConflictError):
                await store.save(old)
            assert snapshot(await self.readback(store, now.session_id)) == before
            # The new life's own copy still saves: only the old one is refused.
            now.add_event("user", "current life")
            await store.save(now)
            stored = await self.readback(store, now.session_id)
            assert _contents(stored) == [event.content for event in now.events]

        # Deleted, then created again: both at version 1.
        session_id = self.new_id()
        old = await frozen.create(session_id, state={"life": 1})
        assert await frozen.delete(session_id) is True
        await refused(frozen, old, await frozen.create(session_id, state={"life": 2}))

        # Deleted after a save, created again and saved once: both at version 2.
        session_id = self.new_id()
        first = await frozen.create(session_id)
        first.add_event("user", "first life")
        await frozen.save(first)
        saved_copy = await frozen.get(session_id)
        assert saved_copy is not None
        assert await frozen.delete(session_id) is True
        now = await frozen.create(session_id)
        now.add_event("user", "second life")
        await frozen.save(now)
        await refused(frozen, saved_copy, now)

        # Deleted, then restored from a copy at the same version (an import).
        session_id = self.new_id()
        await frozen.create(session_id)
        loaded_copy = await frozen.get(session_id)
        exported = await frozen.get(session_id)
        assert loaded_copy is not None and exported is not None
        assert await frozen.delete(session_id) is True
        await refused(frozen, loaded_copy, await frozen.restore(exported))

        # Expired, then created again.
        if manager.capabilities.ttl:
            expiring = await self.frozen(manager, ttl=60.0)
            session_id = self.new_id()
            old = await expiring.create(session_id)
            self.clock.advance(61.0)
            now = await expiring.create(session_id)
            assert old.created_at != now.created_at  # the clock moved: still refused
            await refused(expiring, old, now)

    async def test_save_deleted_session_raises_not_found(self, manager: SessionManager) -> None:
        """Saving a session that was deleted raises SessionNotFoundError and recreates nothing."""
        session = await self.session_with_events(manager, 2)
        assert await manager.delete(session.session_id) is True
        session.add_event("user", "into the void")
        with pytest.raises(SessionNotFoundError):
            await manager.save(session)
        assert await self.readback(manager, session.session_id) is None

    async def test_save_never_created_raises_not_found(self, manager: SessionManager) -> None:
        """Saving a hand-built session that was never created raises SessionNotFoundError."""
        session = Session(session_id=self.new_id())
        session.add_event("user", "hello")
        with pytest.raises(SessionNotFoundError):
            await manager.save(session)
        assert await self.readback(manager, session.session_id) is None

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
        assert snapshot(await self.readback(manager, session.session_id)) == before
        await self.check_positions(manager, session.session_id, 3)

    async def test_save_partial_load_appends_after_full_history(
        self, manager: SessionManager
    ) -> None:
        """Events appended to a last_events load land after the full stored history."""
        session = await self.session_with_events(manager, 6)
        window = await manager.get(session.session_id, last_events=2)
        assert window is not None
        window.add_event("user", "e6")
        window.add_event("user", "e7")
        await manager.save(window)
        window.add_event("user", "e8")
        await manager.save(window)
        assert _contents(await self.readback(manager, session.session_id)) == [
            f"e{i}" for i in range(9)
        ]
        await self.check_positions(manager, session.session_id, 9)

    async def test_save_partial_load_removes_from_end(self, manager: SessionManager) -> None:
        """Events removed from the end of a last_events load are removed from the full history."""
        session = await self.session_with_events(manager, 6)
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None
        del window.events[1:]
        await manager.save(window)
        assert _contents(await self.readback(manager, session.session_id)) == [
            "e0",
            "e1",
            "e2",
            "e3",
        ]
        await self.check_positions(manager, session.session_id, 4)

    async def test_save_partial_load_replacing_raises_partial_error(
        self, manager: SessionManager
    ) -> None:
        """Replacing events of a last_events load raises PartialSessionError; writes nothing."""
        session = await self.session_with_events(manager, 6)
        before = snapshot(await self.readback(manager, session.session_id))
        window = await manager.get(session.session_id, last_events=3)
        assert window is not None
        window.events[0] = window.events[0].model_copy(update={"content": "edited"})
        window.state["x"] = 1
        with pytest.raises(PartialSessionError):
            await manager.save(window)
        assert snapshot(await self.readback(manager, session.session_id)) == before

    async def test_save_keeps_event_timestamps(self, manager: SessionManager) -> None:
        """Saved events keep the timestamps they were given, however old."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        when = datetime.now(timezone.utc) - timedelta(days=400)
        session.events.append(Event(author="user", content="old", timestamp=when))
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None and stored.events[0].timestamp == when
