"""update() and the session() context manager: read-modify-write without lost updates."""

from __future__ import annotations

import asyncio

import pytest
from agentsessions import (
    Session,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
    SessionOwnershipError,
)

from ._base import SuiteBase, pictured, snapshot


class _Boom(Exception):
    pass


class UpdateTests(SuiteBase):
    async def test_update_concurrent_appends_all_land(self, manager: SessionManager) -> None:
        """20 concurrent update() calls appending one event each, each loading and saving
        on its own (``group=False``), so that their saves race in the backend: all 20
        land, none twice."""
        session_id = self.new_id()
        await manager.create(session_id)
        appended: list[str] = []

        async def append(i: int) -> None:
            def add(session: Session) -> None:
                session.add_event("worker", f"w{i}")

            done = await manager.update(session_id, add, group=False)
            appended.append(done.events[-1].id)

        await asyncio.gather(*(append(i) for i in range(20)))
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after 20 update() calls) returned None: the "
            "session must still be found"
        )
        assert sorted(e.content for e in stored.events) == sorted(f"w{i}" for i in range(20)), (
            "20 concurrent update(group=False) calls appending one event each must all land, "
            f"none lost or doubled: expected w0..w19 (in any order), read back "
            f"{len(stored.events)} events {sorted(str(e.content) for e in stored.events)[:8]!r}"
        )
        assert len({e.id for e in stored.events}) == 20, (
            "20 concurrent update(group=False) calls appending one event each must store 20 "
            f"distinct event ids, read back {len({e.id for e in stored.events})} distinct ids "
            f"among {len(stored.events)} events"
        )
        assert sorted(appended) == sorted(e.id for e in stored.events), (
            "each of 20 concurrent update() calls must return the session with its own event, "
            "as stored: the ids of the events the calls appended "
            f"({len(appended)}) differ from the {len(stored.events)} ids read back; "
            f"returned but not stored: {sorted(set(appended) - {e.id for e in stored.events})[:8]}"
        )
        assert stored.version == 21, (
            "20 update(group=False) calls on a new session (version 1) must save 20 times, "
            f"one version each: expected version 21, read back {stored.version}"
        )
        await self.check_positions(manager, session_id, 20)

    async def test_update_concurrent_calls_share_saves(self, manager: SessionManager) -> None:
        """20 concurrent update() calls of one manager on one session share saves: the
        first is saved alone, the 19 that waited for it in one save, each function seeing
        what the earlier ones did (as if run one after the other, in call order)."""
        session_id = self.new_id()
        await manager.create(session_id, state={"count": 0})
        returned: dict[int, Session] = {}

        async def call(i: int) -> None:
            async def add(session: Session) -> None:
                await asyncio.sleep(0)  # the later calls arrive while this one is in flight
                count = session.state["count"]
                session.add_event("worker", f"n{count}", caller=i)
                session.state["count"] = count + 1

            returned[i] = await manager.update(session_id, add)

        await asyncio.gather(*(call(i) for i in range(20)))
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after 20 update() calls) returned None: the "
            "session must still be found"
        )
        assert [e.content for e in stored.events] == [f"n{k}" for k in range(20)], (
            "20 concurrent update() calls that each read state['count'] and append "
            "f'n{count}' must each see what the earlier ones did: expected n0..n19 in order, "
            f"read back {len(stored.events)} events "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        assert [e.metadata["caller"] for e in stored.events] == list(range(20)), (
            "20 concurrent update() calls sharing saves must apply their functions in call "
            "order: expected callers 0..19, read back "
            f"{[e.metadata['caller'] for e in stored.events]!r}"
        )
        assert stored.state == {"count": 20}, (
            "20 concurrent update() calls each incrementing state['count'] must all land: "
            f"expected {{'count': 20}}, read back {stored.state!r}"
        )
        assert stored.version == 3, f"{stored.version - 1} saves for 20 calls (2 expected)"
        for i, done in returned.items():
            assert i in {e.metadata["caller"] for e in done.events}, f"call {i}: not in its result"
        await self.check_positions(manager, session_id, 20)
        # Each result is the caller's own copy, tracked: changed and saved, it lands.
        returned[5].add_event("user", "after")
        await manager.save(returned[5])
        again = await self.readback(manager, session_id)
        assert again is not None and [e.content for e in again.events][-1] == "after", (
            "the session an update() call returns must be the caller's own tracked copy: "
            "changed and passed to save(), it must land, so the last stored event must be "
            "'after', found "
            f"{'no session' if again is None else repr([e.content for e in again.events][-1])}"
        )
        assert len(returned[6].events) == 20, (  # another caller's copy is untouched
            "each update() call must return its own copy: saving call 5's result must not "
            "change call 6's, which must still hold 20 events, found "
            f"{len(returned[6].events)}"
        )

    async def test_update_grouped_failure_fails_only_its_call(
        self, manager: SessionManager
    ) -> None:
        """In a group of concurrent update() calls, a function that raises (after half
        changing the copy) fails its own call only: the others all land, in call order,
        and nothing of the failed one is written."""
        session_id = self.new_id()
        await manager.create(session_id)

        async def call(i: int) -> None:
            async def add(session: Session) -> None:
                await asyncio.sleep(0)
                session.add_event("worker", f"w{i}")
                if i in (0, 3):
                    session.state["half"] = True
                    raise _Boom

            await manager.update(session_id, add)

        outcomes = await asyncio.gather(*(call(i) for i in range(6)), return_exceptions=True)
        assert [isinstance(o, _Boom) for o in outcomes] == [i in (0, 3) for i in range(6)], (
            "in a group of 6 concurrent update() calls, exactly the calls whose function "
            "raised (0 and 3) must fail, each with its own exception: expected outcomes "
            "[_Boom, None, None, _Boom, None, None], found "
            f"{[type(o).__name__ if isinstance(o, BaseException) else o for o in outcomes]!r}"
        )
        assert all(o is None for i, o in enumerate(outcomes) if i not in (0, 3)), outcomes
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after 6 update() calls) returned None: the "
            "session must still be found"
        )
        assert [e.content for e in stored.events] == ["w1", "w2", "w4", "w5"], (
            "in a group of 6 concurrent update() calls where calls 0 and 3 raise, the other "
            "4 must land in call order and nothing of the failed ones: expected "
            f"['w1', 'w2', 'w4', 'w5'], read back {[e.content for e in stored.events[:8]]!r}"
        )
        assert stored.state == {}, (
            "an update() whose function raised must write nothing of what it half changed: "
            f"expected state {{}}, read back {stored.state!r}"
        )

    async def test_update_accepts_sync_and_async_fn(self, manager: SessionManager) -> None:
        """update() applies a sync or an async function and saves the result."""
        session_id = self.new_id()
        await manager.create(session_id)

        def sync_fn(session: Session) -> None:
            session.state["sync"] = True

        async def async_fn(session: Session) -> None:
            await asyncio.sleep(0)
            session.state["async"] = True
            session.add_event("tool", "async")

        first = await manager.update(session_id, sync_fn)
        second = await manager.update(session_id, async_fn)
        assert first.state == {"sync": True}, (
            "update() with a sync function must return the session it changed: expected "
            f"state {{'sync': True}}, found {first.state!r}"
        )
        assert second.version == 3, (
            "two update() calls on a new session (version 1) must each save once: expected "
            f"the second to return version 3, found {second.version}"
        )
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after update()) returned None: the session "
            "must still be found"
        )
        assert stored.state == {"sync": True, "async": True}, (
            "update() with a sync, then an async function must save both changes: expected "
            f"state {{'sync': True, 'async': True}}, read back {stored.state!r}"
        )
        assert [e.content for e in stored.events] == ["async"], (
            "update() with an async function must save the event it appended: expected "
            f"['async'], read back {[e.content for e in stored.events[:8]]!r}"
        )

    async def test_update_absent_raises_not_found(self, manager: SessionManager) -> None:
        """update() of an absent session raises SessionNotFoundError and creates nothing."""
        session_id = self.new_id()
        calls: list[Session] = []
        with pytest.raises(SessionNotFoundError):
            await manager.update(session_id, calls.append)
        assert calls == [], (
            f"update({session_id!r}, fn) of an absent session must raise SessionNotFoundError "
            f"without calling fn, yet fn was called {len(calls)} time(s)"
        )
        assert await self.readback(manager, session_id) is None, (
            "update() of an absent session must create nothing: expected "
            f"get({session_id!r}) to return None, found a session"
        )

    async def test_update_create_true_creates(self, manager: SessionManager) -> None:
        """update(create=True) creates an absent session for the user and saves fn's change."""
        session_id, user = self.new_id(), self.new_user()

        def add(session: Session) -> None:
            session.add_event("user", "first")

        result = await manager.update(session_id, add, user_id=user, create=True)
        assert result.version == 2, (
            "update(create=True) of an absent id must create the session (version 1) and "
            f"save fn's change once: expected version 2, found {result.version}"
        )
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"update({session_id!r}, fn, create=True) must create the session, yet get() "
            "(read-back) returned None"
        )
        assert stored.user_id == user, (
            "update(user_id=..., create=True) must create the session for that user: "
            f"expected user_id {user!r}, read back {stored.user_id!r}"
        )
        assert [e.content for e in stored.events] == ["first"], (
            "update(create=True) must save the event fn appended: expected ['first'], read "
            f"back {[e.content for e in stored.events[:8]]!r}"
        )

    async def test_update_enforces_ownership(self, manager: SessionManager) -> None:
        """update(user_id=other) raises SessionOwnershipError and writes nothing."""
        session_id, owner = self.new_id(), self.new_user()
        await manager.create(session_id, owner)
        before = snapshot(await self.readback(manager, session_id))

        def add(session: Session) -> None:
            session.add_event("intruder", "x")

        with pytest.raises(SessionOwnershipError):
            await manager.update(session_id, add, user_id=self.new_user())
        with pytest.raises(SessionOwnershipError):
            await manager.update(session_id, add, user_id=self.new_user(), create=True)
        assert snapshot(await self.readback(manager, session_id)) == before, (
            "update(user_id=<another user>), with or without create=True, must raise "
            "SessionOwnershipError and write nothing: expected the stored session to stay "
            f"{pictured(before)}, but what get() reads back now differs"
        )

    async def test_session_context_saves_on_exit(self, manager: SessionManager) -> None:
        """``async with manager.session(id)`` gets or creates, and saves on normal exit."""
        session_id, user = self.new_id(), self.new_user()
        async with manager.session(session_id, user_id=user) as session:
            session.add_event("user", "one")
            session.state["n"] = 1
        async with manager.session(session_id, user_id=user) as session:
            assert [e.content for e in session.events] == ["one"], (
                "leaving `async with manager.session(id)` normally must save the session: a "
                "second `async with` must load ['one'], found "
                f"{[e.content for e in session.events[:8]]!r}"
            )
            session.add_event("user", "two")
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"`async with manager.session({session_id!r})` must create the session, yet get() "
            "(read-back) returned None"
        )
        assert stored.user_id == user, (
            "`async with manager.session(id, user_id=...)` must create the session for that "
            f"user: expected user_id {user!r}, read back {stored.user_id!r}"
        )
        assert stored.state == {"n": 1}, (
            "leaving `async with manager.session(id)` normally must save the state: expected "
            f"{{'n': 1}}, read back {stored.state!r}"
        )
        assert [e.content for e in stored.events] == ["one", "two"], (
            "two `async with manager.session(id)` blocks, each appending one event, must save "
            f"both: expected ['one', 'two'], read back {[e.content for e in stored.events[:8]]!r}"
        )

    async def test_session_context_saves_nothing_on_exception(
        self, manager: SessionManager
    ) -> None:
        """An exception inside ``async with manager.session(id)`` saves nothing."""
        session = await self.session_with_events(manager, 1)
        before = snapshot(await self.readback(manager, session.session_id))

        async def fail_inside() -> None:
            async with manager.session(session.session_id) as inside:
                inside.add_event("user", "lost")
                inside.state["lost"] = True
                raise _Boom

        with pytest.raises(_Boom):
            await fail_inside()
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "an exception inside `async with manager.session(id)` must save nothing: "
            f"expected the stored session to stay {pictured(before)}, but what get() reads "
            "back now differs"
        )

    async def test_update_retries_a_lost_race(self, manager: SessionManager) -> None:
        """When update()'s save loses a race (a rival save lands between its load and its
        save) it reloads, applies fn to the new version and saves: both changes land once;
        with retries=0 the SessionConflictError is raised and nothing of fn is written."""
        session_id = self.new_id()
        await manager.create(session_id)
        rival = await self.variant(manager) if manager.capabilities.shared else manager
        seen_versions: list[int] = []

        async def fn(session: Session) -> None:
            seen_versions.append(session.version)
            if len(seen_versions) == 1:
                await rival.update(session_id, lambda s: s.add_event("rival", "first"))
            session.add_event("user", "mine")
            session.state["attempts"] = len(seen_versions)

        done = await manager.update(session_id, fn)
        assert seen_versions == [1, 2], "update() did not reload and retry after the lost race"
        assert done.version == 3, (
            "update() retrying after a lost race must save on top of the rival's save: "
            f"expected version 3 (create, rival, retry), found {done.version}"
        )
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after update()) returned None: the session "
            "must still be found"
        )
        assert [e.content for e in stored.events] == ["first", "mine"], (
            "update() retrying after a lost race must keep the rival's event and add its own "
            "once: expected ['first', 'mine'], read back "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        assert stored.state == {"attempts": 2} and stored.version == 3, (
            "update() retrying after a lost race must save only the retry's state, at version "
            f"3: expected state {{'attempts': 2}} and version 3, read back state "
            f"{stored.state!r} and version {stored.version}"
        )
        await self.check_positions(manager, session_id, 2)

        async def loser(session: Session) -> None:
            await rival.update(session_id, lambda s: s.add_event("rival", "second"))
            session.add_event("user", "lost")

        with pytest.raises(SessionConflictError):
            await manager.update(session_id, loser, retries=0)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back after update(retries=0)) returned None: the "
            "session must still be found"
        )
        assert [e.content for e in stored.events] == ["first", "mine", "second"], (
            "update(retries=0) that loses a race must raise SessionConflictError and write "
            "nothing of fn, leaving the rival's save: expected ['first', 'mine', 'second'], "
            f"read back {[e.content for e in stored.events[:8]]!r}"
        )
        await self.check_positions(manager, session_id, 3)
