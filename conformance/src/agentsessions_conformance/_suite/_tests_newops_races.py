"""Atomicity and races of compaction and restore: a concurrent reader sees each whole or
not at all, and of racing compactions or restores of one session exactly one lands.

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
                    assert got is not None
                    seen.append((got.version, tail, [e.content for e in got.events]))
                    reads += 1
                if done.is_set():
                    return reads
                await asyncio.sleep(0)
            return reads

        _, *reads = await asyncio.gather(write(), read(), read())
        assert all(count > 0 for count in reads)
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
        assert all(count > 0 for count in reads)

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
            assert copy is not None
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
        assert stored is not None and stored.version == base.version + 1
        replaced = 12 - (len(winner.events) - 1)
        assert await manager.archived_events(sid) == base.events[:replaced], (
            "the archive does not hold exactly the winner's replaced events, once"
        )
        assert (await self.inventory(manager, sid)).archived == replaced
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
            assert await expiring.archived_events(old.session_id) == []

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
