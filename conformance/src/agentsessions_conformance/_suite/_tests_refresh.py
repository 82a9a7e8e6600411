"""A lost race costs what changed: ``_load_since`` and the retries built on it.

`SessionManager.update` (and the runtime's merge) extend the copy that lost a race
with the events stored after it, read by the ``_load_since`` hook, instead of reading
the whole history again. These clauses hold the hook to its contract (only the events
after the copy while the stored lineage is the copy's, every event otherwise) and the
retries to seeing exactly what is stored, whatever happened meanwhile.
"""

from __future__ import annotations

from agentsessions import Event, Session, SessionManager
from agentsessions.backend import LoadedSession

from ._base import SuiteBase

# A lineage no manager ever makes (they are 16 hex characters).
_FOREIGN_LINEAGE = "not-a-lineage"


async def _lineage(manager: SessionManager, session_id: str) -> str:
    await manager.open()  # the hooks below need this event loop's connections
    loaded = await manager._load(session_id, 0, manager.clock.now())
    assert loaded is not None, f"session {session_id!r} is not stored"
    return loaded.record.lineage


async def _since(
    manager: SessionManager, session_id: str, event_count: int, lineage: str
) -> LoadedSession:
    await manager.open()
    loaded = await manager._load_since(session_id, event_count, lineage, manager.clock.now())
    assert loaded is not None, f"_load_since() did not find the stored session {session_id!r}"
    return loaded


def _contents(session: Session | None) -> list[object]:
    assert session is not None, (
        "get() (read-back) returned None: the session the clause wrote must still be stored"
    )
    return [event.content for event in session.events]


