"""Atomicity and races of compaction, restore and fork: a concurrent reader sees each
whole or not at all, of racing compactions or restores of one session exactly one lands,
and a fork racing saves of its source is one version of it.

The same standard `_tests_concurrency` holds create and save to, across two managers
on one store when the backend is ``shared``.
"""

from __future__ import annotations

import asyncio

from agentsessions import (
    Event,
    Session,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
)

from ._base import SuiteBase, snapshot
from ._tests_restore import _exported
from ._tests_ttl import PAST_TTL, TTL

#: Compactions (or restores) racing for one session.
CONTENDERS = 10
#: Most read rounds of a racing reader (it stops as soon as the writer is done).
READ_ROUNDS = 5_000
#: Saves of the source while forks of it are made; most forks made meanwhile.
FORK_RACE_SAVES = 60
FORK_RACE_FORKS = 200


def _summary(text: str) -> Event:
    return Event(author="summarizer", content={"summary": text})


class NewOpsRaceTests(SuiteBase):
    async def _managers(self, manager: SessionManager) -> list[SessionManager]:
        if not manager.capabilities.shared:
            return [manager]
        return [manager, await self.variant(manager)]

    async def test_reader_never_sees_half_a_compaction(self, manager: SessionManager) -> None:
        """A reader racing compactions (archived or not) and appends always sees one
        version's whole history, full or tail read: never the replaced events gone
        without their replacement, or both ("a concurrent reader sees it before or
        after, never between")."""
        self.require(manager, "compaction")
        writer = await self.session_with_events(manager, 12)
        session_id = writer.session_id
        reader = await self.variant(manager) if manager.capabilities.shared else manager
        history = {writer.version: [e.content for e in writer.events]}
        seen: list[tuple[int, int | None, list[object]]] = []
        done = asyncio.Event()

        async def write() -> None:
            try:
                for round_ in range(18):
                    if round_ % 3 == 2:
                        writer.add_event("user", f"r{round_}.a")
                        writer.add_event("user", f"r{round_}.b")
                        await manager.save(writer)
                    else:
                        await manager.compact(
                            writer,
                            writer.events[1].id,
                            [_summary(f"s{round_}")],
                            archive=round_ % 2 == 0,
                        )
                    history[writer.version] = [e.content for e in writer.events]
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def read() -> int:
            reads = 0
            for _ in range(READ_ROUNDS):
                for tail in (None, 3):
                    got = await reader.get(session_id, last_events=tail)
                    assert got is not None, (
                        f"get({session_id!r}, last_events={tail}) returned None while "
                        "compactions raced it: a stored session must stay visible throughout"
                    )
                    seen.append((got.version, tail, [e.content for e in got.events]))
                    reads += 1
                if done.is_set():
                    return reads
                await asyncio.sleep(0)
            return reads

        _, *reads = await asyncio.gather(write(), read(), read())
        assert all(count > 0 for count in reads), (
            "each reader racing the compactions must complete at least one get(): reads per "
            f"reader were {reads}"
        )
        problems = []
        for version, tail, contents in seen:
            whole = history.get(version)
            expected = None if whole is None else whole if tail is None else whole[-tail:]
            if contents != expected:
                problems.append(f"v{version} last_events={tail}: {contents}, expected {expected}")
        assert not problems, f"a reader saw half a compaction: {problems[:3]}"

    async def test_reader_never_sees_half_a_restore(self, manager: SessionManager) -> None:
        """Readers racing restores see each restored session absent or whole, in full
        and tail reads and in the listing ("readers see the whole session or nothing")."""
        user = self.new_user()
        originals = [_exported(self.new_id(), user, events=40) for _ in range(6)]
        reader = await self.variant(manager) if manager.capabilities.shared else manager
        done = asyncio.Event()
        problems: list[str] = []

        async def write() -> None:
            try:
                for original in originals:
                    await manager.restore(original)
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def read() -> int:
            reads = 0
            for _ in range(READ_ROUNDS):
                for original in originals:
                    sid = original.session_id
                    whole = await reader.get(sid)
                    if whole is not None and snapshot(whole) != snapshot(original):
                        problems.append(f"{sid}: {len(whole.events)} of 40 events")
                    tail = await reader.get(sid, last_events=3)
                    if tail is not None and (
                        [e.id for e in tail.events] != [e.id for e in original.events[-3:]]
                        or tail.version != original.version
                    ):
                        problems.append(f"{sid}: tail {[e.id for e in tail.events]}")
                    reads += 2
                page = await reader.list_sessions(user_id=user, limit=100)
                counts = {item.event_count for item in page.items}
                if counts - {40}:
                    problems.append(f"listing counts {sorted(counts)}")
                if done.is_set():
                    return reads
                await asyncio.sleep(0)
            return reads

        _, *reads = await asyncio.gather(write(), read(), read())
        assert not problems, f"a reader saw half a restore: {problems[:3]}"
        assert all(count > 0 for count in reads), (
            "each reader racing the restores must complete at least one round of get() calls: "
            f"reads per reader were {reads}"
        )

    async def test_concurrent_compactions_exactly_one_lands(self, manager: SessionManager) -> None:
        """Of 10 copies of one version compacted concurrently (full and tail copies,
        different cuts, archived), from two managers when shared, exactly one lands and 9
        raise SessionConflictError ("version-checked like a save"): the stored history is
        the winner's, its replaced events archived once, at positions 0..n-1."""
        self.require(manager, "compaction")
        managers = await self._managers(manager)
        base = await self.session_with_events(manager, 12)
        sid = base.session_id
        copies: list[Session] = []
        cuts: list[int] = []
        for index in range(CONTENDERS):
            copy = await managers[index % len(managers)].get(
                sid, last_events=None if index % 2 else 10
            )
            assert copy is not None, (
                f"get({sid!r}, last_events={None if index % 2 else 10}) returned None for copy "
                f"{index}: a session just saved must be found"
            )
            copies.append(copy)
            cuts.append(index % 4)
        results = await asyncio.gather(
            *(
                managers[index % len(managers)].compact(
                    copy, copy.events[cuts[index]].id, [_summary(f"writer {index}")], archive=True
                )
                for index, copy in enumerate(copies)
            ),
            return_exceptions=True,
        )
        landed = [index for index, result in enumerate(results) if result is None]
        unexpected = [
            r for r in results if r is not None and not isinstance(r, SessionConflictError)
        ]
        assert not unexpected, f"unexpected outcomes: {unexpected[:3]!r}"
        assert len(landed) == 1, f"{len(landed)} of {CONTENDERS} concurrent compactions landed"
        winner = copies[landed[0]]
        stored = await self.readback(manager, sid)
        assert snapshot(stored) == snapshot(winner), "the stored session is not the winner's"
        assert stored is not None and stored.version == base.version + 1, (
            f"of {CONTENDERS} concurrent compactions exactly one landed, so the stored version "
            f"must be {base.version + 1}: found "
            f"{'None' if stored is None else f'version {stored.version}'}"
        )
        replaced = 12 - (len(winner.events) - 1)
        assert await manager.archived_events(sid) == base.events[:replaced], (
            "the archive does not hold exactly the winner's replaced events, once"
        )
        assert (await self.inventory(manager, sid)).archived == replaced, (
            f"storage must hold exactly the winner's {replaced} archived events for {sid!r}, "
            "once: raw_inventory() reports another count (a loser archived too, or the winner "
            "twice)"
        )
        await self.check_positions(manager, sid, len(winner.events))

    async def test_concurrent_restores_across_managers(self, manager: SessionManager) -> None:
        """Concurrent restores of one id from two managers on one store: exactly one
        succeeds, the others raise SessionExistsError and write nothing."""
        self.require(manager, "shared")
        managers = await self._managers(manager)
        sid = self.new_id()
        await self._race_restores(managers, sid)

    async def test_concurrent_restores_over_an_expired_id_one_wins(
        self, manager: SessionManager
    ) -> None:
        """Concurrent restores onto an expired session's id (from two managers when
        shared): exactly one succeeds and replaces it ("an expired one is replaced"), the
        others raise SessionExistsError; storage holds the winner alone, nothing of the
        expired life (events, archive) and nothing of the losers."""
        self.require(manager, "ttl")
        expiring = await self.frozen(manager, ttl=TTL)
        managers = [expiring]
        if manager.capabilities.shared:
            namespace = expiring.options.namespace
            managers.append(await self.frozen(manager, ttl=TTL, namespace=namespace))
        old = await self.session_with_events(expiring, 9, user_id=self.new_user())
        if manager.capabilities.compaction:
            await expiring.compact(old, old.events[4].id, [_summary("old")], archive=True)
        self.clock.advance(PAST_TTL)
        await self._race_restores(managers, old.session_id)
        if manager.capabilities.compaction:
            assert await expiring.archived_events(old.session_id) == [], (
                f"restore() onto the expired id {old.session_id!r} must keep nothing of the "
                "expired life's archive: archived_events() still returns events"
            )

    async def _race_restores(self, managers: list[SessionManager], sid: str) -> None:
        candidates = [_exported(sid, f"user-{n}", events=n + 1) for n in range(CONTENDERS)]
        results = await asyncio.gather(
            *(managers[n % len(managers)].restore(c) for n, c in enumerate(candidates)),
            return_exceptions=True,
        )
        winners = [n for n, result in enumerate(results) if isinstance(result, Session)]
        assert len(winners) == 1, f"{len(winners)} of {CONTENDERS} concurrent restores won"
        unexpected = [
            result
            for n, result in enumerate(results)
            if n != winners[0] and not isinstance(result, SessionExistsError)
        ]
        assert not unexpected, f"unexpected outcomes: {unexpected[:3]!r}"
        winner = candidates[winners[0]]
        stored = await self.readback(managers[0], sid)
        assert snapshot(stored) == snapshot(winner), "the stored session is not the winner's"
        found = await self.inventory(managers[0], sid)
        assert found.archived == 0, f"storage holds an archive for a restored session: {found}"
        await self.check_positions(managers[0], sid, len(winner.events))

    async def test_a_fork_racing_saves_is_one_version_of_its_source(
        self, manager: SessionManager
    ) -> None:
        """Forks made while saves of the source land, each save changing the state and
        rewriting events together (the last event replaced, two appended): every fork
        holds exactly the events and the state of one stored version of the source, the
        version its forked_from names ("one atomic step copying one consistent
        snapshot")."""
        self.require(manager, "branching")
        source = await manager.create(self.new_id("src"), state={"n": 0})
        for index in range(6):
            source.add_event("user", {"save": 0, "i": index})
        await manager.save(source)
        versions = {source.version: (dict(source.state), [e.content for e in source.events])}
        forker = await self.variant(manager) if manager.capabilities.shared else manager
        done = asyncio.Event()

        async def write() -> None:
            try:
                for n in range(1, FORK_RACE_SAVES + 1):
                    source.events.pop()  # rewritten, not only appended: a copy of the
                    source.add_event("user", {"save": n, "i": "replaced"})  # events must
                    source.add_event("user", {"save": n, "i": "a"})  # match the state's
                    source.state = {"n": n, "events": len(source.events) + 1}  # version
                    source.add_event("user", {"save": n, "i": "b"})
                    await manager.save(source)
                    versions[source.version] = (
                        dict(source.state),
                        [e.content for e in source.events],
                    )
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def fork() -> list[str]:
            made: list[str] = []
            for _ in range(FORK_RACE_FORKS):
                fork_id = self.new_id("fork")
                await forker.fork(source.session_id, fork_id)
                made.append(fork_id)
                if done.is_set():
                    break
            return made

        _, made = await asyncio.gather(write(), fork())
        problems = []
        for fork_id in made:
            copy = await self.readback(manager, fork_id)
            assert copy is not None, f"fork {fork_id!r} vanished after fork() returned"
            origin = copy.forked_from
            assert origin is not None, f"fork {fork_id!r} has no forked_from"
            expected = versions.get(origin.version)
            found = (copy.state, [e.content for e in copy.events])
            if expected != found:
                problems.append(
                    f"{fork_id}: forked_from version {origin.version}, holding state "
                    f"{copy.state} and {len(copy.events)} events whose last is "
                    f"{found[1][-1] if found[1] else None}; that version holds "
                    f"{expected[0] if expected else 'nothing we saved'}"
                )
        assert not problems, (
            f"fork() racing {FORK_RACE_SAVES} saves of its source must copy one version of "
            f"it, events and state together, the version forked_from names; "
            f"{len(problems)} of {len(made)} forks did not: {problems[:3]}"
        )
