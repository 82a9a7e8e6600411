"""compact(): a prefix of the history replaced atomically, without reading it back.

Proved through storage (`raw_inventory`) as well as through reads: a backend that hides
the replaced events from reads but leaves their rows behind keeps data the application
compacted away, and one that forgets its archive loses what it was asked to keep.
"""

from __future__ import annotations

import pytest
from agentsessions import (
    Event,
    InvalidInputError,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
)

from ._base import SuiteBase, snapshot

#: Events of the history a clause compacts: more than a first batch of any engine.
HISTORY = 40
#: Events each clause keeps after the cut.
KEPT = 5


def _summary(text: str = "summary") -> Event:
    return Event(author="summarizer", content={"summary": text}, metadata={"compaction": True})


class CompactionTests(SuiteBase):
    async def _compactable(self, manager: SessionManager, count: int = HISTORY) -> str:
        self.require(manager, "compaction")
        session = await self.session_with_events(manager, count, user_id=self.new_user())
        session.state["plan"] = ["keep", "me"]
        await manager.save(session)
        return session.session_id

    async def test_compact_replaces_the_prefix(self, manager: SessionManager) -> None:
        """compact() on a tail-loaded session replaces every event up to the cut with the
        replacement, keeps the rest in order, and later tail reads, saves and listings see
        exactly the compacted history, with its events at positions 0..n-1 in storage."""
        for space in await self.namespaced(manager):
            session_id = await self._compactable(space)
            tail = await space.get(session_id, last_events=KEPT + 1)
            assert tail is not None
            before = await self.readback(space, session_id)
            assert before is not None
            summary = _summary()
            await space.compact(tail, tail.events[0].id, [summary])
            kept = [f"e{index}" for index in range(HISTORY - KEPT, HISTORY)]
            assert [e.content for e in tail.events] == [summary.content, *kept]
            assert tail.version == before.version + 1
            assert not tail.is_partial
            stored = await self.readback(space, session_id)
            assert stored is not None
            assert snapshot(stored) == snapshot(tail), "the stored session is not the compacted one"
            assert stored.state == before.state and stored.user_id == before.user_id
            assert stored.created_at == before.created_at
            await self.check_positions(space, session_id, KEPT + 1)
            last = await self.readback(space, session_id, last_events=3)
            assert last is not None
            assert [e.content for e in last.events] == kept[-3:]
            assert last.first_event_position == KEPT + 1 - 3
            [summary_item] = [s for s in await self.list_all(space) if s.session_id == session_id]
            assert summary_item.event_count == KEPT + 1
            assert summary_item.version == tail.version
            # The compacted copy saves on (append, then truncate), and so does a tail load.
            tail.add_event("user", "after")
            await space.save(tail)
            fresh = await space.get(session_id, last_events=2)
            assert fresh is not None
            fresh.add_event("user", "tail")
            await space.save(fresh)
            del fresh.events[-1:]
            await space.save(fresh)
            stored = await self.readback(space, session_id)
            assert stored is not None
            assert [e.content for e in stored.events] == [summary.content, *kept, "after"]
            await self.check_positions(space, session_id, KEPT + 2)

    async def test_compact_twice_and_rewrite(self, manager: SessionManager) -> None:
        """A compacted session compacts again (through its summary or past it) and takes a
        full rewrite; positions stay 0..n-1 and reads agree with what was written."""
        session_id = await self._compactable(manager)
        session = await manager.get(session_id)
        assert session is not None
        await manager.compact(session, session.events[9].id, [_summary("one"), _summary("two")])
        assert len(session.events) == HISTORY - 10 + 2
        await self.check_positions(manager, session_id, HISTORY - 8)
        tail = await manager.get(session_id, last_events=4)
        assert tail is not None
        await manager.compact(tail, tail.events[0].id, [_summary("three")])
        await self.check_positions(manager, session_id, 4)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == [
            {"summary": "three"},
            *[f"e{index}" for index in range(HISTORY - 3, HISTORY)],
        ]
        stored.events[1] = stored.events[1].model_copy(update={"content": "rewritten"})
        await manager.save(stored)
        again = await self.readback(manager, session_id)
        assert again is not None
        assert snapshot(again) == snapshot(stored)
        await self.check_positions(manager, session_id, 4)
        # No replacement at all: the prefix is simply dropped.
        await manager.compact(again, again.events[1].id, [])
        assert [e.content for e in again.events] == [f"e{HISTORY - 2}", f"e{HISTORY - 1}"]
        await self.check_positions(manager, session_id, 2)
        assert snapshot(await self.readback(manager, session_id)) == snapshot(again)

    async def test_compact_archives_only_when_asked(self, manager: SessionManager) -> None:
        """Without archive=True the replaced events are gone from storage; with it they are
        kept in the archive (one per replaced event, read back in order) and erased with
        the session."""
        for space in await self.namespaced(manager):
            session_id = await self._compactable(space)
            session = await space.get(session_id, last_events=HISTORY - 10)
            assert session is not None
            await space.compact(session, session.events[0].id, [_summary()])
            found = await self.inventory(space, session_id)
            assert found.archived == 0, f"nothing was to be archived, storage holds {found}"
            assert await space.archived_events(session_id) == []
            replaced = HISTORY - (HISTORY - 10) + 1
            await self.check_positions(space, session_id, HISTORY - replaced + 1)
            full = await space.get(session_id)
            assert full is not None
            first_batch = full.events[:3]
            await space.compact(full, full.events[2].id, [_summary("again")], archive=True)
            found = await self.inventory(space, session_id)
            assert found.archived == 3, f"3 events were to be archived, storage holds {found}"
            assert await space.archived_events(session_id) == first_batch
            second = await space.get(session_id, last_events=3)
            assert second is not None
            doomed = list(await self._head(space, session_id, len(full.events) - 2))
            await space.compact(second, second.events[0].id, [_summary("third")], archive=True)
            archived = await space.archived_events(session_id)
            assert archived == [*first_batch, *doomed], "the archive lost or reordered events"
            assert (await self.inventory(space, session_id)).archived == len(archived)
            assert await space.delete(session_id) is True
            await self.check_erased(space, session_id, "delete() of a compacted session")
            assert await space.archived_events(session_id) == []

    async def _head(self, manager: SessionManager, session_id: str, count: int) -> list[Event]:
        session = await manager.get(session_id)
        assert session is not None
        return session.events[:count]

    async def test_compact_is_version_checked(self, manager: SessionManager) -> None:
        """compact() from a stale copy raises SessionConflictError and writes nothing; a copy
        loaded before a compaction cannot save over it."""
        session_id = await self._compactable(manager)
        first = await manager.get(session_id, last_events=KEPT)
        second = await manager.get(session_id, last_events=KEPT)
        assert first is not None and second is not None
        first.add_event("user", "landed first")
        await manager.save(first)
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionConflictError):
            await manager.compact(second, second.events[0].id, [_summary()], archive=True)
        assert snapshot(await self.readback(manager, session_id)) == before
        found = await self.inventory(manager, session_id)
        assert sorted(found.events) == list(range(HISTORY + 1)) and found.archived == 0
        assert await manager.archived_events(session_id) == []
        fresh = await manager.get(session_id, last_events=KEPT)
        stale = await manager.get(session_id, last_events=KEPT)
        assert fresh is not None and stale is not None
        await manager.compact(first, first.events[0].id, [_summary()])
        fresh.add_event("user", "lost?")
        with pytest.raises(SessionConflictError):
            await manager.save(fresh)
        with pytest.raises(SessionConflictError):
            await manager.compact(stale, stale.events[1].id, [_summary()])
        assert snapshot(await self.readback(manager, session_id)) == snapshot(first)

    async def test_compact_copy_of_earlier_life_raises_conflict(
        self, manager: SessionManager
    ) -> None:
        """compact() from a copy of an earlier life of its id (deleted, then created again
        and saved to the same version) raises SessionConflictError and writes nothing."""
        self.require(manager, "compaction")
        session_id = self.new_id()
        first = await manager.create(session_id)
        for index in range(3):
            first.add_event("user", f"first life {index}")
        await manager.save(first)
        old = await manager.get(session_id)
        assert old is not None
        assert await manager.delete(session_id) is True
        now = await manager.create(session_id)
        for index in range(3):
            now.add_event("user", f"second life {index}")
        await manager.save(now)
        assert old.version == now.version  # the case a version check alone misses
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionConflictError):
            await manager.compact(old, old.events[1].id, [_summary()], archive=True)
        assert snapshot(await self.readback(manager, session_id)) == before
        found = await self.inventory(manager, session_id)
        assert sorted(found.events) == [0, 1, 2] and found.archived == 0
        assert await manager.archived_events(session_id) == []
        # The new life's own copy still compacts.
        await manager.compact(now, now.events[1].id, [_summary()])
        assert snapshot(await self.readback(manager, session_id)) == snapshot(now)

    async def test_compact_refuses_bad_input(self, manager: SessionManager) -> None:
        """An unknown or unloaded through_event_id, a replacement that repeats a kept id or
        is not a list of events, unsaved event changes, and a deleted session: each raises
        a clear error and writes nothing."""
        session_id = await self._compactable(manager, 12)
        tail = await manager.get(session_id, last_events=4)
        assert tail is not None
        before = snapshot(await self.readback(manager, session_id))
        old = await manager.get(session_id)
        assert old is not None
        bad: list[tuple[str, list[Event], str]] = [
            ("no-such-event", [_summary()], "no-such-event"),
            (old.events[0].id, [_summary()], old.events[0].id),  # outside the loaded tail
            (tail.events[0].id, [tail.events[2]], "duplicate"),
        ]
        for through, replacement, named in bad:
            with pytest.raises(InvalidInputError, match=named):
                await manager.compact(tail, through, replacement)
        with pytest.raises(InvalidInputError):
            await manager.compact(tail, tail.events[0].id, ["not an event"])  # type: ignore[list-item]
        with pytest.raises(InvalidInputError):
            await manager.compact(tail, tail.events[0].id, _summary())  # type: ignore[arg-type]
        tail.add_event("user", "unsaved")
        with pytest.raises(InvalidInputError, match="unsaved"):
            await manager.compact(tail, tail.events[0].id, [_summary()])
        assert snapshot(await self.readback(manager, session_id)) == before
        await self.check_positions(manager, session_id, 12)
        assert await manager.delete(session_id) is True
        with pytest.raises(SessionNotFoundError):
            await manager.compact(old, old.events[0].id, [_summary()])
        assert await self.readback(manager, session_id) is None

    async def test_compact_keeps_pending_state_changes(self, manager: SessionManager) -> None:
        """compact() writes no state: the stored state stays as it was, and a change made to
        the session before compacting is written by the next save, on top of the compaction."""
        session_id = await self._compactable(manager, 10)
        session = await manager.get(session_id, last_events=3)
        assert session is not None
        session.state["pending"] = {"tool": "send", "approved": None}
        await manager.compact(session, session.events[0].id, [_summary()])
        stored = await self.readback(manager, session_id)
        assert stored is not None and "pending" not in stored.state
        assert session.state["pending"] == {"tool": "send", "approved": None}
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.state == {
            "plan": ["keep", "me"],
            "pending": {"tool": "send", "approved": None},
        }
        assert [e.content for e in stored.events] == [{"summary": "summary"}, "e8", "e9"]
