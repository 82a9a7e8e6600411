"""delete() and delete_user(): remove exactly what was asked, and say whether it existed."""

from __future__ import annotations

import pytest
from agentsessions import SessionManager, SessionOwnershipError

from ._base import SuiteBase, snapshot


class DeleteTests(SuiteBase):
    async def test_delete_returns_true_then_false(self, manager: SessionManager) -> None:
        """delete() returns True when it removed a session, then False."""
        session = await self.session_with_events(manager, 2)
        assert await manager.delete(session.session_id) is True, (
            f"delete({session.session_id!r}) of a stored session must return True: it returned "
            "something else"
        )
        assert await manager.delete(session.session_id) is False, (
            f"a second delete({session.session_id!r}) must return False (nothing was left to "
            "delete): it returned something else"
        )
        assert await manager.delete(self.new_id()) is False, (
            "delete() of an id never stored must return False: it returned something else"
        )
        assert await self.readback(manager, session.session_id) is None, (
            f"get({session.session_id!r}) (read-back) after delete() must return None: the "
            "session is still found"
        )

    async def test_delete_removes_events(self, manager: SessionManager) -> None:
        """A session created again after delete() starts empty: no events or state survive."""
        session = await self.session_with_events(manager, 3)
        session.state["old"] = True
        await manager.save(session)
        await manager.delete(session.session_id)
        again = await manager.create(session.session_id)
        assert again.version == 1, (
            f"create({session.session_id!r}) after delete() must start again at version 1: it "
            f"returned version {again.version}"
        )
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after create() following "
            "delete(): the new session must be stored"
        )
        assert stored.events == [] and stored.state == {}, (
            "a session created again after delete() must start empty, with nothing of the "
            f"deleted one: found {len(stored.events)} events and state {stored.state!r}"
        )
        await self.check_positions(manager, session.session_id, 0)

    async def test_delete_with_other_user_raises_ownership(self, manager: SessionManager) -> None:
        """delete(user_id=other) raises SessionOwnershipError and deletes nothing."""
        owner = self.new_user()
        session = await self.session_with_events(manager, 1, user_id=owner)
        before = snapshot(await self.readback(manager, session.session_id))
        with pytest.raises(SessionOwnershipError):
            await manager.delete(session.session_id, user_id=self.new_user())
        assert snapshot(await self.readback(manager, session.session_id)) == before, (
            f"delete({session.session_id!r}, user_id=<another user>) raised "
            "SessionOwnershipError, so it must delete nothing: the session reads back changed "
            "or missing"
        )
        assert await manager.delete(session.session_id, user_id=owner) is True, (
            f"delete({session.session_id!r}, user_id={owner!r}) by the owner must return True: "
            "it returned something else"
        )

    async def test_delete_user_removes_exactly_that_users_sessions(
        self, manager: SessionManager
    ) -> None:
        """delete_user() removes every session of that user, returns the count, and nothing else."""
        doomed_user, other_user = self.new_user(), self.new_user()
        doomed = [self.new_id() for _ in range(3)]
        for session_id in doomed:
            await manager.create(session_id, doomed_user)
        kept = await self.session_with_events(manager, 2, user_id=other_user)
        anonymous = await self.session_with_events(manager, 1)
        expected = [snapshot(await self.readback(manager, s.session_id)) for s in (kept, anonymous)]
        assert await manager.delete_user(doomed_user) == 3, (
            f"delete_user({doomed_user!r}) must return the number of sessions it removed: "
            "expected 3, it returned another count"
        )
        for session_id in doomed:
            assert await self.readback(manager, session_id) is None, (
                f"get({session_id!r}) (read-back) after delete_user({doomed_user!r}) must return "
                "None: a session of that user is still found"
            )
        assert [
            snapshot(await self.readback(manager, s.session_id)) for s in (kept, anonymous)
        ] == expected, (
            f"delete_user({doomed_user!r}) must leave other users' and anonymous sessions "
            f"untouched: {kept.session_id!r} or {anonymous.session_id!r} reads back changed or "
            "missing"
        )
        assert await manager.delete_user(doomed_user) == 0, (
            f"a second delete_user({doomed_user!r}) must return 0 (nothing was left): it "
            "returned another count"
        )
        assert (await manager.list_sessions(user_id=doomed_user)).items == [], (
            f"list_sessions(user_id={doomed_user!r}) after delete_user() must list nothing: it "
            "still lists sessions"
        )
