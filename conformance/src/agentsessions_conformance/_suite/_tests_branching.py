"""fork() and rewind(): branches of a session, copied and cut atomically by the engine.

Proved through storage (`raw_inventory`) as well as through reads: a fork that shares
or leaves rows behind keeps data past its erasure, and a rewind that hides the tail
from reads but keeps its rows keeps what the application dropped. A backend without
``capabilities.branching`` skips these clauses, except the one proving that it then
refuses every branching call with `OperationNotSupportedError` and writes nothing.
"""

from __future__ import annotations

import asyncio

import pytest
from agentsessions import (
    Event,
    ForkOrigin,
    InvalidInputError,
    OperationNotSupportedError,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
    SessionNotFoundError,
    SessionOwnershipError,
)

from ._base import SuiteBase, snapshot

#: Events of the source a clause forks: more than a first batch of any engine.
HISTORY = 30
#: Where a clause cuts: the fork holds e0..e{CUT}.
CUT = 11
#: Saves racing a clause's forks, and forks racing them.
RACING_SAVES = 12
RACING_FORKS = 6
#: Forks of one source that a listing clause pages through.
FORKS = 5
#: The ttl of the erasure clause's manager (seconds).
TTL = 3600


class BranchingTests(SuiteBase):
    async def _source(self, manager: SessionManager, count: int = HISTORY) -> str:
        self.require(manager, "branching")
        session = await self.session_with_events(manager, count, user_id=self.new_user())
        session.state["plan"] = ["keep", "me"]
        await manager.save(session)
        return session.session_id

    async def test_fork_holds_the_cut_prefix_and_the_state(self, manager: SessionManager) -> None:
        """fork() stores a new session holding the source's events up to and including the
        cut, in order at positions 0..n-1, its state and owner, at version 1, with
        ``forked_from`` naming the source, its version and the cut, on load and in listings;
        the source is unchanged and its version unmoved."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space)
            before = await self.readback(space, source_id)
            assert before is not None
            fork_id = self.new_id("fork")
            cut = before.events[CUT].id
            summary = await space.fork(source_id, fork_id, through_event_id=cut)
            origin = ForkOrigin(session_id=source_id, version=before.version, event_id=cut)
            assert summary.session_id == fork_id and summary.forked_from == origin
            assert summary.event_count == CUT + 1 and summary.version == 1
            fork = await self.readback(space, fork_id)
            assert fork is not None
            assert [e.model_dump() for e in fork.events] == [
                e.model_dump() for e in before.events[: CUT + 1]
            ], "the fork does not hold exactly the cut prefix"
            assert fork.state == before.state and fork.user_id == before.user_id
            assert fork.version == 1 and fork.forked_from == origin
            await self.check_positions(space, fork_id, CUT + 1)
            assert snapshot(await self.readback(space, source_id)) == snapshot(before)
            await self.check_positions(space, source_id, HISTORY)
            [listed] = [s for s in await self.list_all(space) if s.session_id == fork_id]
            assert listed.forked_from == origin and listed.event_count == CUT + 1
            # The whole history and a state of its own, then a fork of the fork.
            whole_id = self.new_id("fork")
            whole = await space.fork(source_id, whole_id, state={"mine": True})
            assert whole.event_count == HISTORY and whole.forked_from is not None
            assert whole.forked_from.event_id is None
            stored = await self.readback(space, whole_id)
            assert stored is not None and stored.state == {"mine": True}
            assert [e.id for e in stored.events] == [e.id for e in before.events]
            await self.check_positions(space, whole_id, HISTORY)
            deeper_id = self.new_id("fork")
            deeper = await space.fork(fork_id, deeper_id, through_event_id=before.events[2].id)
            assert deeper.forked_from == ForkOrigin(
                session_id=fork_id, version=1, event_id=before.events[2].id
            )
            await self.check_positions(space, deeper_id, 3)

    async def test_fork_and_rewind_of_a_compacted_session(self, manager: SessionManager) -> None:
        """A compacted session (whose stored positions may start past 0) forks and rewinds
        by its logical positions: the fork holds the compacted history's prefix at 0..n-1,
        and a rewind keeps exactly the events up to the cut."""
        self.require(manager, "compaction")
        for space in await self.namespaced(manager):
            source_id = await self._source(space, 12)
            tail = await space.get(source_id, last_events=5)
            assert tail is not None
            summary = Event(author="summarizer", content="summary")
            await space.compact(tail, tail.events[0].id, [summary])
            whole = await self.readback(space, source_id)
            assert whole is not None
            expected = ["summary", "e8", "e9", "e10", "e11"]
            assert [e.content for e in whole.events] == expected
            fork_id = self.new_id("fork")
            await space.fork(source_id, fork_id, through_event_id=whole.events[2].id)
            fork = await self.readback(space, fork_id)
            assert fork is not None and [e.content for e in fork.events] == expected[:3]
            await self.check_positions(space, fork_id, 3)
            recent = await space.get(source_id, last_events=2)
            assert recent is not None
            await space.rewind(recent, recent.events[0].id)
            stored = await self.readback(space, source_id)
            assert stored is not None and [e.content for e in stored.events] == expected[:4]
            await self.check_positions(space, source_id, 4)

    async def test_fork_is_a_session_of_its_own(self, manager: SessionManager) -> None:
        """A fork saves, truncates and compacts on its own: nothing written to it reaches
        the source nor the reverse, a stale copy of the source still conflicts, and the
        fork keeps ``forked_from`` through its saves."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space)
            stale = await space.get(source_id, last_events=3)
            assert stale is not None
            fork_id = self.new_id("fork")
            await space.fork(source_id, fork_id, through_event_id=stale.events[0].id)
            fork = await space.get(fork_id, last_events=2)
            assert fork is not None
            fork.add_event("user", "only in the fork")
            await space.save(fork)
            del fork.events[-2:]
            await space.save(fork)
            source = await space.get(source_id)
            assert source is not None
            source.add_event("user", "only in the source")
            await space.save(source)
            stale.add_event("user", "stale")
            with pytest.raises(SessionConflictError):
                await space.save(stale)
            stored_fork = await self.readback(space, fork_id)
            stored_source = await self.readback(space, source_id)
            assert stored_fork is not None and stored_source is not None
            assert len(stored_fork.events) == HISTORY - 2 - 1
            assert "only in the source" not in [e.content for e in stored_fork.events]
            assert [e.content for e in stored_source.events][-1] == "only in the source"
            assert len(stored_source.events) == HISTORY + 1
            assert stored_fork.forked_from is not None
            assert stored_fork.forked_from.session_id == source_id
            await self.check_positions(space, fork_id, HISTORY - 3)
            await self.check_positions(space, source_id, HISTORY + 1)

    async def test_fork_never_overwrites_and_fails_whole(self, manager: SessionManager) -> None:
        """fork() onto a live id raises SessionExistsError and leaves it untouched; an absent
        source, a cut that is not in it, another user, or the source's own id raise their
        error and write nothing."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space)
            source = await space.get(source_id)
            assert source is not None and source.user_id is not None
            taken = await self.session_with_events(space, 2)
            before = snapshot(await self.readback(space, taken.session_id))
            with pytest.raises(SessionExistsError):
                await space.fork(source_id, taken.session_id)
            assert snapshot(await self.readback(space, taken.session_id)) == before
            await self.check_positions(space, taken.session_id, 2)
            target = self.new_id("fork")
            with pytest.raises(SessionNotFoundError):
                await space.fork(self.new_id("absent"), target)
            with pytest.raises(InvalidInputError):
                await space.fork(source_id, target, through_event_id="no-such-event")
            with pytest.raises(SessionOwnershipError):
                await space.fork(source_id, target, user_id=self.new_user())
            with pytest.raises(InvalidInputError):
                await space.fork(source_id, source_id)
            await self.check_erased(space, target, "every fork() onto it failed")
            assert await self.readback(space, target) is None
            owned = await space.fork(source_id, target, user_id=source.user_id)
            assert owned.user_id == source.user_id
            assert snapshot(await self.readback(space, source_id)) == snapshot(source)

    async def test_fork_during_saves_is_one_version(self, manager: SessionManager) -> None:
        """Forks made while saves append to the source each hold one version of it: the
        events and state that version had, as ``forked_from.version`` says."""
        self.require(manager, "branching")
        source = await manager.create(self.new_id(), state={"count": 0})
        counts = {source.version: 0}

        async def writer() -> None:
            for index in range(RACING_SAVES):
                source.add_event("user", f"w{index}")
                source.state["count"] = len(source.events)
                await manager.save(source)
                counts[source.version] = len(source.events)
                await asyncio.sleep(0)

        async def forker(index: int) -> str:
            await asyncio.sleep(0.001 * index)
            fork_id = self.new_id("fork")
            await manager.fork(source.session_id, fork_id)
            return fork_id

        _, fork_ids = await asyncio.gather(
            writer(), asyncio.gather(*(forker(index) for index in range(RACING_FORKS)))
        )
        for fork_id in fork_ids:
            fork = await self.readback(manager, fork_id)
            assert fork is not None and fork.forked_from is not None
            count = counts[fork.forked_from.version]
            assert fork.state["count"] == count == len(fork.events), (
                f"fork {fork_id!r} mixes versions: state says {fork.state['count']}, it holds "
                f"{len(fork.events)} events, version {fork.forked_from.version} had {count}"
            )
            assert [e.content for e in fork.events] == [f"w{i}" for i in range(count)]
            await self.check_positions(manager, fork_id, count)

    async def test_list_forks_pages_through_one_sources_forks(
        self, manager: SessionManager
    ) -> None:
        """list_sessions(forked_from=ID) lists exactly ID's live forks (not forks of forks,
        not other sessions), newest first, paged, optionally of one owner."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space, 3)
            owner = (await space.get(source_id, last_events=0)).user_id  # type: ignore[union-attr]
            forks = []
            for _ in range(FORKS):
                fork_id = self.new_id("fork")
                await space.fork(source_id, fork_id)
                forks.append(fork_id)
            await space.fork(forks[0], self.new_id("grandchild"))
            await space.delete(forks[-1])
            expected = set(forks[:-1])
            seen: list[str] = []
            cursor = None
            for _ in range(FORKS + 2):
                page = await space.list_sessions(forked_from=source_id, limit=2, cursor=cursor)
                assert len(page.items) <= 2
                seen.extend(item.session_id for item in page.items)
                for item in page.items:
                    assert item.forked_from is not None
                    assert item.forked_from.session_id == source_id
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert set(seen) == expected and len(seen) == len(expected)
            everyone = [s.session_id for s in await self.list_all(space)]
            assert seen == [s for s in everyone if s in expected], "not in listing order"
            mine = await space.list_sessions(forked_from=source_id, user_id=owner)
            assert {s.session_id for s in mine.items} == expected
            other = await space.list_sessions(forked_from=source_id, user_id=self.new_user())
            assert other.items == []
            assert (await space.list_sessions(forked_from=self.new_id("none"))).items == []

    async def test_rewind_drops_the_tail(self, manager: SessionManager) -> None:
        """rewind() on a tail-loaded session keeps the events up to and including the cut,
        drops the rest from storage (archived when asked), moves the version, keeps state
        and owner, and the rewound copy saves on."""
        for space in await self.namespaced(manager):
            session_id = await self._source(space)
            tail = await space.get(session_id, last_events=5)
            assert tail is not None
            before = await self.readback(space, session_id)
            assert before is not None
            await space.rewind(tail, tail.events[1].id, archive=True)
            kept = HISTORY - 3
            assert [e.content for e in tail.events] == [f"e{kept - 2}", f"e{kept - 1}"]
            assert tail.version == before.version + 1
            stored = await self.readback(space, session_id)
            assert stored is not None
            assert [e.content for e in stored.events] == [f"e{i}" for i in range(kept)]
            assert stored.state == before.state and stored.user_id == before.user_id
            assert stored.version == tail.version
            await self.check_positions(space, session_id, kept)
            if space.capabilities.compaction:
                archived = await space.archived_events(session_id)
                assert [e.content for e in archived] == [f"e{i}" for i in range(kept, HISTORY)]
            tail.add_event("user", "after")
            await space.save(tail)
            stored = await self.readback(space, session_id)
            assert stored is not None
            assert [e.content for e in stored.events][-2:] == [f"e{kept - 1}", "after"]
            await self.check_positions(space, session_id, kept + 1)
            # Down to the first event, without archiving.
            whole = await space.get(session_id)
            assert whole is not None
            await space.rewind(whole, whole.events[0].id)
            assert [e.content for e in whole.events] == ["e0"]
            await self.check_positions(space, session_id, 1)

    async def test_rewind_is_version_checked(self, manager: SessionManager) -> None:
        """rewind() of a stale copy raises SessionConflictError and writes nothing; of a
        deleted session SessionNotFoundError; a cut outside the loaded events, or unsaved
        changes, InvalidInputError before any I/O."""
        for space in await self.namespaced(manager):
            session_id = await self._source(space, 6)
            stale = await space.get(session_id)
            fresh = await space.get(session_id)
            assert stale is not None and fresh is not None
            fresh.add_event("user", "landed")
            await space.save(fresh)
            before = snapshot(await self.readback(space, session_id))
            with pytest.raises(SessionConflictError):
                await space.rewind(stale, stale.events[1].id)
            assert snapshot(await self.readback(space, session_id)) == before
            await self.check_positions(space, session_id, 7)
            tail = await space.get(session_id, last_events=2)
            assert tail is not None
            with pytest.raises(InvalidInputError):
                await space.rewind(tail, fresh.events[0].id)
            tail.add_event("user", "unsaved")
            with pytest.raises(InvalidInputError):
                await space.rewind(tail, tail.events[0].id)
            assert snapshot(await self.readback(space, session_id)) == before
            doomed = await space.get(session_id)
            assert doomed is not None
            await space.delete(session_id)
            with pytest.raises(SessionNotFoundError):
                await space.rewind(doomed, doomed.events[0].id)

    async def test_forks_are_erased_like_any_session(self, manager: SessionManager) -> None:
        """delete_user() erases a user's forks (and forks of forks) with all their storage,
        and purge_expired() erases expired forks; a fork of an erased source stays whole
        until erased itself."""
        self.require(manager, "branching")
        for space in await self.namespaced(manager):
            source_id = await self._source(space, 4)
            source = await space.get(source_id, last_events=0)
            assert source is not None and source.user_id is not None
            child, grandchild = self.new_id("fork"), self.new_id("fork")
            await space.fork(source_id, child)
            await space.fork(child, grandchild)
            await space.delete(source_id)
            await self.check_erased(space, source_id, "delete() returned")
            await self.check_positions(space, child, 4)
            assert await space.delete_user(source.user_id) == 2
            for session_id in (child, grandchild):
                await self.check_erased(space, session_id, "delete_user() returned")
            assert (await space.list_sessions(forked_from=source_id)).items == []
        if not manager.capabilities.ttl:
            return
        expiring = await self.frozen(manager, ttl=TTL)
        source_id = await self._source(expiring, 3)
        fork_id = self.new_id("fork")
        await expiring.fork(source_id, fork_id)
        self.clock.advance(TTL + 1)
        assert await expiring.get(fork_id) is None
        assert await expiring.purge_expired() >= 2
        for session_id in (source_id, fork_id):
            await self.check_erased(expiring, session_id, "purge_expired() ran after expiry")

    async def test_without_branching_every_call_is_refused(self, manager: SessionManager) -> None:
        """A backend without ``capabilities.branching`` refuses fork(), rewind() and
        list_sessions(forked_from=...) with OperationNotSupportedError, writing nothing."""
        if manager.capabilities.branching:
            pytest.skip(f"{type(manager).__name__} declares the 'branching' capability")
        session = await self.session_with_events(manager, 2)
        target = self.new_id("fork")
        with pytest.raises(OperationNotSupportedError):
            await manager.fork(session.session_id, target)
        with pytest.raises(OperationNotSupportedError):
            await manager.rewind(session, session.events[0].id)
        with pytest.raises(OperationNotSupportedError):
            await manager.list_sessions(forked_from=session.session_id)
        assert await manager.get(target) is None
        stored = await self.readback(manager, session.session_id)
        assert stored is not None and len(stored.events) == 2
