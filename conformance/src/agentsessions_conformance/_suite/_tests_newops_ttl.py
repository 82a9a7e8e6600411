"""Expiry for the newer operations: an expired session's archive, refresh and compaction
are absent or refused, and an id written again after it expired keeps nothing of its
old life (archive, owner, first position, save tokens, expiry).

The same standard `_tests_ttl` holds create, get, save and delete to, on the kit's
`FrozenClock`; storage is read through `raw_inventory` where a refused write must have
changed nothing.
"""

from __future__ import annotations

import pytest
from agentsessions import (
    BackendUnavailableError,
    Event,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
)

from .._faults import lost_replies
from .._inventory import Inventory
from ._base import SuiteBase, snapshot
from ._tests_refresh import _lineage, _since
from ._tests_restore import _exported
from ._tests_ttl import PAST_TTL, TTL

# A lineage no manager ever makes (they are 16 hex characters).
_FOREIGN_LINEAGE = "not-a-lineage"


def _summary(text: str) -> Event:
    return Event(author="summarizer", content={"summary": text})


def _held(found: Inventory) -> tuple[int, list[int], int]:
    return found.records, sorted(found.events), found.archived


class NewOpsExpiryTests(SuiteBase):
    async def _spaces(self, manager: SessionManager) -> list[SessionManager]:
        """A ttl manager on the kit's clock in the default namespace and in a fresh one."""
        self.require(manager, "ttl")
        spaces = [await self.frozen(manager, ttl=TTL, namespace=manager.options.namespace)]
        if manager.capabilities.namespaces:
            spaces.append(await self.frozen(manager, ttl=TTL))
        return spaces

    async def test_ttl_expired_session_refuses_compaction_and_hides_its_archive(
        self, manager: SessionManager
    ) -> None:
        """An expired session's archive reads as empty (for its owner, another user or
        none: absent, not an ownership error), ``_load_since`` finds nothing, and
        compact() raises SessionNotFoundError and writes nothing, in every namespace,
        while a moment before the expiry all of them still work; purge_expired() then
        erases the archive with the session ("an expired session is absent to every
        call"; ``_archived``: "an expired session's archive is empty")."""
        self.require(manager, "compaction")
        for expiring in await self._spaces(manager):
            owner = self.new_user()
            session = await self.session_with_events(expiring, 8, user_id=owner)
            sid = session.session_id
            replaced = session.events[:3]
            await expiring.compact(session, session.events[2].id, [_summary("a")], archive=True)
            lineage = await _lineage(expiring, sid)
            tail = await expiring.get(sid, last_events=2)
            assert tail is not None, (
                f"get({sid!r}, last_events=2) returned None right after compact(): a live "
                "session must be found"
            )
            self.clock.advance(TTL - 0.001)
            assert await expiring.archived_events(sid) == replaced, "archive lost before expiry"
            since = await _since(expiring, sid, len(session.events), lineage or _FOREIGN_LINEAGE)
            assert since.record.version == session.version, (
                f"_load_since({sid!r}) a moment before the expiry must return the current "
                f"record: expected version {session.version}, found {since.record.version}"
            )
            self.clock.advance(0.002)
            now = self.clock.now()
            for user in (None, owner, self.new_user()):
                assert await expiring.archived_events(sid, user_id=user) == [], (
                    f"archived_events(user_id={user!r}) of an expired session returned events"
                )
            known = lineage or _FOREIGN_LINEAGE
            for count, since_lineage in ((len(session.events), known), (0, _FOREIGN_LINEAGE)):
                found = await expiring._load_since(sid, count, since_lineage, now)
                assert found is None, "_load_since() returned an expired session"
            before = _held(await self.inventory(expiring, sid))
            with pytest.raises(SessionNotFoundError):
                await expiring.compact(tail, tail.events[0].id, [_summary("b")], archive=True)
            with pytest.raises(SessionNotFoundError):
                await expiring.compact(session, session.events[-1].id, [])
            assert _held(await self.inventory(expiring, sid)) == before, (
                "a refused compaction of an expired session changed its storage"
            )
            assert await expiring.get(sid) is None, "a compaction revived an expired session"
            await expiring.purge_expired()
            await self.check_erased(expiring, sid, "purge_expired() removed the expired session")

    async def test_ttl_compaction_refreshes_expiry(self, manager: SessionManager) -> None:
        """A compaction restarts the ttl as a save does ("write the new version,
        timestamps and event count", ``expires_at`` included): the session lives ttl
        after its last compaction, then expires."""
        self.require(manager, "compaction")
        for expiring in await self._spaces(manager):
            session = await self.session_with_events(expiring, 4)
            self.clock.advance(TTL * 0.6)
            await expiring.compact(session, session.events[1].id, [_summary("kept alive")])
            self.clock.advance(TTL * 0.6)  # past the save's ttl, within the compaction's
            alive = await expiring.get(session.session_id)
            assert alive is not None, "the compaction did not refresh the expiry"
            assert [e.content for e in alive.events] == [{"summary": "kept alive"}, "e2", "e3"], (
                "get() after compact() must return the compacted history: expected "
                "[{'summary': 'kept alive'}, 'e2', 'e3'], found "
                f"{[e.content for e in alive.events[:8]]!r}"
            )
            self.clock.advance(TTL * 0.6)
            assert await expiring.get(session.session_id) is None, (
                f"get({session.session_id!r}) more than ttl ({TTL} s) after the last compact() "
                "must return None (the session expired): it still found the session"
            )

    @pytest.mark.parametrize("how", ["create", "restore", "fork"])
    async def test_recreated_id_keeps_nothing_of_its_expired_life(
        self, manager: SessionManager, how: str
    ) -> None:
        """create(), restore() or fork() onto an expired session's id ("an expired one
        is replaced, with its events and archive removed") keeps nothing of the old life:
        no archived event, not the old owner (user listing, delete_user), no event
        position (the new life's events at 0..n-1, compacted and archived on their own),
        no save token (a lost-reply save of the old life retried is a conflict that
        writes nothing), and not its expiry (it lives its own ttl, or, written without a
        ttl, never expires, and purge_expired() leaves it)."""
        self.require(manager, "ttl")
        if how == "fork":
            self.require(manager, "branching")
        compaction = manager.capabilities.compaction
        expiring = await self.frozen(manager, ttl=TTL)
        # The new life is written without a ttl where a second manager sees the store.
        shared = manager.capabilities.shared
        lasting = expiring
        if shared:
            namespace = expiring.options.namespace
            lasting = await self.frozen(manager, ttl=None, namespace=namespace)
        old_owner, new_owner = self.new_user(), self.new_user()
        sid = self.new_id()
        old = await expiring.create(sid, old_owner, state={"life": "old"})
        for index in range(6):
            old.add_event("user", f"old {index}")
        await expiring.save(old)
        if compaction:
            await expiring.compact(old, old.events[2].id, [_summary("old")], archive=True)
        # A save whose reply is lost: its token is stored with the old life.
        old.add_event("user", "old, reply lost")
        with lost_replies(expiring, "_save"), pytest.raises(BackendUnavailableError):
            await expiring.save(old)
        self.clock.advance(PAST_TTL)

        if how == "create":
            born = await lasting.create(sid, new_owner, state={"life": "new"})
            born.add_event("user", "new 0")
            born.add_event("user", "new 1")
            await lasting.save(born)
        elif how == "restore":
            await lasting.restore(_exported(sid, new_owner, events=2))
        else:
            source = await lasting.create(self.new_id(), new_owner, state={"life": "new"})
            source.add_event("user", "new 0")
            source.add_event("user", "new 1")
            await lasting.save(source)
            await lasting.fork(source.session_id, sid)
        # The new life has an expiry of its own (none at all when written without a ttl).
        self.clock.advance(2 * PAST_TTL if shared else TTL - 0.001)
        stored = await lasting.get(sid)
        assert stored is not None, "the new life expired with the old one's expiry"
        assert stored.user_id == new_owner, (
            f"{how}() onto the expired id {sid!r} must give it the new owner {new_owner!r}: "
            f"found user_id={stored.user_id!r} (the old owner was {old_owner!r})"
        )
        assert len(stored.events) == 2 and all(
            "old" not in str(e.content) for e in stored.events
        ), (
            f"{how}() onto the expired id {sid!r} must keep none of the old life's events: "
            "expected the 2 new events, found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        await self.check_positions(lasting, sid, 2)
        assert (await self.inventory(lasting, sid)).archived == 0, "the old life's archive survived"
        if compaction:
            assert await lasting.archived_events(sid) == [], "the old life's archive survived"
        assert await lasting.purge_expired() >= 0, (
            "purge_expired() must return the number of sessions it removed (>= 0): it "
            "returned a negative count"
        )
        assert await lasting.get(sid) is not None, "purge_expired() removed the new life"

        listed = {s.session_id for s in await self.list_all(lasting, user_id=old_owner)}
        assert sid not in listed, "the old owner's listing still lists the id"
        assert sid in {s.session_id for s in await self.list_all(lasting, user_id=new_owner)}, (
            f"list_sessions(user_id={new_owner!r}) must list {sid!r}, which {how}() wrote for "
            "that owner onto an expired id: it is not listed"
        )
        assert await lasting.delete_user(old_owner) == 0, "delete_user(old owner) counted it"
        assert await lasting.get(sid) is not None, "delete_user() of the old owner deleted it"

        before = snapshot(await self.readback(lasting, sid))
        with pytest.raises(SessionConflictError):
            await expiring.save(old)  # the very request whose reply was lost, token and all
        assert snapshot(await self.readback(lasting, sid)) == before, (
            "the retry of the old life's save wrote into the new life"
        )

        if compaction:
            full = await lasting.get(sid)
            assert full is not None, (
                f"get({sid!r}) returned None: the session {how}() wrote must still be found"
            )
            await lasting.compact(full, full.events[0].id, [_summary("new")], archive=True)
            assert await lasting.archived_events(sid) == stored.events[:1], (
                f"archived_events({sid!r}) after compact(archive=True) of the new life's first "
                "event must return exactly that event, none of the old life's archive: expected "
                f"{[e.content for e in stored.events[:1]]!r}"
            )
            await self.check_positions(lasting, sid, 2)
        again = await lasting.get(sid, last_events=1)
        assert again is not None, (
            f"get({sid!r}, last_events=1) returned None: the session {how}() wrote must still "
            "be found"
        )
        again.add_event("user", "new 2")
        await lasting.save(again)
        final = await self.readback(lasting, sid)
        assert final is not None, (
            f"get({sid!r}) (read-back) returned None after save() of a tail load: the session "
            "must still be found"
        )
        assert [e.id for e in final.events][-2:] == [stored.events[1].id, again.events[-1].id], (
            f"save() of a tail load of the id {how}() wrote must append after the new life's "
            "events: expected the last two event ids to be "
            f"{[stored.events[1].id, again.events[-1].id]!r}, found "
            f"{[e.id for e in final.events][-2:]!r}"
        )
        await self.check_positions(lasting, sid, 3)
