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

from ._base import SuiteBase, snapshot


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
        assert stored is not None
        assert sorted(e.content for e in stored.events) == sorted(f"w{i}" for i in range(20))
        assert len({e.id for e in stored.events}) == 20
        assert sorted(appended) == sorted(e.id for e in stored.events)
        assert stored.version == 21
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
        assert stored is not None
        assert [e.content for e in stored.events] == [f"n{k}" for k in range(20)]
        assert [e.metadata["caller"] for e in stored.events] == list(range(20))
        assert stored.state == {"count": 20}
        assert stored.version == 3, f"{stored.version - 1} saves for 20 calls (2 expected)"
        for i, done in returned.items():
            assert i in {e.metadata["caller"] for e in done.events}, f"call {i}: not in its result"
        await self.check_positions(manager, session_id, 20)
        # Each result is the caller's own copy, tracked: changed and saved, it lands.
        returned[5].add_event("user", "after")
        await manager.save(returned[5])
        again = await self.readback(manager, session_id)
        assert again is not None and [e.content for e in again.events][-1] == "after"
        assert len(returned[6].events) == 20  # another caller's copy is untouched

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
        assert [isinstance(o, _Boom) for o in outcomes] == [i in (0, 3) for i in range(6)]
        assert all(o is None for i, o in enumerate(outcomes) if i not in (0, 3)), outcomes
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == ["w1", "w2", "w4", "w5"]
        assert stored.state == {}

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
        assert first.state == {"sync": True}
        assert second.version == 3
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.state == {"sync": True, "async": True}
        assert [e.content for e in stored.events] == ["async"]

    async def test_update_absent_raises_not_found(self, manager: SessionManager) -> None:
        """update() of an absent session raises SessionNotFoundError and creates nothing."""
        session_id = self.new_id()
        calls: list[Session] = []
        with pytest.raises(SessionNotFoundError):
            await manager.update(session_id, calls.append)
        assert calls == []
        assert await self.readback(manager, session_id) is None

    async def test_update_create_true_creates(self, manager: SessionManager) -> None:
        """update(create=True) creates an absent session for the user and saves fn's change."""
        session_id, user = self.new_id(), self.new_user()

        def add(session: Session) -> None:
            session.add_event("user", "first")

        result = await manager.update(session_id, add, user_id=user, create=True)
        assert result.version == 2
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.user_id == user
        assert [e.content for e in stored.events] == ["first"]

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
        assert snapshot(await self.readback(manager, session_id)) == before

    async def test_session_context_saves_on_exit(self, manager: SessionManager) -> None:
        """``async with manager.session(id)`` gets or creates, and saves on normal exit."""
        session_id, user = self.new_id(), self.new_user()
        async with manager.session(session_id, user_id=user) as session:
            session.add_event("user", "one")
            session.state["n"] = 1
        async with manager.session(session_id, user_id=user) as session:
            assert [e.content for e in session.events] == ["one"]
            session.add_event("user", "two")
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.user_id == user
        assert stored.state == {"n": 1}
        assert [e.content for e in stored.events] == ["one", "two"]

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
        assert snapshot(await self.readback(manager, session.session_id)) == before

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
        assert done.version == 3
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == ["first", "mine"]
        assert stored.state == {"attempts": 2} and stored.version == 3
        await self.check_positions(manager, session_id, 2)

        async def loser(session: Session) -> None:
            await rival.update(session_id, lambda s: s.add_event("rival", "second"))
            session.add_event("user", "lost")

        with pytest.raises(SessionConflictError):
            await manager.update(session_id, loser, retries=0)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == ["first", "mine", "second"]
        await self.check_positions(manager, session_id, 3)
