"""restore(): a whole session stored exactly as given, atomically, never over another."""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import (
    Event,
    InvalidInputError,
    Session,
    SessionExistsError,
    SessionManager,
    SessionSerializationError,
)

from ._base import SuiteBase, snapshot
from ._tests_ttl import PAST_TTL, TTL

# Far from now and with microseconds, so a backend that stamps its own clock, or rounds
# to milliseconds or seconds, is caught.
_BORN = datetime(2021, 3, 4, 5, 6, 7, 123457, tzinfo=timezone.utc)


def _exported(
    session_id: str, user_id: str | None, *, events: int = 3, version: int = 7
) -> Session:
    """A session as an export from another store holds it."""
    return Session(
        session_id=session_id,
        user_id=user_id,
        events=[
            Event(
                id=f"ev-{index:04d}-{session_id[-6:]}",
                author="user" if index % 2 else "assistant",
                content={"n": index, "text": f"message {index}"},
                timestamp=_BORN + timedelta(minutes=index, microseconds=index),
                metadata={"i": index},
            )
            for index in range(events)
        ],
        state={"plan": ["a", "b"], "count": events},
        created_at=_BORN,
        updated_at=_BORN + timedelta(days=1, microseconds=11),
        version=version,
    )


class RestoreTests(SuiteBase):
    async def test_restore_keeps_every_field(self, manager: SessionManager) -> None:
        """restore() stores id, owner, state, timestamps, version and events exactly."""
        original = _exported(self.new_id(), self.new_user())
        restored = await manager.restore(original)
        assert snapshot(restored) == snapshot(original), (
            "restore() must return the session exactly as given: expected version "
            f"{original.version}, created_at {original.created_at.isoformat()} and "
            f"{len(original.events)} events, it returned version {restored.version}, "
            f"created_at {restored.created_at.isoformat()} and {len(restored.events)} events"
        )
        stored = await self.readback(manager, original.session_id)
        assert stored is not None, "the restored session is not stored"
        assert snapshot(stored) == snapshot(original), (
            "restore() must store id, owner, state, timestamps, version and events exactly: "
            f"expected version {original.version}, created_at "
            f"{original.created_at.isoformat()}, updated_at {original.updated_at.isoformat()} "
            f"and {len(original.events)} events, read back version {stored.version}, "
            f"created_at {stored.created_at.isoformat()}, updated_at "
            f"{stored.updated_at.isoformat()} and {len(stored.events)} events"
        )
        await self.check_positions(manager, original.session_id, len(original.events))

    async def test_restore_is_listed_with_its_own_times(self, manager: SessionManager) -> None:
        """Listing reports a restored session's created_at, updated_at, version and count."""
        user = self.new_user()
        original = _exported(self.new_id(), user, events=2, version=3)
        await manager.restore(original)
        (summary,) = (await manager.list_sessions(user_id=user)).items
        assert (summary.created_at, summary.updated_at) == (
            original.created_at,
            original.updated_at,
        ), (
            "list_sessions() must report a restored session's own times, not the restore's: "
            f"expected created_at {original.created_at.isoformat()} and updated_at "
            f"{original.updated_at.isoformat()}, found {summary.created_at.isoformat()} and "
            f"{summary.updated_at.isoformat()}"
        )
        assert (summary.version, summary.event_count) == (3, 2), (
            "list_sessions() must report a restored session's own version and event count: "
            f"expected version=3 and event_count=2, found version={summary.version} and "
            f"event_count={summary.event_count}"
        )

    async def test_restore_keeps_listing_order(self, manager: SessionManager) -> None:
        """Sessions restored in any order list newest created first, as in their source."""
        user = self.new_user()
        originals = []
        for index in range(6):
            session = _exported(self.new_id(), user, events=1)
            session.created_at = _BORN + timedelta(seconds=index)
            originals.append(session)
        shuffled = list(originals)
        random.Random(17).shuffle(shuffled)
        for session in shuffled:
            await manager.restore(session)
        page = await manager.list_sessions(user_id=user)
        listed = [item.session_id for item in page.items]
        assert listed == [s.session_id for s in reversed(originals)], (
            "list_sessions() must list restored sessions newest created first (by their own "
            "created_at), whatever order they were restored in: expected "
            f"{[s.session_id for s in reversed(originals)]!r}, found {listed[:8]!r}"
        )

    async def test_restored_session_saves_on(self, manager: SessionManager) -> None:
        """A restored session saves like any: the version goes on from its own."""
        original = _exported(self.new_id(), self.new_user(), version=5)
        restored = await manager.restore(original)
        restored.add_event("user", "after the move")
        await manager.save(restored)
        stored = await self.readback(manager, original.session_id)
        assert stored is not None, (
            f"get({original.session_id!r}) (read-back) returned None after save() of a "
            "restored session: the session must still be found"
        )
        assert stored.version == 6, (
            "save() of a session restored at version 5 must go on from its own version: "
            f"expected version 6, found {stored.version}"
        )
        assert [e.id for e in stored.events[:-1]] == [e.id for e in original.events], (
            "save() of a restored session with one event appended must keep the restored "
            f"events: expected ids {[e.id for e in original.events][:8]!r} before the new "
            f"event, found {[e.id for e in stored.events[:-1]][:8]!r}"
        )
        assert stored.events[-1].content == "after the move", (
            "save() of a restored session must store the appended event last: expected "
            f"'after the move', found {stored.events[-1].content!r:.100}"
        )
        assert stored.created_at == original.created_at, (
            "save() of a restored session must keep its own created_at: expected "
            f"{original.created_at.isoformat()}, found {stored.created_at.isoformat()}"
        )
        assert stored.updated_at > original.updated_at, (
            "save() of a restored session must stamp a later updated_at: expected one after "
            f"{original.updated_at.isoformat()}, found {stored.updated_at.isoformat()}"
        )

    async def test_restore_never_overwrites(self, manager: SessionManager) -> None:
        """restore() of a stored id raises SessionExistsError; the stored one is untouched."""
        session_id = self.new_id()
        first = await manager.create(session_id, self.new_user(), state={"who": "first"})
        first.add_event("user", "mine")
        await manager.save(first)
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionExistsError):
            await manager.restore(_exported(session_id, self.new_user(), events=4))
        assert snapshot(await self.readback(manager, session_id)) == before, (
            "restore() must never overwrite: after it raised SessionExistsError, expected "
            f"{session_id!r} to read back exactly as before, the stored session differs"
        )

    async def test_restore_of_many_events(self, manager: SessionManager) -> None:
        """A long history is restored whole, in order (past any per-command batch size)."""
        original = _exported(self.new_id(), None, events=2500)
        await manager.restore(original)
        stored = await self.readback(manager, original.session_id)
        assert stored is not None, (
            f"get({original.session_id!r}) (read-back) returned None: a session restored with "
            f"{len(original.events)} events must be found"
        )
        assert [e.id for e in stored.events] == [e.id for e in original.events], (
            f"restore() of {len(original.events)} events must store them all, in order: read "
            f"back {len(stored.events)} events, the first ids "
            f"{[e.id for e in stored.events[:4]]!r} and the last "
            f"{[e.id for e in stored.events[-2:]]!r}"
        )
        assert snapshot(stored) == snapshot(original), (
            f"restore() of {len(original.events)} events must store every field exactly: the "
            "events' ids are right but the stored session differs from the one restored "
            f"(version {stored.version}, expected {original.version})"
        )
        tail = await manager.get(original.session_id, last_events=3)
        assert tail is not None, (
            f"get({original.session_id!r}, last_events=3) returned None: a restored session "
            "must be found"
        )
        assert [e.id for e in tail.events] == [e.id for e in original.events[-3:]], (
            "get(last_events=3) of a restored session must return its last 3 events: expected "
            f"{[e.id for e in original.events[-3:]]!r}, found {[e.id for e in tail.events[:8]]!r}"
        )

    @pytest.mark.parametrize("problem", ["duplicate_event_id", "not_json", "version_0"])
    async def test_restore_bad_input_writes_nothing(
        self, manager: SessionManager, problem: str
    ) -> None:
        """Bad input is refused naming the problem, and nothing at all is stored."""
        session = _exported(self.new_id(), self.new_user())
        expected: type[Exception] = InvalidInputError
        if problem == "duplicate_event_id":
            session.events.append(session.events[0].model_copy(update={"content": "again"}))
            match = "duplicate event id"
        elif problem == "not_json":
            session.events.append(Event(author="user", content={"when": _BORN}))
            expected, match = SessionSerializationError, r"events\[3\]\.content"
        else:
            session.version = 0
            match = "version"
        with pytest.raises(expected, match=match):
            await manager.restore(session)
        assert await self.readback(manager, session.session_id) is None, (
            f"a restore() refused for {problem} must store nothing: expected "
            f"get({session.session_id!r}) to return None, found a session"
        )

    async def test_concurrent_restores_one_wins(self, manager: SessionManager) -> None:
        """Of N concurrent restores of one id exactly one succeeds; the others write nothing."""
        session_id = self.new_id()
        candidates = [_exported(session_id, f"user-{n}", events=n + 1) for n in range(5)]
        results = await asyncio.gather(
            *(manager.restore(c) for c in candidates), return_exceptions=True
        )
        winners = [i for i, r in enumerate(results) if isinstance(r, Session)]
        assert len(winners) == 1, (
            f"of {len(candidates)} concurrent restore()s of one id exactly one must succeed: "
            f"{len(winners)} did; outcomes: {[repr(r)[:80] for r in results]}"
        )
        assert all(
            isinstance(r, SessionExistsError) for i, r in enumerate(results) if i != winners[0]
        ), (
            f"of {len(candidates)} concurrent restore()s of one id, every loser must raise "
            f"SessionExistsError: outcomes {[repr(r)[:120] for r in results]}"
        )
        stored = await self.readback(manager, session_id)
        assert snapshot(stored) == snapshot(candidates[winners[0]]), (
            "the stored session must be the winning restore()'s, whole (the losers write "
            f"nothing): expected candidate {winners[0]} with {winners[0] + 1} events, read back "
            f"{'None' if stored is None else f'{len(stored.events)} events'}"
        )

    async def test_restore_expiry_counts_from_now(self, manager: SessionManager) -> None:
        """With a ttl, a restored session lives ttl from the restore, whatever its updated_at."""
        self.require(manager, "ttl")
        expiring = await self.frozen(manager, ttl=TTL)
        original = _exported(self.new_id(), self.new_user())
        await expiring.restore(original)
        self.clock.advance(TTL - 0.001)
        stored = await expiring.get(original.session_id)
        assert stored is not None, "a restored session expired before its ttl from the restore"
        assert stored.updated_at == original.updated_at, (
            "restore() must keep the session's own updated_at even with a ttl: expected "
            f"{original.updated_at.isoformat()}, found {stored.updated_at.isoformat()}"
        )
        self.clock.advance(0.002)
        assert await expiring.get(original.session_id) is None, (
            "a restored session must expire with its ttl, counted from the restore: expected "
            f"get({original.session_id!r}) to return None 1 ms past the ttl ({TTL:g} s), "
            "found a session"
        )

    async def test_restore_replaces_an_expired_session(self, manager: SessionManager) -> None:
        """restore() of an expired session's id succeeds and holds only the restored data."""
        self.require(manager, "ttl")
        expiring = await self.frozen(manager, ttl=TTL)
        session_id = self.new_id()
        old = await expiring.create(session_id, state={"old": True})
        for index in range(4):
            old.add_event("user", f"old {index}")
        await expiring.save(old)
        self.clock.advance(PAST_TTL)
        original = _exported(session_id, self.new_user(), events=2)
        await expiring.restore(original)
        stored = await expiring.get(session_id)
        assert snapshot(stored) == snapshot(original), (
            f"restore() over an expired session's id must hold only the restored data: "
            f"expected {len(original.events)} events and state {original.state!r}, found "
            + (
                "None"
                if stored is None
                else f"{len(stored.events)} events and state {stored.state!r:.100}"
            )
        )
        await self.check_positions(expiring, session_id, 2)
