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
            assert tail is not None, (
                f"get({session_id!r}, last_events={KEPT + 1}) returned None: a session just "
                f"saved with {HISTORY} events must be found"
            )
            before = await self.readback(space, session_id)
            assert before is not None, (
                f"get({session_id!r}) (read-back before compact) returned None: a session just "
                "saved must be found"
            )
            summary = _summary()
            await space.compact(tail, tail.events[0].id, [summary])
            kept = [f"e{index}" for index in range(HISTORY - KEPT, HISTORY)]
            assert [e.content for e in tail.events] == [summary.content, *kept], (
                f"compact(through_event_id=<id of e{HISTORY - KEPT - 1}>, [summary]) on a "
                f"{KEPT + 1}-event tail must leave the copy holding the summary, then "
                f"e{HISTORY - KEPT}..e{HISTORY - 1} in order: expected {KEPT + 1} events, found "
                f"{len(tail.events)}: {[e.content for e in tail.events[:8]]!r}"
            )
            assert tail.version == before.version + 1, (
                "compact() must bump the session's version by exactly one: expected version "
                f"{before.version + 1}, the compacted copy has {tail.version}"
            )
            assert not tail.is_partial, (
                "after compact() of a tail-loaded copy, the copy holds the whole compacted "
                "history and must no longer be partial: is_partial is True "
                f"(first_event_position={tail.first_event_position})"
            )
            stored = await self.readback(space, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back after compact) returned None: compaction must "
                "not lose the session"
            )
            assert snapshot(stored) == snapshot(tail), "the stored session is not the compacted one"
            assert stored.state == before.state and stored.user_id == before.user_id, (
                "compact() must leave state and user_id as they were: expected state "
                f"{before.state!r} and user_id {before.user_id!r}, read back state "
                f"{stored.state!r} and user_id {stored.user_id!r}"
            )
            assert stored.created_at == before.created_at, (
                "compact() must not change created_at: expected "
                f"{before.created_at.isoformat()}, read back {stored.created_at.isoformat()}"
            )
            await self.check_positions(space, session_id, KEPT + 1)
            last = await self.readback(space, session_id, last_events=3)
            assert last is not None, (
                f"get({session_id!r}, last_events=3) after compact returned None: the "
                "compacted session must still be found"
            )
            assert [e.content for e in last.events] == kept[-3:], (
                "get(last_events=3) after compact must return the last 3 events of the "
                f"compacted history: expected {kept[-3:]!r}, found "
                f"{[e.content for e in last.events[:8]]!r}"
            )
            assert last.first_event_position == KEPT + 1 - 3, (
                f"get(last_events=3) of a compacted history of {KEPT + 1} events must report "
                f"first_event_position={KEPT + 1 - 3} (the compaction renumbers positions from "
                f"0), found {last.first_event_position}"
            )
            [summary_item] = [s for s in await self.list_all(space) if s.session_id == session_id]
            assert summary_item.event_count == KEPT + 1, (
                "list_sessions() after compact must count the compacted history: expected "
                f"event_count={KEPT + 1} for {session_id!r}, found {summary_item.event_count}"
            )
            assert summary_item.version == tail.version, (
                "list_sessions() after compact must report the compacted version: expected "
                f"version={tail.version} for {session_id!r}, found {summary_item.version}"
            )
            # The compacted copy saves on (append, then truncate), and so does a tail load.
            tail.add_event("user", "after")
            await space.save(tail)
            fresh = await space.get(session_id, last_events=2)
            assert fresh is not None, (
                f"get({session_id!r}, last_events=2) after compact and save returned None: "
                "the session must still be found"
            )
            fresh.add_event("user", "tail")
            await space.save(fresh)
            del fresh.events[-1:]
            await space.save(fresh)
            stored = await self.readback(space, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None after saves on a compacted "
                "session: the session must still be found"
            )
            assert [e.content for e in stored.events] == [summary.content, *kept, "after"], (
                "save() of the compacted copy (appending 'after'), then of a tail load "
                "(appending one event, then truncating it) must leave the compacted history "
                f"plus 'after': expected {KEPT + 2} events, found {len(stored.events)}: "
                f"{[e.content for e in stored.events[:8]]!r}"
            )
            await self.check_positions(space, session_id, KEPT + 2)

    async def test_compact_twice_and_rewrite(self, manager: SessionManager) -> None:
        """A compacted session compacts again (through its summary or past it) and takes a
        full rewrite; positions stay 0..n-1 and reads agree with what was written."""
        session_id = await self._compactable(manager)
        session = await manager.get(session_id)
        assert session is not None, (
            f"get({session_id!r}) returned None: a session just saved with {HISTORY} events "
            "must be found"
        )
        await manager.compact(session, session.events[9].id, [_summary("one"), _summary("two")])
        assert len(session.events) == HISTORY - 10 + 2, (
            "compact(through_event_id=<id of e9>, [2 summaries]) must replace the first 10 "
            f"events with the 2 summaries: expected {HISTORY - 10 + 2} events on the copy, "
            f"found {len(session.events)}"
        )
        await self.check_positions(manager, session_id, HISTORY - 8)
        tail = await manager.get(session_id, last_events=4)
        assert tail is not None, (
            f"get({session_id!r}, last_events=4) returned None after a compaction: the "
            "compacted session must still be found"
        )
        await manager.compact(tail, tail.events[0].id, [_summary("three")])
        await self.check_positions(manager, session_id, 4)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after a second compact) returned None: "
            "compaction must not lose the session"
        )
        assert [e.content for e in stored.events] == [
            {"summary": "three"},
            *[f"e{index}" for index in range(HISTORY - 3, HISTORY)],
        ], (
            "a second compact(), through the first event of a 4-event tail of an already "
            "compacted session, must leave summary 'three' then "
            f"e{HISTORY - 3}..e{HISTORY - 1}: expected 4 events, read back "
            f"{len(stored.events)}: {[e.content for e in stored.events[:8]]!r}"
        )
        stored.events[1] = stored.events[1].model_copy(update={"content": "rewritten"})
        await manager.save(stored)
        again = await self.readback(manager, session_id)
        assert again is not None, (
            f"get({session_id!r}) (read-back after a rewrite) returned None: save() must "
            "not lose a compacted session"
        )
        assert snapshot(again) == snapshot(stored), (
            "save() of a rewrite of a compacted session (event 1's content replaced) must "
            f"read back as saved: expected version {stored.version} with "
            f"{[e.content for e in stored.events[:8]]!r}, read back version {again.version} "
            f"with {[e.content for e in again.events[:8]]!r}"
        )
        await self.check_positions(manager, session_id, 4)
        # No replacement at all: the prefix is simply dropped.
        await manager.compact(again, again.events[1].id, [])
        assert [e.content for e in again.events] == [f"e{HISTORY - 2}", f"e{HISTORY - 1}"], (
            "compact(through_event_id=<id of event 1>, []) with no replacement must simply "
            f"drop the first 2 events: expected ['e{HISTORY - 2}', 'e{HISTORY - 1}'], found "
            f"{len(again.events)} events: {[e.content for e in again.events[:8]]!r}"
        )
        await self.check_positions(manager, session_id, 2)
        final = await self.readback(manager, session_id)
        assert snapshot(final) == snapshot(again), (
            "the stored session after compact(..., []) must be the compacted copy: expected "
            f"version {again.version} with {len(again.events)} events, read back version "
            f"{final and final.version} with {final and len(final.events)} events"
        )

    async def test_compact_archives_only_when_asked(self, manager: SessionManager) -> None:
        """Without archive=True the replaced events are gone from storage; with it they are
        kept in the archive (one per replaced event, read back in order) and erased with
        the session."""
        for space in await self.namespaced(manager):
            session_id = await self._compactable(space)
            session = await space.get(session_id, last_events=HISTORY - 10)
            assert session is not None, (
                f"get({session_id!r}, last_events={HISTORY - 10}) returned None: a session "
                f"just saved with {HISTORY} events must be found"
            )
            await space.compact(session, session.events[0].id, [_summary()])
            found = await self.inventory(space, session_id)
            assert found.archived == 0, f"nothing was to be archived, storage holds {found}"
            archived = await space.archived_events(session_id)
            assert archived == [], (
                "archived_events() after a compact() without archive=True must be empty (the "
                f"replaced events are gone): found {len(archived)} archived events"
            )
            replaced = HISTORY - (HISTORY - 10) + 1
            await self.check_positions(space, session_id, HISTORY - replaced + 1)
            full = await space.get(session_id)
            assert full is not None, (
                f"get({session_id!r}) returned None after a compaction: the compacted "
                "session must still be found"
            )
            first_batch = full.events[:3]
            await space.compact(full, full.events[2].id, [_summary("again")], archive=True)
            found = await self.inventory(space, session_id)
            assert found.archived == 3, f"3 events were to be archived, storage holds {found}"
            archived = await space.archived_events(session_id)
            assert archived == first_batch, (
                "compact(through_event_id=<id of event 2>, archive=True) must archive exactly "
                "the 3 replaced events, equal and in order: expected ids "
                f"{[e.id for e in first_batch]!r}, archived_events() returned {len(archived)} "
                f"with ids {[e.id for e in archived[:6]]!r}"
            )
            second = await space.get(session_id, last_events=3)
            assert second is not None, (
                f"get({session_id!r}, last_events=3) returned None after a compaction: the "
                "compacted session must still be found"
            )
            doomed = list(await self._head(space, session_id, len(full.events) - 2))
            await space.compact(second, second.events[0].id, [_summary("third")], archive=True)
            archived = await space.archived_events(session_id)
            assert archived == [*first_batch, *doomed], "the archive lost or reordered events"
            found = await self.inventory(space, session_id)
            assert found.archived == len(archived), (
                "storage must hold one archive entry per archived event: archived_events() "
                f"returned {len(archived)}, storage holds {found.archived} ({found})"
            )
            deleted = await space.delete(session_id)
            assert deleted is True, (
                f"delete({session_id!r}) of a stored, compacted session must return True, "
                f"returned {deleted!r}"
            )
            await self.check_erased(space, session_id, "delete() of a compacted session")
            archived = await space.archived_events(session_id)
            assert archived == [], (
                "archived_events() after delete() must be empty: the archive is erased with "
                f"the session, found {len(archived)} archived events"
            )

    async def _head(self, manager: SessionManager, session_id: str, count: int) -> list[Event]:
        session = await manager.get(session_id)
        assert session is not None, (
            f"get({session_id!r}) returned None while reading the head of a compacted "
            "session: the session must still be found"
        )
        return session.events[:count]

    async def test_compact_is_version_checked(self, manager: SessionManager) -> None:
        """compact() from a stale copy raises SessionConflictError and writes nothing; a copy
        loaded before a compaction cannot save over it."""
        session_id = await self._compactable(manager)
        first = await manager.get(session_id, last_events=KEPT)
        second = await manager.get(session_id, last_events=KEPT)
        assert first is not None and second is not None, (
            f"get({session_id!r}, last_events={KEPT}) returned None for a session just saved "
            f"(first copy None: {first is None}, second copy None: {second is None})"
        )
        first.add_event("user", "landed first")
        await manager.save(first)
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionConflictError):
            await manager.compact(second, second.events[0].id, [_summary()], archive=True)
        after = await self.readback(manager, session_id)
        assert snapshot(after) == before, (
            "a compaction that lost the race (compact() from a stale copy, which raised "
            "SessionConflictError) must write nothing: expected version "
            f"{before and before['version']} with {before and len(before['events'])} events, "
            f"read back version {after and after.version} with "
            f"{after and len(after.events)} events"
        )
        found = await self.inventory(manager, session_id)
        assert sorted(found.events) == list(range(HISTORY + 1)) and found.archived == 0, (
            "a compaction that lost the race must write nothing to storage: expected event "
            f"positions 0..{HISTORY} and nothing archived, storage holds {len(found.events)} "
            f"event rows (positions {min(found.events, default=None)}.."
            f"{max(found.events, default=None)}) and {found.archived} archived"
        )
        archived = await manager.archived_events(session_id)
        assert archived == [], (
            "a compaction that lost the race must archive nothing: archived_events() returned "
            f"{len(archived)} events"
        )
        fresh = await manager.get(session_id, last_events=KEPT)
        stale = await manager.get(session_id, last_events=KEPT)
        assert fresh is not None and stale is not None, (
            f"get({session_id!r}, last_events={KEPT}) returned None for a stored session "
            f"(first copy None: {fresh is None}, second copy None: {stale is None})"
        )
        await manager.compact(first, first.events[0].id, [_summary()])
        fresh.add_event("user", "lost?")
        with pytest.raises(SessionConflictError):
            await manager.save(fresh)
        with pytest.raises(SessionConflictError):
            await manager.compact(stale, stale.events[1].id, [_summary()])
        stored = await self.readback(manager, session_id)
        assert snapshot(stored) == snapshot(first), (
            "a copy loaded before a compaction must not save or compact over it (both raised "
            "SessionConflictError, so they must write nothing): expected the compacted "
            f"session, version {first.version} with {len(first.events)} events, read back "
            f"version {stored and stored.version} with {stored and len(stored.events)} events"
        )

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
        assert old is not None, f"get({session_id!r}) returned None for a session just saved"
        deleted = await manager.delete(session_id)
        assert deleted is True, (
            f"delete({session_id!r}) of a stored session must return True, returned {deleted!r}"
        )
        now = await manager.create(session_id)
        for index in range(3):
            now.add_event("user", f"second life {index}")
        await manager.save(now)
        assert old.version == now.version, (  # the case a version check alone misses
            "create() then save() of a new life with as many saves as the old one must reach "
            f"the same version: the old copy has version {old.version}, the new life "
            f"{now.version}"
        )
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionConflictError):
            await manager.compact(old, old.events[1].id, [_summary()], archive=True)
        after = await self.readback(manager, session_id)
        assert snapshot(after) == before, (
            "compact() from a copy of an earlier life of the id (raised SessionConflictError) "
            "must write nothing: expected the new life's contents "
            f"{before and [e['content'] for e in before['events']]!r}, read back "
            f"{after and [e.content for e in after.events[:8]]!r}"
        )
        found = await self.inventory(manager, session_id)
        assert sorted(found.events) == [0, 1, 2] and found.archived == 0, (
            "compact() from a copy of an earlier life must write nothing to storage: expected "
            f"event positions [0, 1, 2] and nothing archived, storage holds positions "
            f"{sorted(found.events)[:10]} and {found.archived} archived"
        )
        archived = await manager.archived_events(session_id)
        assert archived == [], (
            "compact() from a copy of an earlier life must archive nothing: archived_events() "
            f"returned {len(archived)} events"
        )
        # The new life's own copy still compacts.
        await manager.compact(now, now.events[1].id, [_summary()])
        stored = await self.readback(manager, session_id)
        assert snapshot(stored) == snapshot(now), (
            "compact() from the new life's own copy must store the compacted copy: expected "
            f"version {now.version} with {[e.content for e in now.events[:8]]!r}, read back "
            f"version {stored and stored.version} with "
            f"{stored and [e.content for e in stored.events[:8]]!r}"
        )

    async def test_compact_refuses_bad_input(self, manager: SessionManager) -> None:
        """An unknown or unloaded through_event_id, a replacement that repeats a kept id or
        is not a list of events, unsaved event changes, and a deleted session: each raises
        a clear error and writes nothing."""
        session_id = await self._compactable(manager, 12)
        tail = await manager.get(session_id, last_events=4)
        assert tail is not None, (
            f"get({session_id!r}, last_events=4) returned None for a session just saved"
        )
        before = snapshot(await self.readback(manager, session_id))
        old = await manager.get(session_id)
        assert old is not None, f"get({session_id!r}) returned None for a session just saved"
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
        after = await self.readback(manager, session_id)
        assert snapshot(after) == before, (
            "a compact() refused with InvalidInputError must write nothing: expected version "
            f"{before and before['version']} with {before and len(before['events'])} events, "
            f"read back version {after and after.version} with "
            f"{after and len(after.events)} events"
        )
        await self.check_positions(manager, session_id, 12)
        deleted = await manager.delete(session_id)
        assert deleted is True, (
            f"delete({session_id!r}) of a stored session must return True, returned {deleted!r}"
        )
        with pytest.raises(SessionNotFoundError):
            await manager.compact(old, old.events[0].id, [_summary()])
        gone = await self.readback(manager, session_id)
        assert gone is None, (
            "compact() of a deleted session must raise SessionNotFoundError and write nothing, "
            f"yet get({session_id!r}) read back a session (version {gone and gone.version} with "
            f"{gone and len(gone.events)} events)"
        )

    async def test_compact_keeps_pending_state_changes(self, manager: SessionManager) -> None:
        """compact() writes no state: the stored state stays as it was, and a change made to
        the session before compacting is written by the next save, on top of the compaction."""
        session_id = await self._compactable(manager, 10)
        session = await manager.get(session_id, last_events=3)
        assert session is not None, (
            f"get({session_id!r}, last_events=3) returned None for a session just saved"
        )
        session.state["pending"] = {"tool": "send", "approved": None}
        await manager.compact(session, session.events[0].id, [_summary()])
        stored = await self.readback(manager, session_id)
        assert stored is not None and "pending" not in stored.state, (
            "compact() must write no state: a state change made before compacting must not be "
            f"stored until the next save(): session read back: {stored is not None}, "
            f"stored state: {stored and stored.state!r}"
        )
        assert session.state["pending"] == {"tool": "send", "approved": None}, (
            "compact() must keep the copy's unsaved state changes: expected "
            "state['pending'] == {'tool': 'send', 'approved': None}, found "
            f"{session.state.get('pending')!r}"
        )
        await manager.save(session)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after compact and save) returned None: the "
            "session must still be found"
        )
        assert stored.state == {
            "plan": ["keep", "me"],
            "pending": {"tool": "send", "approved": None},
        }, (
            "save() after compact() must write the state change made before compacting, on "
            "top of the stored state: expected {'plan': ['keep', 'me'], "
            "'pending': {'tool': 'send', 'approved': None}}, "
            f"read back {stored.state!r}"
        )
        assert [e.content for e in stored.events] == [{"summary": "summary"}, "e8", "e9"], (
            "save() after compact() must keep the compacted history: expected "
            f"[{{'summary': 'summary'}}, 'e8', 'e9'], read back {len(stored.events)} events: "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
