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
            assert before is not None, (
                f"get({source_id!r}) must return the source session just saved, found None"
            )
            fork_id = self.new_id("fork")
            cut = before.events[CUT].id
            summary = await space.fork(source_id, fork_id, through_event_id=cut)
            origin = ForkOrigin(session_id=source_id, version=before.version, event_id=cut)
            assert summary.session_id == fork_id and summary.forked_from == origin, (
                f"fork(through_event_id={cut!r}) must return the new session's summary with "
                f"forked_from naming the source, its version and the cut: expected "
                f"session_id={fork_id!r}, forked_from={origin!r}; found "
                f"session_id={summary.session_id!r}, forked_from={summary.forked_from!r}"
            )
            assert summary.event_count == CUT + 1 and summary.version == 1, (
                f"fork(through_event_id={cut!r}) must return a summary counting the events up "
                f"to the cut, at version 1: expected event_count={CUT + 1}, version=1; found "
                f"event_count={summary.event_count}, version={summary.version}"
            )
            fork = await self.readback(space, fork_id)
            assert fork is not None, (
                f"get({fork_id!r}) must return the session fork() just stored, found None"
            )
            assert [e.model_dump() for e in fork.events] == [
                e.model_dump() for e in before.events[: CUT + 1]
            ], "the fork does not hold exactly the cut prefix"
            assert fork.state == before.state and fork.user_id == before.user_id, (
                f"fork() must copy the source's state and owner: expected "
                f"state={before.state!r}, user_id={before.user_id!r}; found "
                f"state={fork.state!r}, user_id={fork.user_id!r}"
            )
            assert fork.version == 1 and fork.forked_from == origin, (
                f"get({fork_id!r}) must load the fork at version 1 with forked_from naming "
                f"the source, its version and the cut: expected version=1, "
                f"forked_from={origin!r}; found version={fork.version}, "
                f"forked_from={fork.forked_from!r}"
            )
            await self.check_positions(space, fork_id, CUT + 1)
            after = await self.readback(space, source_id)
            assert snapshot(after) == snapshot(before), (
                f"fork() must leave the source {source_id!r} unchanged, its version unmoved: "
                f"expected version {before.version} with {len(before.events)} events, found "
                f"{'no session' if after is None else f'version {after.version} with '}"
                f"{'' if after is None else f'{len(after.events)} events'}"
                f"{'' if after is None else ', or other fields changed'}"
            )
            await self.check_positions(space, source_id, HISTORY)
            [listed] = [s for s in await self.list_all(space) if s.session_id == fork_id]
            assert listed.forked_from == origin and listed.event_count == CUT + 1, (
                f"list_sessions() must show the fork {fork_id!r} with its forked_from and "
                f"event count: expected forked_from={origin!r}, event_count={CUT + 1}; found "
                f"forked_from={listed.forked_from!r}, event_count={listed.event_count}"
            )
            # The whole history and a state of its own, then a fork of the fork.
            whole_id = self.new_id("fork")
            whole = await space.fork(source_id, whole_id, state={"mine": True})
            assert whole.event_count == HISTORY and whole.forked_from is not None, (
                f"fork() without a cut must copy the whole history and name its source: "
                f"expected event_count={HISTORY} and a forked_from; found "
                f"event_count={whole.event_count}, forked_from={whole.forked_from!r}"
            )
            assert whole.forked_from.event_id is None, (
                f"fork() without through_event_id must record no cut: expected "
                f"forked_from.event_id None, found {whole.forked_from.event_id!r}"
            )
            stored = await self.readback(space, whole_id)
            assert stored is not None and stored.state == {"mine": True}, (
                f"fork(state={{'mine': True}}) must store the given state instead of the "
                f"source's: expected {{'mine': True}}, found "
                f"{'no session' if stored is None else repr(stored.state)}"
            )
            assert [e.id for e in stored.events] == [e.id for e in before.events], (
                f"fork() without a cut must copy every event of the source, in order: "
                f"expected the source's {len(before.events)} event ids, found "
                f"{len(stored.events)} events with other ids or order"
            )
            await self.check_positions(space, whole_id, HISTORY)
            deeper_id = self.new_id("fork")
            deeper = await space.fork(fork_id, deeper_id, through_event_id=before.events[2].id)
            assert deeper.forked_from == ForkOrigin(
                session_id=fork_id, version=1, event_id=before.events[2].id
            ), (
                f"a fork of a fork must name the fork as its source, at its version 1, with "
                f"the cut: expected forked_from session_id={fork_id!r}, version=1, "
                f"event_id={before.events[2].id!r}; found {deeper.forked_from!r}"
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
            assert tail is not None, (
                f"get({source_id!r}, last_events=5) must return the session just saved, found None"
            )
            summary = Event(author="summarizer", content="summary")
            await space.compact(tail, tail.events[0].id, [summary])
            whole = await self.readback(space, source_id)
            assert whole is not None, (
                f"get({source_id!r}) must return the session compact() just rewrote, found None"
            )
            expected = ["summary", "e8", "e9", "e10", "e11"]
            assert [e.content for e in whole.events] == expected, (
                f"compact() up to the first of the last 5 events must leave the summary then "
                f"e8..e11: expected {expected!r}, found {[e.content for e in whole.events]!r}"
            )
            fork_id = self.new_id("fork")
            await space.fork(source_id, fork_id, through_event_id=whole.events[2].id)
            fork = await self.readback(space, fork_id)
            assert fork is not None and [e.content for e in fork.events] == expected[:3], (
                f"fork(through_event_id=<3rd event>) of a compacted session must copy its "
                f"logical prefix up to the cut: expected {expected[:3]!r}, found "
                f"{'no session' if fork is None else repr([e.content for e in fork.events])}"
            )
            await self.check_positions(space, fork_id, 3)
            recent = await space.get(source_id, last_events=2)
            assert recent is not None, (
                f"get({source_id!r}, last_events=2) must return the compacted session, found None"
            )
            await space.rewind(recent, recent.events[0].id)
            stored = await self.readback(space, source_id)
            assert stored is not None and [e.content for e in stored.events] == expected[:4], (
                f"rewind() of a compacted session must keep exactly the events up to the cut "
                f"and drop the rest: expected {expected[:4]!r}, found "
                f"{'no session' if stored is None else ''}"
                f"{'' if stored is None else repr([e.content for e in stored.events])}"
            )
            await self.check_positions(space, source_id, 4)

    async def test_fork_is_a_session_of_its_own(self, manager: SessionManager) -> None:
        """A fork saves, truncates and compacts on its own: nothing written to it reaches
        the source nor the reverse, a stale copy of the source still conflicts, and the
        fork keeps ``forked_from`` through its saves."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space)
            stale = await space.get(source_id, last_events=3)
            assert stale is not None, (
                f"get({source_id!r}, last_events=3) must return the session just saved, found None"
            )
            fork_id = self.new_id("fork")
            await space.fork(source_id, fork_id, through_event_id=stale.events[0].id)
            fork = await space.get(fork_id, last_events=2)
            assert fork is not None, (
                f"get({fork_id!r}, last_events=2) must return the session fork() just "
                f"stored, found None"
            )
            fork.add_event("user", "only in the fork")
            await space.save(fork)
            del fork.events[-2:]
            await space.save(fork)
            source = await space.get(source_id)
            assert source is not None, (
                f"get({source_id!r}) must still return the source after it was forked, found None"
            )
            source.add_event("user", "only in the source")
            await space.save(source)
            stale.add_event("user", "stale")
            with pytest.raises(SessionConflictError):
                await space.save(stale)
            stored_fork = await self.readback(space, fork_id)
            stored_source = await self.readback(space, source_id)
            assert stored_fork is not None and stored_source is not None, (
                f"get() must still find both the fork {fork_id!r} and its source "
                f"{source_id!r} after their saves: found "
                f"fork={'None' if stored_fork is None else 'a session'}, "
                f"source={'None' if stored_source is None else 'a session'}"
            )
            assert len(stored_fork.events) == HISTORY - 2 - 1, (
                f"a fork must save and truncate on its own: forked with {HISTORY - 2} events, "
                f"one added and two deleted, expected {HISTORY - 3} events, found "
                f"{len(stored_fork.events)}"
            )
            assert "only in the source" not in [e.content for e in stored_fork.events], (
                f"a save to the source must not reach its fork: found 'only in the source' "
                f"among the events of the fork {fork_id!r}"
            )
            assert [e.content for e in stored_source.events][-1] == "only in the source", (
                f"the source must save on its own after a fork: expected its last event "
                f"'only in the source', found {stored_source.events[-1].content!r}"
            )
            assert len(stored_source.events) == HISTORY + 1, (
                f"saves to the fork must not reach the source: expected {HISTORY + 1} events "
                f"(its {HISTORY} and one of its own), found {len(stored_source.events)}"
            )
            assert stored_fork.forked_from is not None, (
                f"a fork must keep forked_from through its own saves: {fork_id!r} has "
                f"forked_from None after save()"
            )
            assert stored_fork.forked_from.session_id == source_id, (
                f"a fork must keep naming its source through its own saves: expected "
                f"forked_from.session_id {source_id!r}, "
                f"found {stored_fork.forked_from.session_id!r}"
            )
            await self.check_positions(space, fork_id, HISTORY - 3)
            await self.check_positions(space, source_id, HISTORY + 1)

    async def test_fork_never_overwrites_and_fails_whole(self, manager: SessionManager) -> None:
        """fork() onto a live id raises SessionExistsError and leaves it untouched; an absent
        source, a cut that is not in it, another user, or the source's own id raise their
        error and write nothing."""
        for space in await self.namespaced(manager):
            source_id = await self._source(space)
            source = await space.get(source_id)
            assert source is not None and source.user_id is not None, (
                f"get({source_id!r}) must return the source saved with an owner: found "
                f"{'no session' if source is None else 'user_id=None'}"
            )
            taken = await self.session_with_events(space, 2)
            before = snapshot(await self.readback(space, taken.session_id))
            with pytest.raises(SessionExistsError):
                await space.fork(source_id, taken.session_id)
            after = await self.readback(space, taken.session_id)
            assert snapshot(after) == before, (
                f"fork() onto the live id {taken.session_id!r} must raise SessionExistsError "
                f"and leave that session untouched: it was at version {taken.version} with "
                f"{len(taken.events)} events, found "
                f"{'no session' if after is None else f'version {after.version} with '}"
                f"{'' if after is None else f'{len(after.events)} events'}"
                f"{'' if after is None else ', or other fields changed'}"
            )
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
            assert await self.readback(space, target) is None, (
                f"a fork() that raises must write nothing: expected get({target!r}) to "
                f"return None after every fork() onto it failed, found a session"
            )
            owned = await space.fork(source_id, target, user_id=source.user_id)
            assert owned.user_id == source.user_id, (
                f"fork(user_id=<the source's owner>) must succeed and keep that owner: "
                f"expected user_id {source.user_id!r}, found {owned.user_id!r}"
            )
            after = await self.readback(space, source_id)
            assert snapshot(after) == snapshot(source), (
                f"fork(), failed or not, must leave the source {source_id!r} unchanged: "
                f"expected version {source.version} with {len(source.events)} events, found "
                f"{'no session' if after is None else f'version {after.version} with '}"
                f"{'' if after is None else f'{len(after.events)} events'}"
                f"{'' if after is None else ', or other fields changed'}"
            )

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
            assert fork is not None and fork.forked_from is not None, (
                f"a fork() racing saves must store the fork {fork_id!r} with forked_from "
                f"naming the source version it copied: found "
                f"{'no session' if fork is None else 'forked_from=None'}"
            )
            count = counts[fork.forked_from.version]
            assert fork.state["count"] == count == len(fork.events), (
                f"fork {fork_id!r} mixes versions: state says {fork.state['count']}, it holds "
                f"{len(fork.events)} events, version {fork.forked_from.version} had {count}"
            )
            assert [e.content for e in fork.events] == [f"w{i}" for i in range(count)], (
                f"fork {fork_id!r} of version {fork.forked_from.version} must hold that "
                f"version's events in order: expected the {count} events w0.., found "
                f"{[e.content for e in fork.events]!r}"
            )
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
                assert len(page.items) <= 2, (
                    f"list_sessions(forked_from={source_id!r}, limit=2) must return at most "
                    f"2 sessions a page, found {len(page.items)}"
                )
                seen.extend(item.session_id for item in page.items)
                for item in page.items:
                    assert item.forked_from is not None, (
                        f"list_sessions(forked_from={source_id!r}) must list only forks, each "
                        f"naming its source: {item.session_id!r} has forked_from None"
                    )
                    assert item.forked_from.session_id == source_id, (
                        f"list_sessions(forked_from={source_id!r}) must list only that "
                        f"source's own forks, not forks of forks nor of other sessions: "
                        f"{item.session_id!r} is forked from {item.forked_from.session_id!r}"
                    )
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert set(seen) == expected and len(seen) == len(expected), (
                f"paging through list_sessions(forked_from=...) must list each of the "
                f"source's {len(expected)} live forks exactly once (no grandchild, no deleted "
                f"fork): found {len(seen)} listed, {len(set(seen) - expected)} unexpected, "
                f"{len(expected - set(seen))} missing"
            )
            everyone = [s.session_id for s in await self.list_all(space)]
            assert seen == [s for s in everyone if s in expected], "not in listing order"
            mine = await space.list_sessions(forked_from=source_id, user_id=owner)
            assert {s.session_id for s in mine.items} == expected, (
                f"list_sessions(forked_from=..., user_id=<the owner>) must list the owner's "
                f"{len(expected)} live forks: found {len(mine.items)} sessions, of which "
                f"{len({s.session_id for s in mine.items} & expected)} expected"
            )
            other = await space.list_sessions(forked_from=source_id, user_id=self.new_user())
            assert other.items == [], (
                f"list_sessions(forked_from=..., user_id=<another user>) must list none of "
                f"the owner's forks: expected no sessions, found {len(other.items)}"
            )
            assert (await space.list_sessions(forked_from=self.new_id("none"))).items == [], (
                "list_sessions(forked_from=<an id no session has>) must list no sessions: "
                "expected an empty page, found sessions listed"
            )

    async def test_rewind_drops_the_tail(self, manager: SessionManager) -> None:
        """rewind() on a tail-loaded session keeps the events up to and including the cut,
        drops the rest from storage (archived when asked), moves the version, keeps state
        and owner, and the rewound copy saves on."""
        for space in await self.namespaced(manager):
            session_id = await self._source(space)
            tail = await space.get(session_id, last_events=5)
            assert tail is not None, (
                f"get({session_id!r}, last_events=5) must return the session just saved, found None"
            )
            before = await self.readback(space, session_id)
            assert before is not None, (
                f"get({session_id!r}) must return the session just saved, found None"
            )
            await space.rewind(tail, tail.events[1].id, archive=True)
            kept = HISTORY - 3
            assert [e.content for e in tail.events] == [f"e{kept - 2}", f"e{kept - 1}"], (
                f"rewind() at the 2nd of the 5 loaded events must cut the loaded copy after "
                f"the cut: expected {[f'e{kept - 2}', f'e{kept - 1}']!r}, found "
                f"{[e.content for e in tail.events]!r}"
            )
            assert tail.version == before.version + 1, (
                f"rewind() must move the rewound copy's version by one: expected "
                f"{before.version + 1}, found {tail.version}"
            )
            stored = await self.readback(space, session_id)
            assert stored is not None, (
                f"get({session_id!r}) must return the session after rewind(), found None"
            )
            assert [e.content for e in stored.events] == [f"e{i}" for i in range(kept)], (
                f"rewind() must drop the events after the cut from storage: expected {kept} "
                f"events e0..e{kept - 1}, found {len(stored.events)} events ending with "
                f"{stored.events[-1].content if stored.events else None!r}"
            )
            assert stored.state == before.state and stored.user_id == before.user_id, (
                f"rewind() must keep the session's state and owner: expected "
                f"state={before.state!r}, user_id={before.user_id!r}; found "
                f"state={stored.state!r}, user_id={stored.user_id!r}"
            )
            assert stored.version == tail.version, (
                f"rewind() must store the version it gives the rewound copy: the copy is at "
                f"version {tail.version}, storage at {stored.version}"
            )
            await self.check_positions(space, session_id, kept)
            if space.capabilities.compaction:
                archived = await space.archived_events(session_id)
                assert [e.content for e in archived] == [f"e{i}" for i in range(kept, HISTORY)], (
                    f"rewind(archive=True) must archive exactly the dropped events: expected "
                    f"archived_events() e{kept}..e{HISTORY - 1} ({HISTORY - kept} events), "
                    f"found {len(archived)}: {[e.content for e in archived][:6]!r}"
                )
            tail.add_event("user", "after")
            await space.save(tail)
            stored = await self.readback(space, session_id)
            assert stored is not None, (
                f"get({session_id!r}) must return the session after the rewound copy's "
                f"save(), found None"
            )
            assert [e.content for e in stored.events][-2:] == [f"e{kept - 1}", "after"], (
                f"the rewound copy must save on from the cut: expected the last two events "
                f"{[f'e{kept - 1}', 'after']!r}, found "
                f"{[e.content for e in stored.events][-2:]!r}"
            )
            await self.check_positions(space, session_id, kept + 1)
            # Down to the first event, without archiving.
            whole = await space.get(session_id)
            assert whole is not None, (
                f"get({session_id!r}) must return the session after its saves, found None"
            )
            await space.rewind(whole, whole.events[0].id)
            assert [e.content for e in whole.events] == ["e0"], (
                f"rewind() at the first event must leave only it in the loaded copy: "
                f"expected ['e0'], found {len(whole.events)} events: "
                f"{[e.content for e in whole.events][:5]!r}"
            )
            await self.check_positions(space, session_id, 1)

    async def test_rewind_is_version_checked(self, manager: SessionManager) -> None:
        """rewind() of a stale copy raises SessionConflictError and writes nothing; of a
        deleted session SessionNotFoundError; a cut outside the loaded events, or unsaved
        changes, InvalidInputError before any I/O."""
        for space in await self.namespaced(manager):
            session_id = await self._source(space, 6)
            stale = await space.get(session_id)
            fresh = await space.get(session_id)
            assert stale is not None and fresh is not None, (
                f"get({session_id!r}) twice must return two copies of the session just "
                f"saved: found stale={'None' if stale is None else 'a session'}, "
                f"fresh={'None' if fresh is None else 'a session'}"
            )
            fresh.add_event("user", "landed")
            await space.save(fresh)
            before = snapshot(await self.readback(space, session_id))
            with pytest.raises(SessionConflictError):
                await space.rewind(stale, stale.events[1].id)
            after = await self.readback(space, session_id)
            assert snapshot(after) == before, (
                f"rewind() of a stale copy must raise SessionConflictError and write "
                f"nothing: expected version {fresh.version} with {len(fresh.events)} events, "
                f"found {'no session' if after is None else f'version {after.version} with '}"
                f"{'' if after is None else f'{len(after.events)} events'}"
                f"{'' if after is None else ', or other fields changed'}"
            )
            await self.check_positions(space, session_id, 7)
            tail = await space.get(session_id, last_events=2)
            assert tail is not None, (
                f"get({session_id!r}, last_events=2) must return the session, found None"
            )
            with pytest.raises(InvalidInputError):
                await space.rewind(tail, fresh.events[0].id)
            tail.add_event("user", "unsaved")
            with pytest.raises(InvalidInputError):
                await space.rewind(tail, tail.events[0].id)
            after = await self.readback(space, session_id)
            assert snapshot(after) == before, (
                f"rewind() with a cut outside the loaded events or with unsaved changes must "
                f"raise InvalidInputError and write nothing: expected version {fresh.version} "
                f"with {len(fresh.events)} events, found "
                f"{'no session' if after is None else f'version {after.version} with '}"
                f"{'' if after is None else f'{len(after.events)} events'}"
                f"{'' if after is None else ', or other fields changed'}"
            )
            doomed = await space.get(session_id)
            assert doomed is not None, (
                f"get({session_id!r}) must return the session before its delete(), found None"
            )
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
            assert source is not None and source.user_id is not None, (
                f"get({source_id!r}, last_events=0) must return the source saved with an "
                f"owner: found {'no session' if source is None else 'user_id=None'}"
            )
            child, grandchild = self.new_id("fork"), self.new_id("fork")
            await space.fork(source_id, child)
            await space.fork(child, grandchild)
            await space.delete(source_id)
            await self.check_erased(space, source_id, "delete() returned")
            await self.check_positions(space, child, 4)
            erased = await space.delete_user(source.user_id)
            assert erased == 2, (
                f"delete_user({source.user_id!r}) must erase the user's forks and forks of "
                f"forks (the source is already deleted): expected 2 sessions erased, the fork "
                f"and its fork, found {erased}"
            )
            for session_id in (child, grandchild):
                await self.check_erased(space, session_id, "delete_user() returned")
            assert (await space.list_sessions(forked_from=source_id)).items == [], (
                f"after delete_user(), list_sessions(forked_from={source_id!r}) must list no "
                f"forks: expected an empty page, found sessions listed"
            )
        if not manager.capabilities.ttl:
            return
        expiring = await self.frozen(manager, ttl=TTL)
        source_id = await self._source(expiring, 3)
        fork_id = self.new_id("fork")
        await expiring.fork(source_id, fork_id)
        self.clock.advance(TTL + 1)
        assert await expiring.get(fork_id) is None, (
            f"forks must expire with their ttl: expected get({fork_id!r}) to return None "
            f"{TTL + 1} s after the fork (ttl={TTL} s), found a session"
        )
        purged = await expiring.purge_expired()
        assert purged >= 2, (
            f"purge_expired() must erase expired forks with their expired source: expected "
            f"at least 2 sessions purged (the source and its fork), found {purged}"
        )
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
        assert await manager.get(target) is None, (
            f"without the 'branching' capability a refused fork() must write nothing: "
            f"expected get({target!r}) to return None, found a session"
        )
        stored = await self.readback(manager, session.session_id)
        assert stored is not None and len(stored.events) == 2, (
            f"without the 'branching' capability refused fork() and rewind() calls must "
            f"leave the session as saved: expected 2 events, found "
            f"{'no session' if stored is None else len(stored.events)}"
        )
