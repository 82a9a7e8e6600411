"""Time to live: a session not saved for longer than ttl is gone for every operation.

Every clause here runs on the kit's `FrozenClock` (``self.clock``): time moves only when
the test moves it, so nothing sleeps and the boundaries are exact. The ttl is an hour,
so an engine that also expires data by its own wall clock (Redis, a MongoDB TTL index)
still holds the data while the kit's clock says it has expired: the backend itself must
compare the stored expiry with the ``now`` it is handed.
"""

from __future__ import annotations

import pytest
from agentsessions import (
    Session,
    SessionManager,
    SessionNotFoundError,
)

from ._base import SuiteBase, snapshot

TTL = 3600.0
PAST_TTL = TTL + 1.0


class TtlTests(SuiteBase):
    async def _expiring(self, manager: SessionManager) -> list[SessionManager]:
        """A ttl manager on the kit's clock in the default namespace and in a fresh one."""
        self.require(manager, "ttl")
        spaces = [await self.frozen(manager, ttl=TTL, namespace=manager.options.namespace)]
        if manager.capabilities.namespaces:
            spaces.append(await self.frozen(manager, ttl=TTL))
        return spaces

    async def _assert_absent(
        self, expiring: SessionManager, session: Session, owner: str, events: int
    ) -> None:
        sid = session.session_id
        assert await expiring.get(sid) is None, "an expired session is still returned by get()"
        for tail in (0, 1, events + 5):
            assert await expiring.get(sid, last_events=tail) is None, (
                f"an expired session is returned by get(last_events={tail})"
            )
        assert await expiring.get(sid, user_id=owner) is None, (
            f"sessions must expire with their ttl: expected get({sid!r}, user_id=<owner>) to "
            f"return None past the ttl ({TTL:g} s), found a session"
        )
        # Absent is absent: not an ownership error for a stranger either.
        assert await expiring.get(sid, user_id=self.new_user()) is None, (
            f"sessions must expire with their ttl: expected get({sid!r}, user_id=<another "
            f"user>) to return None past the ttl ({TTL:g} s), found a session"
        )
        listed = {item.session_id for item in await self.list_all(expiring)}
        assert sid not in listed, "list_sessions() lists an expired session"
        assert await self.list_all(expiring, user_id=owner) == [], (
            "sessions must expire with their ttl: expected list_sessions(user_id=<owner>) to "
            f"list nothing past the ttl ({TTL:g} s), found sessions"
        )
        assert await self.readback(expiring, sid) is None, (
            f"sessions must expire with their ttl: expected get({sid!r}) through a fresh "
            f"manager to return None past the ttl ({TTL:g} s), found a session"
        )
        session.add_event("user", "too late")
        with pytest.raises(SessionNotFoundError):
            await expiring.save(session)
        with pytest.raises(SessionNotFoundError):
            await expiring.update(sid, lambda s: s.add_event("user", "x"))
        assert await expiring.get(sid) is None, "a save revived an expired session"

    async def test_ttl_expired_session_is_absent(self, manager: SessionManager) -> None:
        """An expired session is absent to get (full, last_events=0/1/more, any user), listing,
        readback, save and update, in every namespace; one created and never saved too."""
        for expiring in await self._expiring(manager):
            owner = self.new_user()
            saved = await expiring.create(self.new_id(), owner)
            saved.add_event("user", "soon gone")
            await expiring.save(saved)
            never_saved = await expiring.create(self.new_id(), owner, state={"x": 1})
            self.clock.advance(TTL - 0.001)
            assert await expiring.get(saved.session_id) is not None, "expired before its ttl"
            assert await expiring.get(never_saved.session_id) is not None, (
                f"a session created and never saved must live its ttl ({TTL:g} s): "
                f"get({never_saved.session_id!r}) returned None 1 ms before it expires"
            )
            self.clock.advance(0.002)
            await self._assert_absent(expiring, saved, owner, 1)
            await self._assert_absent(expiring, never_saved, owner, 0)

    async def test_ttl_expired_session_cannot_be_deleted(self, manager: SessionManager) -> None:
        """delete() of an expired session returns False, by its owner or another user (no
        ownership error), and delete_user() does not count expired sessions."""
        for expiring in await self._expiring(manager):
            owner = self.new_user()
            sessions = [await expiring.create(self.new_id(), owner) for _ in range(3)]
            self.clock.advance(PAST_TTL - 10)
            live_one = await expiring.create(self.new_id(), owner)
            self.clock.advance(11)
            assert await expiring.delete(sessions[0].session_id) is False, (
                f"delete({sessions[0].session_id!r}) of a session past its ttl ({TTL:g} s) must "
                "return False: an expired session is absent"
            )
            assert await expiring.delete(sessions[1].session_id, user_id=owner) is False, (
                f"delete({sessions[1].session_id!r}, user_id=<owner>) of a session past its ttl "
                f"({TTL:g} s) must return False: an expired session is absent"
            )
            assert (
                await expiring.delete(sessions[2].session_id, user_id=self.new_user()) is False
            ), (
                f"delete({sessions[2].session_id!r}, user_id=<another user>) of a session past "
                f"its ttl ({TTL:g} s) must return False, not raise SessionOwnershipError: an "
                "expired session is absent"
            )
            assert await expiring.delete_user(owner) == 1, "delete_user counted expired sessions"
            assert await expiring.get(live_one.session_id) is None, (
                "delete_user() must erase the owner's one live session: expected "
                f"get({live_one.session_id!r}) to return None after it, found a session"
            )

    async def test_ttl_expired_id_can_be_created_again(self, manager: SessionManager) -> None:
        """create() of an expired session's id succeeds and starts empty, its old events gone."""
        for expiring in await self._expiring(manager):
            session = await expiring.create(self.new_id(), state={"old": True})
            session.add_event("user", "old")
            await expiring.save(session)
            self.clock.advance(PAST_TTL)
            again = await expiring.create(session.session_id, self.new_user())
            assert again.version == 1, (
                f"create({session.session_id!r}) of an expired session's id must start a new "
                f"session: expected version 1, found {again.version}"
            )
            stored = await expiring.get(session.session_id)
            assert stored is not None, (
                f"get({session.session_id!r}) returned None right after create() of an expired "
                "session's id: the new session must be found"
            )
            assert stored.events == [] and stored.state == {}, (
                f"create({session.session_id!r}) of an expired session's id must start empty, "
                f"the old events and state gone: found {len(stored.events)} events "
                f"{[e.content for e in stored.events[:8]]!r} and state {stored.state!r:.100}"
            )
            assert stored.user_id == again.user_id, (
                f"create({session.session_id!r}) of an expired session's id must store the new "
                f"owner: expected user_id {again.user_id!r}, found {stored.user_id!r}"
            )
            assert stored.created_at == self.clock.now(), (
                f"create({session.session_id!r}) of an expired session's id must stamp a new "
                f"created_at: expected {self.clock.now().isoformat()}, found "
                f"{stored.created_at.isoformat()}"
            )
            await self.check_positions(expiring, session.session_id, 0)
            got = await expiring.get_or_create(self.new_id())
            self.clock.advance(PAST_TTL)
            fresh = await expiring.get_or_create(got.session_id)
            assert fresh.version == 1 and fresh.created_at == self.clock.now(), (
                f"get_or_create({got.session_id!r}) of an expired session's id must create a new "
                f"session: expected version 1 created at {self.clock.now().isoformat()}, found "
                f"version {fresh.version} created at {fresh.created_at.isoformat()}"
            )

    async def test_ttl_save_refreshes_expiry(self, manager: SessionManager) -> None:
        """A save restarts the ttl: the session lives ttl after its last save, then expires."""
        for expiring in await self._expiring(manager):
            session = await expiring.create(self.new_id())
            self.clock.advance(TTL * 0.6)
            session.add_event("user", "keep alive")
            await expiring.save(session)
            self.clock.advance(TTL * 0.6)  # past the creation's ttl, within the save's
            alive = await expiring.get(session.session_id)
            assert alive is not None, "the save did not refresh the expiry"
            assert [e.content for e in alive.events] == ["keep alive"], (
                "a session kept alive by a save() must hold what it saved: expected "
                f"['keep alive'], found {[e.content for e in alive.events[:8]]!r}"
            )
            self.clock.advance(TTL * 0.6)
            assert await expiring.get(session.session_id) is None, (
                f"sessions must expire with their ttl: expected get({session.session_id!r}) to "
                f"return None {TTL * 0.6 + TTL * 0.6:g} s after its last save() "
                f"(ttl={TTL:g} s), found a session"
            )

    async def test_ttl_read_does_not_extend(self, manager: SessionManager) -> None:
        """Reading a session (get, listing) does not extend its ttl; only a save does."""
        for expiring in await self._expiring(manager):
            session = await expiring.create(self.new_id())
            for _ in range(3):
                self.clock.advance(TTL / 3 - 1)
                assert await expiring.get(session.session_id) is not None, (
                    f"a session must live its ttl ({TTL:g} s): get({session.session_id!r}) "
                    "returned None before the ttl from its create() ran out"
                )
                await self.list_all(expiring)
            self.clock.advance(4)
            assert await expiring.get(session.session_id) is None, (
                "reads must not extend the ttl: expected get() and list_sessions() reads to "
                f"leave the expiry alone, so get({session.session_id!r}) must return None 1 s "
                f"past the ttl ({TTL:g} s) from its create(), found a session"
            )

    async def test_ttl_timestamps_come_from_the_clock(self, manager: SessionManager) -> None:
        """created_at and updated_at are the manager clock's now, to the microsecond."""
        for expiring in await self._expiring(manager):
            self.clock.advance(0.123456)
            created = self.clock.now()
            session = await expiring.create(self.new_id())
            assert session.created_at == session.updated_at == created, (
                "create() must stamp created_at and updated_at with the manager clock's now, to "
                f"the microsecond: expected {created.isoformat()}, found created_at "
                f"{session.created_at.isoformat()} and updated_at "
                f"{session.updated_at.isoformat()}"
            )
            saved_at = self.clock.advance(7.000001)
            session.add_event("user", "x")
            await expiring.save(session)
            stored = await self.readback(expiring, session.session_id)
            assert stored is not None, (
                f"get({session.session_id!r}) (read-back) returned None after save(): the "
                "session must still be found"
            )
            assert (stored.created_at, stored.updated_at) == (created, saved_at), (
                "save() must keep created_at and stamp updated_at with the manager clock's now, "
                f"to the microsecond: expected created_at {created.isoformat()} and updated_at "
                f"{saved_at.isoformat()}, found {stored.created_at.isoformat()} and "
                f"{stored.updated_at.isoformat()}"
            )

    async def test_purge_expired_removes_exactly_the_expired(self, manager: SessionManager) -> None:
        """purge_expired() removes every expired session and all its storage, returns how many,
        and never touches a live one (saved recently, created recently, or with events)."""
        for index, expiring in enumerate(await self._expiring(manager)):
            owner = self.new_user()
            doomed = [
                await expiring.create(self.new_id(), owner if i % 2 else None) for i in (0, 1, 2)
            ]
            doomed[0].add_event("user", "old")
            await expiring.save(doomed[0])
            refreshed = await expiring.create(self.new_id(), owner)
            self.clock.advance(TTL - 5)
            refreshed.add_event("user", "kept alive")
            await expiring.save(refreshed)
            young = await expiring.create(self.new_id(), owner)
            young.add_event("user", "young")
            await expiring.save(young)
            self.clock.advance(10)
            live = [refreshed, young]
            before = [snapshot(await expiring.get(s.session_id)) for s in live]
            purged = await expiring.purge_expired()
            if index == 0:
                # The adopter's own namespace may hold sessions other runs left to expire.
                assert purged >= len(doomed), (
                    "purge_expired() must count every expired session it removes: expected at "
                    f"least {len(doomed)} (the test's expired sessions), found {purged}"
                )
            else:
                assert purged == len(doomed), f"purge_expired() said {purged}, expected 3"
            for session in doomed:
                await self.check_erased(expiring, session.session_id, "purge_expired() ran")
            assert [snapshot(await expiring.get(s.session_id)) for s in live] == before, (
                "purge_expired() changed a live session"
            )
            for session in live:
                await self.check_positions(expiring, session.session_id, 1)
            if index > 0:
                assert await expiring.purge_expired() == 0, (
                    "a second purge_expired() right after the first must find nothing left to "
                    "remove: expected 0"
                )

    async def test_purge_expired_without_ttl_removes_nothing(self, manager: SessionManager) -> None:
        """Without a ttl nothing ever expires: purge_expired() removes nothing, however late."""
        lasting = await self.frozen(manager)
        session = await self.session_with_events(lasting, 2)
        self.clock.advance(10 * 365 * 86400)
        before = snapshot(await lasting.get(session.session_id))
        assert before is not None, (
            f"without a ttl nothing ever expires: get({session.session_id!r}) returned None "
            "ten years after its save()"
        )
        await lasting.purge_expired()
        assert snapshot(await lasting.get(session.session_id)) == before, (
            "without a ttl purge_expired() must remove nothing: expected "
            f"{session.session_id!r} to read back as before (version {before['version']}), "
            "the session differs or is gone"
        )
        await self.check_positions(lasting, session.session_id, 2)
