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
        assert stored_a is not None and stored_b is not None, (
            "get() (read-back) of two sessions just saved must find both: "
            f"{a.session_id!r} -> {'None' if stored_a is None else 'found'}, "
            f"{b.session_id!r} -> {'None' if stored_b is None else 'found'}"
        )
        assert [e.content for e in stored_a.events] == ["alice secret"], (
            "sessions must never share events: expected alice's session to hold only "
            f"['alice secret'], found {[e.content for e in stored_a.events[:8]]!r}"
        )
        assert [e.content for e in stored_b.events] == ["bob secret", "bob again"], (
            "sessions must never share events: expected bob's session to hold "
            f"['bob secret', 'bob again'], found {[e.content for e in stored_b.events[:8]]!r}"
        )
        assert stored_a.state == {"owner": "alice"} and stored_b.state == {"owner": "bob"}, (
            "sessions must never share state: expected {'owner': 'alice'} and "
            f"{{'owner': 'bob'}}, found {stored_a.state!r:.100} and {stored_b.state!r:.100}"
        )
        window = await manager.get(a.session_id, last_events=5)
        assert window is not None and [e.content for e in window.events] == ["alice secret"], (
            f"get({a.session_id!r}, last_events=5) must return alice's one event only: "
            "expected ['alice secret'], found "
            f"{None if window is None else [e.content for e in window.events[:8]]!r}"
        )

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
        assert stored_first is not None and stored_second is not None, (
            "get() (read-back) of two sessions of one user just saved must find both: "
            f"{first.session_id!r} -> {'None' if stored_first is None else 'found'}, "
            f"{second.session_id!r} -> {'None' if stored_second is None else 'found'}"
        )
        assert [e.content for e in stored_first.events] == ["first only"], (
            "two sessions of one user must never share events: expected the first to hold "
            f"['first only'], found {[e.content for e in stored_first.events[:8]]!r}"
        )
        assert [e.content for e in stored_second.events] == ["second only"], (
            "two sessions of one user must never share events: expected the second to hold "
            f"['second only'], found {[e.content for e in stored_second.events[:8]]!r}"
        )
        assert (stored_first.state, stored_second.state) == ({"n": 1}, {"n": 2}), (
            "two sessions of one user must never share state: expected {'n': 1} and "
            f"{{'n': 2}}, found {stored_first.state!r:.100} and {stored_second.state!r:.100}"
        )

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
        assert (await manager.list_sessions(user_id=bob)).items == [], (
            "list_sessions(user_id=bob) must not list alice's session: bob has no sessions, "
            "found some"
        )
        assert await manager.delete_user(bob) == 0, (
            "delete_user(bob) must not count or erase alice's session: expected 0"
        )
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            "another user's get(), update() and delete() must raise SessionOwnershipError and "
            f"change nothing: expected {session.session_id!r} to read back as before, the "
            "stored session differs"
        )

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
        assert await right.get(session_id) is None, (
            f"namespaces must never see each other: get({session_id!r}) in another namespace "
            "than the one it was saved in must return None, found a session"
        )
        assert await right.get(only_left) is None, (
            f"namespaces must never see each other: get({only_left!r}) in another namespace "
            "than the one it was created in must return None, found a session"
        )
        assert (await right.list_sessions()).items == [], (
            "list_sessions() in a fresh namespace must list nothing of another namespace: "
            "found sessions"
        )
        assert (await right.list_sessions(user_id=user)).items == [], (
            "list_sessions(user_id=...) in a fresh namespace must list nothing of the user's "
            "sessions in another namespace: found sessions"
        )
        in_right = await right.create(session_id, user, state={"side": "right"})
        assert in_right.version == 1, (
            f"create({session_id!r}) in a second namespace must make a new session, not reuse "
            f"the other namespace's: expected version 1, found {in_right.version}"
        )
        assert await right.delete_user(user) == 1, (
            "delete_user() must count and erase only the user's sessions in its own namespace: "
            "expected 1, the one session created there"
        )
        stored_left = await left.get(session_id)
        assert stored_left is not None, (
            f"get({session_id!r}) in its own namespace returned None: a create() or "
            "delete_user() in another namespace must never erase it"
        )
        assert stored_left.state == {"side": "left"}, (
            "one id in two namespaces is two sessions: expected the first namespace's state "
            f"{{'side': 'left'}}, found {stored_left.state!r:.100}"
        )
        assert [e.content for e in stored_left.events] == ["left"], (
            "one id in two namespaces is two sessions: expected the first namespace's events "
            f"['left'], found {[e.content for e in stored_left.events[:8]]!r}"
        )
        assert {i.session_id for i in (await left.list_sessions(user_id=user)).items} == {
            session_id,
            only_left,
        }, (
            "list_sessions(user_id=...) must still list both of the user's sessions in the "
            "first namespace after delete_user() in another: expected "
            f"{sorted([session_id, only_left])!r}"
        )
        assert await right.delete(only_left) is False, (
            f"delete({only_left!r}) in another namespace than its own must return False"
        )
        assert await left.get(only_left) is not None, (
            f"get({only_left!r}) in its own namespace returned None: a delete() in another "
            "namespace must never erase it"
        )
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
                assert owned is not None and owned.user_id == alice, (
                    f"get({sid!r}, user_id=<owner>, last_events={tail}) must return the owner's "
                    "session: found "
                    f"{'None' if owned is None else f'user_id {owned.user_id!r}'}"
                )
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
            assert snapshot(await self.readback(space, sid)) == before, (
                "every refused call of another user (get, get_or_create, update, session(), "
                f"delete) must change nothing: expected {sid!r} to read back as before, the "
                "stored session differs"
            )
            await self.check_positions(space, sid, 3)
