"""Erasure: what delete() and delete_user() remove is gone from storage, every row of it.

Proved through the adopter's `raw_inventory` hook, not through the manager: a backend
that hides a session but leaves its event rows (or index entries) behind passes every
read, and still keeps data its users asked to erase.
"""

from __future__ import annotations

from agentsessions import SessionManager

from ._base import SuiteBase, snapshot

#: Sessions of the user erased at once: more than any first batch or page size.
MANY = 200


class ErasureTests(SuiteBase):
    async def test_delete_erases_all_storage(self, manager: SessionManager) -> None:
        """delete() leaves nothing of the session in storage (record, events, index entries),
        after appends, a truncation and a rewrite, by id or by its owner, in every namespace."""
        for space in await self.namespaced(manager):
            owner = self.new_user()
            session = await self.session_with_events(space, 5, user_id=owner)
            del session.events[2:]
            await space.save(session)
            session.events[0] = session.events[0].model_copy(update={"content": "rewritten"})
            session.add_event("user", "again")
            await space.save(session)
            await self.check_positions(space, session.session_id, 3)
            assert await space.delete(session.session_id) is True, (
                f"delete({session.session_id!r}) of a stored session must return True: it "
                "returned something else"
            )
            await self.check_erased(space, session.session_id, "delete() returned True")
            owned = await self.session_with_events(space, 2, user_id=owner)
            assert await space.delete(owned.session_id, user_id=owner) is True, (
                f"delete({owned.session_id!r}, user_id={owner!r}) by the owner must return "
                "True: it returned something else"
            )
            await self.check_erased(space, owned.session_id, "delete(user_id=owner) returned True")
            assert await space.delete(owned.session_id) is False, (
                f"a second delete({owned.session_id!r}) must return False (nothing was left): "
                "it returned something else"
            )

    async def test_delete_user_erases_hundreds_of_sessions(self, manager: SessionManager) -> None:
        """delete_user() of a user with hundreds of sessions erases every one with all its
        storage, returns their exact number, and leaves other users' sessions whole."""
        for space in await self.namespaced(manager):
            doomed_user, other_user = self.new_user(), self.new_user()
            doomed: list[str] = []
            for index in range(MANY):
                session = await space.create(self.new_id(), doomed_user)
                doomed.append(session.session_id)
                if index % 20 == 0:
                    session.add_event("user", "a")
                    session.add_event("user", "b")
                    await space.save(session)
            kept = await self.session_with_events(space, 2, user_id=other_user)
            anonymous = await self.session_with_events(space, 1)
            before = [snapshot(await space.get(s.session_id)) for s in (kept, anonymous)]
            assert await space.delete_user(doomed_user) == MANY, (
                f"delete_user({doomed_user!r}) must return the exact number of sessions it "
                f"erased: expected {MANY}, it returned another count"
            )
            for session_id in doomed:
                await self.check_erased(space, session_id, "delete_user() returned")
            assert await self.list_all(space, user_id=doomed_user) == [], (
                f"list_sessions(user_id={doomed_user!r}) after delete_user() must list nothing: "
                "it still lists sessions"
            )
            assert [snapshot(await space.get(s.session_id)) for s in (kept, anonymous)] == before, (
                f"delete_user({doomed_user!r}) must leave other users' and anonymous sessions "
                f"whole: {kept.session_id!r} or {anonymous.session_id!r} reads back changed or "
                "missing"
            )
            await self.check_positions(space, kept.session_id, 2)
            assert await space.delete_user(doomed_user) == 0, (
                f"a second delete_user({doomed_user!r}) must return 0 (nothing was left): it "
                "returned another count"
            )
