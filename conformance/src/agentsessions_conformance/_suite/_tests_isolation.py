"""Isolation: sessions, users and namespaces never see each other's data."""

from __future__ import annotations

import pytest
from agentsessions import SessionManager, SessionOwnershipError

from ._base import SuiteBase, snapshot


class IsolationTests(SuiteBase):
    async def test_sessions_do_not_share_events_or_state(self, manager: SessionManager) -> None:
        """Two sessions of two users never see each other's events or state."""
        alice, bob = self.new_user(), self.new_user()
        a = await manager.create(self.new_id(), alice, state={"owner": "alice"})
        b = await manager.create(self.new_id(), bob, state={"owner": "bob"})
        a.add_event("user", "alice secret")
        b.add_event("user", "bob secret")
        await manager.save(a)
        await manager.save(b)
        b.add_event("user", "bob again")
        await manager.save(b)
        stored_a = await self.readback(manager, a.session_id)
        stored_b = await self.readback(manager, b.session_id)
        assert stored_a is not None and stored_b is not None
        assert [e.content for e in stored_a.events] == ["alice secret"]
        assert [e.content for e in stored_b.events] == ["bob secret", "bob again"]
        assert stored_a.state == {"owner": "alice"} and stored_b.state == {"owner": "bob"}
        window = await manager.get(a.session_id, last_events=5)
        assert window is not None and [e.content for e in window.events] == ["alice secret"]

    async def test_sessions_of_one_user_do_not_share_events(self, manager: SessionManager) -> None:
        """Two sessions of the same user keep separate events and state."""
        user = self.new_user()
        first = await manager.create(self.new_id(), user, state={"n": 1})
        second = await manager.create(self.new_id(), user, state={"n": 2})
        first.add_event("user", "first only")
        await manager.save(first)
        second.add_event("user", "second only")
        await manager.save(second)
        stored_first = await self.readback(manager, first.session_id)
        stored_second = await self.readback(manager, second.session_id)
        assert stored_first is not None and stored_second is not None
        assert [e.content for e in stored_first.events] == ["first only"]
        assert [e.content for e in stored_second.events] == ["second only"]
        assert (stored_first.state, stored_second.state) == ({"n": 1}, {"n": 2})

    async def test_users_do_not_see_each_others_sessions(self, manager: SessionManager) -> None:
        """A user cannot get, list, update or delete another user's session."""
        alice, bob = self.new_user(), self.new_user()
        session = await self.session_with_events(manager, 1, user_id=alice)
        before = snapshot(await self.readback(manager, session.session_id))
        with pytest.raises(SessionOwnershipError):
            await manager.get(session.session_id, user_id=bob)
        with pytest.raises(SessionOwnershipError):
            await manager.update(session.session_id, lambda s: None, user_id=bob)
        with pytest.raises(SessionOwnershipError):
            await manager.delete(session.session_id, user_id=bob)
        assert (await manager.list_sessions(user_id=bob)).items == []
        assert await manager.delete_user(bob) == 0
        assert snapshot(await self.readback(manager, session.session_id)) == before

    async def test_namespaces_never_see_each_other(self, manager: SessionManager) -> None:
        """Namespaces on one store never see each other; one id in two is two sessions."""
        self.require(manager, "namespaces")
        left = await self.variant(manager, namespace=self.new_namespace())
        right = await self.variant(manager, namespace=self.new_namespace())
        session_id, user = self.new_id(), self.new_user()
        only_left = self.new_id()
        in_left = await left.create(session_id, user, state={"side": "left"})
        in_left.add_event("user", "left")
        await left.save(in_left)
        await left.create(only_left, user)
        assert await right.get(session_id) is None
        assert await right.get(only_left) is None
        assert (await right.list_sessions()).items == []
        assert (await right.list_sessions(user_id=user)).items == []
        in_right = await right.create(session_id, user, state={"side": "right"})
        assert in_right.version == 1
        assert await right.delete_user(user) == 1
        stored_left = await left.get(session_id)
        assert stored_left is not None
        assert stored_left.state == {"side": "left"}
        assert [e.content for e in stored_left.events] == ["left"]
        assert {i.session_id for i in (await left.list_sessions(user_id=user)).items} == {
            session_id,
            only_left,
        }
        assert await right.delete(only_left) is False
        assert await left.get(only_left) is not None
        assert await manager.get(only_left) is None, (
            "the default namespace sees another one's session"
        )

    async def test_ownership_holds_on_every_read_path(self, manager: SessionManager) -> None:
        """Another user's session raises SessionOwnershipError on get (full and last_events
        0, 1, more), get_or_create, update, session() and delete, in every namespace; the
        owner reads it on each path and nothing changes."""
        for space in await self.namespaced(manager):
            alice, bob = self.new_user(), self.new_user()
            session = await self.session_with_events(space, 3, user_id=alice)
            sid = session.session_id
            before = snapshot(await self.readback(space, sid))
            for tail in (None, 0, 1, 50):
                with pytest.raises(SessionOwnershipError):
                    await space.get(sid, user_id=bob, last_events=tail)
                owned = await space.get(sid, user_id=alice, last_events=tail)
                assert owned is not None and owned.user_id == alice
            with pytest.raises(SessionOwnershipError):
                await space.get_or_create(sid, bob)
            with pytest.raises(SessionOwnershipError):
                await space.update(sid, lambda s: s.add_event("user", "bob"), user_id=bob)
            with pytest.raises(SessionOwnershipError):
                await space.update(sid, lambda s: None, user_id=bob, create=True)
            with pytest.raises(SessionOwnershipError):
                async with space.session(sid, user_id=bob) as hijacked:
                    hijacked.add_event("user", "bob")
            with pytest.raises(SessionOwnershipError):
                await space.delete(sid, user_id=bob)
            assert snapshot(await self.readback(space, sid)) == before
            await self.check_positions(space, sid, 3)