class RefreshTests(SuiteBase):
    async def test_load_since_returns_the_events_after_the_copy_or_all(
        self, manager: SessionManager
    ) -> None:
        """``_load_since(id, n, lineage)`` returns the current record and either exactly
        the events at positions >= n (when the stored lineage is *lineage*) or every
        event; an unchanged session gives no event after the copy; an absent id None.
        (Events are compared by id, which encryption leaves in clear.)"""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(3):
            session.add_event("user", index)
        await manager.save(session)
        lineage = await _lineage(manager, session_id)
        for index in range(3, 5):
            session.add_event("assistant", index)
        session.state["turn"] = 2
        await manager.save(session)
        ids = [event.id for event in session.events]

        loaded = await _since(manager, session_id, 3, lineage or _FOREIGN_LINEAGE)
        record = loaded.record
        assert (record.version, record.event_count) == (3, 5), (
            "_load_since() after create() and two saves (5 events) must return the current "
            "record: expected (version, event_count) (3, 5), found "
            f"{(record.version, record.event_count)}"
        )
        assert record.lineage == lineage, "an append changed the stored lineage"
        found = [event.id for event in loaded.events]
        allowed = [ids[3:], ids] if lineage else [ids]
        assert found in allowed, (
            f"_load_since(n=3) returned {len(found)} events that are neither the events "
            "after position 3 nor the whole history"
        )
        if lineage:
            same = await _since(manager, session_id, 5, lineage)
            assert [event.id for event in same.events] in ([], ids), (
                "_load_since(n=5) of an unchanged 5-event session must return no event after "
                f"the copy (or the whole history): it returned {len(same.events)} events"
            )
        assert (
            await manager._load_since(self.new_id(), 0, _FOREIGN_LINEAGE, manager.clock.now())
            is None
        ), "_load_since() of an id never stored must return None: it returned a session"

    async def test_load_since_after_a_rewrite_returns_every_event(
        self, manager: SessionManager
    ) -> None:
        """After a save that replaced stored events (the history grew back past the old
        length), ``_load_since`` with the old copy's count and lineage returns the whole
        new history, never the old copy's tail extended."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(3):
            session.add_event("user", index)
        await manager.save(session)
        lineage = await _lineage(manager, session_id)
        session.events[0] = Event(author="user", content="edited")
        for index in range(3, 5):
            session.add_event("assistant", index)
        await manager.save(session)

        loaded = await _since(manager, session_id, 3, lineage or _FOREIGN_LINEAGE)
        assert loaded.record.event_count == 5, (
            "_load_since() after a rewrite that left 5 events must return the current record: "
            f"expected event_count 5, found {loaded.record.event_count}"
        )
        assert [event.id for event in loaded.events] == [event.id for event in session.events], (
            "_load_since() extended a copy whose history was rewritten since"
        )
        assert not lineage or loaded.record.lineage != lineage, (
            "the stored lineage did not change when stored events were replaced"
        )

    async def test_update_retry_sees_a_rewritten_history(self, manager: SessionManager) -> None:
        """When update() loses a race to a save that rewrote earlier events, its retry
        hands fn the rewritten history and the state as stored, not its old copy extended."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(4):
            session.add_event("user", index)
        await manager.save(session)
        rival = await self.variant(manager) if manager.capabilities.shared else manager
        seen: list[list[object]] = []

        async def fn(copy: Session) -> None:
            seen.append([event.content for event in copy.events])
            if len(seen) == 1:
                other = await rival.get(session_id)
                assert other is not None, (
                    f"get({session_id!r}) from the rival returned None: a session just saved "
                    "must be found"
                )
                del other.events[1:]
                for index in range(4):
                    other.add_event("rival", f"r{index}")
                other.state["rival"] = True
                await rival.save(other)
            copy.add_event("user", "mine")

        done = await manager.update(session_id, fn)
        assert seen == [[0, 1, 2, 3], [0, "r0", "r1", "r2", "r3"]], (
            "update() that lost a race to a rewrite must call fn first with the history it "
            "loaded, then once with the rewritten history as stored: expected "
            f"[[0, 1, 2, 3], [0, 'r0', 'r1', 'r2', 'r3']], fn saw {seen[:4]!r}"
        )
        assert done.state == {"rival": True}, (
            "update()'s retry must start from the state as stored by the rival: expected "
            f"{{'rival': True}}, update() returned state {done.state!r}"
        )
        assert _contents(await self.readback(manager, session_id)) == [
            0, "r0", "r1", "r2", "r3", "mine",
        ], (
            "update()'s retry must append to the rewritten history: expected the stored events "
            "[0, 'r0', 'r1', 'r2', 'r3', 'mine']"
        )  # fmt: skip
        await self.check_positions(manager, session_id, 6)

    async def test_update_retry_sees_a_session_deleted_and_created_again(
        self, manager: SessionManager
    ) -> None:
        """When the session is deleted and created again (and grows past the old copy)
        between update()'s load and save, the retry sees only the new session's events."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(2):
            session.add_event("user", index)
        await manager.save(session)
        rival = await self.variant(manager) if manager.capabilities.shared else manager
        seen: list[list[object]] = []

        async def fn(copy: Session) -> None:
            seen.append([event.content for event in copy.events])
            if len(seen) == 1:
                assert await rival.delete(session_id), (
                    f"delete({session_id!r}) from the rival must return True for a stored "
                    "session: it returned a false value"
                )
                reborn = await rival.create(session_id)
                for index in range(3):
                    reborn.add_event("new", f"n{index}")
                await rival.save(reborn)
                reborn.add_event("new", "n3")
                await rival.save(reborn)
            copy.add_event("user", "mine")

        done = await manager.update(session_id, fn)
        assert seen == [[0, 1], ["n0", "n1", "n2", "n3"]], (
            "update() that lost a race to a delete and create must retry with only the new "
            "session's events: expected fn to see [[0, 1], ['n0', 'n1', 'n2', 'n3']], it saw "
            f"{seen[:4]!r}"
        )
        assert done.version == 4, (
            "update()'s retry must save on top of the new session (created at 1, saved twice): "
            f"expected version 4, update() returned version {done.version}"
        )
        assert _contents(await self.readback(manager, session_id)) == [
            "n0", "n1", "n2", "n3", "mine",
        ], (
            "update()'s retry must append to the new session's events only: expected the "
            "stored events ['n0', 'n1', 'n2', 'n3', 'mine']"
        )  # fmt: skip
        await self.check_positions(manager, session_id, 5)

    async def test_update_retry_on_a_tail_extends_it(self, manager: SessionManager) -> None:
        """update(last_events=N) that loses a race to appends retries on the newest N
        events as stored (positions included), and its append lands after them."""
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(5):
            session.add_event("user", index)
        await manager.save(session)
        rival = await self.variant(manager) if manager.capabilities.shared else manager
        seen: list[tuple[int, list[object]]] = []

        async def fn(copy: Session) -> None:
            seen.append((copy.first_event_position, [event.content for event in copy.events]))
            if len(seen) == 1:
                await rival.update(session_id, lambda s: s.add_event("rival", "r"))
            copy.add_event("user", "mine")

        await manager.update(session_id, fn, last_events=2)
        assert seen == [(3, [3, 4]), (4, [4, "r"])], (
            "update(last_events=2) that lost a race to an append must retry on the newest 2 "
            "events as stored, positions included: expected fn to see "
            f"[(3, [3, 4]), (4, [4, 'r'])] as (first_event_position, contents), it saw {seen[:4]!r}"
        )
        assert _contents(await self.readback(manager, session_id)) == [
            0, 1, 2, 3, 4, "r", "mine",
        ], (
            "update(last_events=2)'s retry must append after the rival's event: expected the "
            "stored events [0, 1, 2, 3, 4, 'r', 'mine']"
        )  # fmt: skip
        await self.check_positions(manager, session_id, 7)

    async def test_update_retry_sees_a_compacted_history(self, manager: SessionManager) -> None:
        """When a compaction (which replaces the oldest events) lands between update()'s
        load and save, and the history grows back past the old copy, the retry sees the
        compacted history as stored, not the old copy extended."""
        self.require(manager, "compaction")
        session_id = self.new_id()
        session = await manager.create(session_id)
        for index in range(4):
            session.add_event("user", index)
        await manager.save(session)
        rival = await self.variant(manager) if manager.capabilities.shared else manager
        seen: list[list[object]] = []

        async def fn(copy: Session) -> None:
            seen.append([event.content for event in copy.events])
            if len(seen) == 1:
                other = await rival.get(session_id)
                assert other is not None, (
                    f"get({session_id!r}) from the rival returned None: a session just saved "
                    "must be found"
                )
                summary = Event(author="summary", content="s")
                await rival.compact(other, other.events[1].id, [summary])
                # Appended through a fresh copy: it carries the lineage the store holds.
                more = await rival.get(session_id)
                assert more is not None, (
                    f"get({session_id!r}) from the rival after compact() returned None: the "
                    "compacted session must be found"
                )
                for index in range(3):
                    more.add_event("rival", f"r{index}")
                await rival.save(more)
            copy.add_event("user", "mine")

        await manager.update(session_id, fn)
        assert seen == [[0, 1, 2, 3], ["s", 2, 3, "r0", "r1", "r2"]], (
            "update() that lost a race to a compaction must retry with the compacted history "
            "as stored: expected fn to see [[0, 1, 2, 3], ['s', 2, 3, 'r0', 'r1', 'r2']], it "
            f"saw {seen[:4]!r}"
        )
        assert _contents(await self.readback(manager, session_id)) == [
            "s", 2, 3, "r0", "r1", "r2", "mine",
        ], (
            "update()'s retry must append to the compacted history: expected the stored events "
            "['s', 2, 3, 'r0', 'r1', 'r2', 'mine']"
        )  # fmt: skip
