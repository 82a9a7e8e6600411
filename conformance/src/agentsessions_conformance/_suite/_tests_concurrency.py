"""Races: of N concurrent writers at one version exactly one lands; the rest are told so."""

from __future__ import annotations

import asyncio

from agentsessions import (
    Session,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
)

from ._base import SuiteBase

CONTENDERS = 20


class ConcurrencyTests(SuiteBase):
    async def _race_creates(self, managers: list[SessionManager]) -> None:
        session_id = self.new_id()
        results = await asyncio.gather(
            *(
                managers[i % len(managers)].create(session_id, state={"writer": i})
                for i in range(CONTENDERS)
            ),
            return_exceptions=True,
        )
        winners = [r for r in results if isinstance(r, Session)]
        losers = [r for r in results if isinstance(r, SessionExistsError)]
        unexpected = [r for r in results if not isinstance(r, Session | SessionExistsError)]
        assert not unexpected, f"unexpected outcomes: {unexpected[:3]!r}"
        assert len(winners) == 1, f"{len(winners)} of {CONTENDERS} concurrent creates succeeded"
        assert len(losers) == CONTENDERS - 1, (
            f"of {CONTENDERS} concurrent create({session_id!r}) calls, every one but the winner "
            f"must raise SessionExistsError: expected {CONTENDERS - 1}, found {len(losers)}"
        )
        stored = await self.readback(managers[0], session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None after {CONTENDERS} concurrent "
            "creates: the winner's session must be stored"
        )
        assert stored.state == winners[0].state, "the stored session is not the winner's"
        assert stored.version == 1, (
            f"a session created by one of {CONTENDERS} concurrent create() calls must be stored "
            f"at version 1 (the losers must not write): found version {stored.version}"
        )

    async def _race_saves(self, managers: list[SessionManager]) -> None:
        base = await self.session_with_events(managers[0], 2)
        copies = []
        for i in range(CONTENDERS):
            copy = await managers[i % len(managers)].get(base.session_id)
            assert copy is not None, (
                f"get({base.session_id!r}) returned None for copy {i}: a session just saved "
                "must be found"
            )
            copy.add_event("user", f"writer {i}")
            copy.state["writer"] = i
            copies.append(copy)
        results = await asyncio.gather(
            *(managers[i % len(managers)].save(copy) for i, copy in enumerate(copies)),
            return_exceptions=True,
        )
        landed = [i for i, r in enumerate(results) if r is None]
        conflicts = [r for r in results if isinstance(r, SessionConflictError)]
        unexpected = [
            r for r in results if r is not None and not isinstance(r, SessionConflictError)
        ]
        assert not unexpected, f"unexpected outcomes: {unexpected[:3]!r}"
        assert len(landed) == 1, f"{len(landed)} of {CONTENDERS} concurrent saves landed"
        assert len(conflicts) == CONTENDERS - 1, (
            f"of {CONTENDERS} concurrent save() calls of copies at one version, every one but "
            f"the winner must raise SessionConflictError: expected {CONTENDERS - 1}, found "
            f"{len(conflicts)}"
        )
        winner = copies[landed[0]]
        stored = await self.readback(managers[0], base.session_id)
        assert stored is not None, (
            f"get({base.session_id!r}) (read-back) returned None after {CONTENDERS} concurrent "
            "saves: the session must still be stored"
        )
        assert [e.id for e in stored.events] == [e.id for e in winner.events], (
            "stored events are not exactly the winner's"
        )
        assert stored.state == {"writer": landed[0]}, (
            "after concurrent save() calls, the stored state must be the one winner's: "
            f"expected {{'writer': {landed[0]}}}, read back {stored.state!r}"
        )
        assert stored.version == base.version + 1, (
            f"of {CONTENDERS} concurrent saves at version {base.version} exactly one landed, so "
            f"the stored version must be {base.version + 1}: found {stored.version}"
        )
        await self.check_positions(managers[0], base.session_id, 3)

    async def test_concurrent_creates_exactly_one_wins(self, manager: SessionManager) -> None:
        """Of 20 concurrent creates of one id one succeeds; 19 raise SessionExistsError."""
        await self._race_creates([manager])

    async def test_concurrent_saves_exactly_one_lands(self, manager: SessionManager) -> None:
        """Of 20 copies of one version saved concurrently exactly one lands; 19 conflict."""
        await self._race_saves([manager])

    async def test_concurrent_creates_across_managers(self, manager: SessionManager) -> None:
        """Concurrent creates from two managers on one store: exactly one succeeds."""
        self.require(manager, "shared")
        await self._race_creates([manager, await self.variant(manager)])

    async def test_concurrent_saves_across_managers(self, manager: SessionManager) -> None:
        """Concurrent stale saves from two managers on one store: exactly one lands."""
        self.require(manager, "shared")
        await self._race_saves([manager, await self.variant(manager)])

    async def test_concurrent_updates_across_managers(self, manager: SessionManager) -> None:
        """update() from two managers on one store, 20 at once: every appended event lands once."""
        self.require(manager, "shared")
        other = await self.variant(manager)
        session_id = self.new_id()
        await manager.create(session_id)
        managers = [manager, other]

        async def append(i: int) -> None:
            def add(session: Session) -> None:
                session.add_event("worker", f"w{i}")

            await managers[i % 2].update(session_id, add)

        await asyncio.gather(*(append(i) for i in range(CONTENDERS)))
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None after {CONTENDERS} concurrent "
            "update() calls: the session must still be stored"
        )
        assert sorted(e.content for e in stored.events) == sorted(
            f"w{i}" for i in range(CONTENDERS)
        ), (
            f"{CONTENDERS} concurrent update() calls from two managers, each appending one "
            f"event, must leave every event exactly once: expected w0..w{CONTENDERS - 1}, "
            f"found {len(stored.events)} events: "
            f"{sorted(str(e.content) for e in stored.events)[:8]!r}"
        )
        assert len({e.id for e in stored.events}) == CONTENDERS, (
            f"{CONTENDERS} concurrent update() calls must leave {CONTENDERS} events with "
            f"distinct ids: found {len({e.id for e in stored.events})} distinct ids among "
            f"{len(stored.events)} events"
        )

    async def test_reader_never_sees_half_a_save(self, manager: SessionManager) -> None:
        """A reader racing saves (appends, truncations, rewrites, state changes) always sees
        the events and state of one version, full or tail read, never half of a save."""
        session_id = self.new_id()
        writer = await manager.create(session_id, state={"contents": []})
        reader = await self.variant(manager) if manager.capabilities.shared else manager
        done = asyncio.Event()
        problems: list[str] = []

        async def write() -> None:
            try:
                for version in range(2, 26):
                    kind = version % 4
                    if kind == 0 and writer.events:
                        del writer.events[len(writer.events) // 2 :]
                    elif kind == 1 and writer.events:
                        writer.events[:] = [
                            event.model_copy(update={"content": f"{event.content}'"})
                            for event in writer.events
                        ]
                    else:
                        for i in range(3):
                            writer.add_event("user", f"v{version}.{i}")
                    writer.state = {"contents": [e.content for e in writer.events]}
                    await manager.save(writer)
                    await asyncio.sleep(0)
            finally:
                done.set()

        async def read() -> int:
            reads = 0
            for _ in range(5_000):
                for tail in (None, 2):
                    seen = await reader.get(session_id, last_events=tail)
                    assert seen is not None, (
                        f"get({session_id!r}, last_events={tail}) returned None while saves "
                        "raced it: a stored session must stay visible between its versions"
                    )
                    reads += 1
                    contents = seen.state["contents"]
                    expected = contents if tail is None else contents[-tail:]
                    got = [e.content for e in seen.events]
                    if got != expected:
                        problems.append(f"v{seen.version}: events {got} with state {contents}")
                if done.is_set():
                    return reads
                await asyncio.sleep(0)
            return reads

        _, *reads = await asyncio.gather(write(), read(), read())
        assert not problems, f"a reader saw half a save: {problems[:3]}"
        assert all(count > 0 for count in reads), (
            "each reader racing the saves must complete at least one get(): reads per "
            f"reader were {reads}"
        )
