"""Time to live: a session not saved for longer than ttl is gone for every operation."""

from __future__ import annotations

import asyncio

import pytest
from agentsessions import SessionManager, SessionNotFoundError

from ._base import SuiteBase

TTL = 0.8  # seconds: long enough for a slow round trip, short enough to keep the suite quick
PAST_TTL = TTL + 0.3


class TtlTests(SuiteBase):
    async def _ttl_manager(self, manager: SessionManager) -> SessionManager:
        self.require(manager, "ttl")
        return await self.variant(manager, ttl=TTL)

    async def test_ttl_expired_session_is_absent(self, manager: SessionManager) -> None:
        """A session not saved for longer than ttl is absent to get, list, save and delete."""
        expiring = await self._ttl_manager(manager)
        user = self.new_user()
        session = await expiring.create(self.new_id(), user)
        session.add_event("user", "soon gone")
        await expiring.save(session)
        copy = await expiring.get(session.session_id)
        assert copy is not None
        await asyncio.sleep(PAST_TTL)
        assert await expiring.get(session.session_id) is None
        assert await expiring.get(session.session_id, last_events=1) is None
        assert (await expiring.list_sessions(user_id=user)).items == []
        copy.add_event("user", "too late")
        with pytest.raises(SessionNotFoundError):
            await expiring.save(copy)
        assert await expiring.get(session.session_id) is None, "a save revived an expired session"
        assert await expiring.delete(session.session_id) is False

    async def test_ttl_expired_id_can_be_created_again(self, manager: SessionManager) -> None:
        """create() of an expired session's id succeeds and starts empty."""
        expiring = await self._ttl_manager(manager)
        session = await expiring.create(self.new_id(), state={"old": True})
        session.add_event("user", "old")
        await expiring.save(session)
        await asyncio.sleep(PAST_TTL)
        again = await expiring.create(session.session_id, self.new_user())
        assert again.version == 1
        stored = await expiring.get(session.session_id)
        assert stored is not None
        assert stored.events == [] and stored.state == {}
        assert stored.user_id == again.user_id
        await self.check_positions(expiring, session.session_id, 0)

    async def test_ttl_save_refreshes_expiry(self, manager: SessionManager) -> None:
        """A save restarts the ttl: the session lives ttl after its last save, then expires."""
        expiring = await self._ttl_manager(manager)
        session = await expiring.create(self.new_id())
        await asyncio.sleep(TTL * 0.6)
        session.add_event("user", "keep alive")
        await expiring.save(session)
        await asyncio.sleep(TTL * 0.6)  # past the creation's ttl, within the save's
        alive = await expiring.get(session.session_id)
        assert alive is not None, "the save did not refresh the expiry"
        assert [e.content for e in alive.events] == ["keep alive"]
        await asyncio.sleep(TTL * 0.6)
        assert await expiring.get(session.session_id) is None
