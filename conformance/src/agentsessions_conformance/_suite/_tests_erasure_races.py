"""Erasure racing writes: delete() and delete_user() while saves and updates are in flight.

A backend that skips what a concurrent save holds (a row lock it will not wait for, a
version that moved since it listed the user's sessions) leaves sessions behind that the
user asked to erase; afterwards every erased session must have no storage left
(`raw_inventory`), and nothing a delete removed may come back.
"""

from __future__ import annotations

import asyncio
import contextlib

from agentsessions import (
    Session,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
)

from ._base import SuiteBase

#: Sessions of the user, writers per session, and saves each writer tries (bounded).
_SESSIONS = 12
_SAVES = 6


class ErasureRaceTests(SuiteBase):
    async def _writer(self, manager: SessionManager, session_id: str, user_id: str) -> None:
        for i in range(_SAVES):
            with contextlib.suppress(SessionConflictError):
                session = await manager.get(session_id, user_id=user_id)
                if session is None:
                    return
                session.add_event("user", f"racing-{i}")
                try:
                    await manager.save(session)
                except SessionNotFoundError:
                    return
            await asyncio.sleep(0)

    async def _racers(self, manager: SessionManager) -> list[SessionManager]:
        if manager.capabilities.shared:
            return [manager, await self.variant(manager)]
        return [manager]

    async def test_delete_user_racing_saves_erases_every_session(
        self, manager: SessionManager
    ) -> None:
        """delete_user() while saves land on every one of the user's sessions (from two
        managers when shared) leaves no session of that user that existed when it started,
        nothing of them in storage, and another user's sessions whole."""
        user, other = self.new_user(), self.new_user()
        ids = []
        for _ in range(_SESSIONS):
            session = await self.session_with_events(manager, 2, user_id=user)
            ids.append(session.session_id)
        kept = await self.session_with_events(manager, 2, user_id=other)
        racers = await self._racers(manager)
        writers = [
            asyncio.ensure_future(self._writer(racers[n % len(racers)], sid, user))
            for n, sid in enumerate(ids)
        ]
        await asyncio.sleep(0)
        deleted = await manager.delete_user(user)
        await asyncio.gather(*writers)
        assert 0 < deleted <= _SESSIONS, (
            f"delete_user({user!r}) racing saves must count the sessions it erased, between 1 "
            f"and the user's {_SESSIONS}: it returned {deleted}"
        )
        for sid in ids:
            assert await self.readback(manager, sid) is None, (
                f"delete_user() raced saves and left {sid!r} behind"
            )
            await self.check_erased(manager, sid, "delete_user() raced saves")
        stored = await self.readback(manager, kept.session_id)
        assert stored is not None and len(stored.events) == 2, (
            f"delete_user({user!r}) must leave another user's session {kept.session_id!r} "
            "whole, with its 2 events: found "
            f"{'None' if stored is None else f'{len(stored.events)} events'}"
        )

    async def test_delete_racing_updates_erases_the_session(self, manager: SessionManager) -> None:
        """delete() while updates of the session are in flight: afterwards it is absent with
        no storage left, and later updates find nothing (nothing deleted comes back)."""
        session = await self.session_with_events(manager, 3)
        session_id = session.session_id
        racers = await self._racers(manager)

        async def update(racer: SessionManager, n: int) -> None:
            def append(current: Session) -> None:
                current.add_event("user", f"u{n}")

            with contextlib.suppress(SessionNotFoundError):
                await racer.update(session_id, append, group=False)

        updates = [asyncio.ensure_future(update(racers[n % len(racers)], n)) for n in range(8)]
        await asyncio.sleep(0)
        assert await manager.delete(session_id) is True, (
            f"delete({session_id!r}) of a stored session racing updates must return True: it "
            "returned something else"
        )
        await asyncio.gather(*updates)
        assert await self.readback(manager, session_id) is None, (
            f"get({session_id!r}) (read-back) after delete() raced updates must return None: "
            "an update brought the deleted session back"
        )
        await self.check_erased(manager, session_id, "delete() raced updates")
