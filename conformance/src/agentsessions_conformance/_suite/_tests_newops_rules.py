"""The cross-cutting rules on the branching operations and the save tokens: fork listings
scoped to a namespace and to live forks and paged through ties, forks of expired sources
refused, rewinds checked by lineage and keeping the token window, tokens recognised only
for their own session and only the newest kept, and `delete_user` erasing archives in its
own namespace only.

Each clause is built around one realistic bug that passed the kit before it (see
``tests/conformance/broken_rules.py``); every assertion names the operation and the rule.
"""

from __future__ import annotations

import dataclasses

import pytest
from agentsessions import (
    BackendUnavailableError,
    Event,
    Session,
    SessionConflictError,
    SessionManager,
    SessionNotFoundError,
)
from agentsessions.backend import TOKENS_KEPT

from .._faults import lost_replies
from .._inventory import Inventory
from ._base import MAX_PAGES, SuiteBase, snapshot
from ._tests_ttl import PAST_TTL, TTL

#: Forks (and sessions) a ties clause makes at one instant, paged two at a time.
TIED = 7


def _summary(text: str) -> Event:
    return Event(author="summarizer", content={"summary": text})


def _held(found: Inventory) -> tuple[int, list[int], list[str], int]:
    return found.records, sorted(found.events), sorted(found.other), found.archived


async def _forks_listed(manager: SessionManager, source_id: str, limit: int) -> list[str]:
    """Every fork of *source_id* that list_sessions(forked_from=) pages through."""
    seen: list[str] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await manager.list_sessions(forked_from=source_id, limit=limit, cursor=cursor)
        assert len(page.items) <= limit, (
            f"list_sessions(forked_from=..., limit={limit}) returned {len(page.items)} items"
        )
        seen.extend(item.session_id for item in page.items)
        if page.next_cursor is None:
            return seen
        assert page.items, "list_sessions(forked_from=...) gave a next_cursor with an empty page"
        cursor = page.next_cursor
    raise AssertionError(f"list_sessions(forked_from=...) paging never ended ({MAX_PAGES} pages)")


async def _lose_save(manager: SessionManager, session: Session, text: str) -> None:
    """Save *session* with one more event, the reply lost after the write landed."""
    session.add_event("user", text)
    with lost_replies(manager, "_save"), pytest.raises(BackendUnavailableError):
        await manager.save(session)


class NewOpsRuleTests(SuiteBase):
    # -- list_sessions(forked_from=) ----------------------------------------------------

    async def test_fork_listing_never_shows_another_namespaces_forks(
        self, manager: SessionManager
    ) -> None:
        """list_sessions(forked_from=ID) lists the forks of ID in its own namespace only,
        even when another namespace holds a source of the same id with forks of its own."""
        self.require(manager, "branching")
        self.require(manager, "namespaces")
        left = manager
        right = await self.variant(manager, namespace=self.new_namespace())
        source_id = self.new_id("src")
        forks: dict[str, set[str]] = {}
        for name, space in (("left", left), ("right", right)):
            source = await space.create(source_id)
            source.add_event("user", name)
            await space.save(source)
            forks[name] = set()
            for _ in range(2):
                fork_id = self.new_id("fork")
                await space.fork(source_id, fork_id)
                forks[name].add(fork_id)
        for name, space in (("left", left), ("right", right)):
            listed = await _forks_listed(space, source_id, 10)
            assert set(listed) == forks[name], (
                f"list_sessions(forked_from={source_id!r}) in the {name} namespace must list "
                f"exactly its own forks {sorted(forks[name])}, found {sorted(listed)}"
            )

    async def test_fork_listing_skips_expired_forks(self, manager: SessionManager) -> None:
        """Forks expire with their ttl like any session: once past it (unpurged),
        list_sessions(forked_from=ID) no longer lists them, while a fork made later and
        still live is listed."""
        self.require(manager, "branching")
        self.require(manager, "ttl")
        space = await self.frozen(manager, ttl=TTL)
        source = await space.create(self.new_id("src"))
        source.add_event("user", "hi")
        await space.save(source)
        old = [self.new_id("fork") for _ in range(2)]
        for fork_id in old:
            await space.fork(source.session_id, fork_id)
        self.clock.advance(TTL / 2)
        source.add_event("user", "keeps the source alive")
        await space.save(source)
        young = self.new_id("fork")
        await space.fork(source.session_id, young)
        self.clock.advance(TTL / 2 + 1)
        listed = await _forks_listed(space, source.session_id, 10)
        assert listed == [young], (
            f"forks must expire with their ttl: list_sessions(forked_from=...) must list only "
            f"the live fork {young!r}, found {listed} (expired: {old})"
        )

    async def test_listings_page_through_ties_exactly_once(self, manager: SessionManager) -> None:
        """Sessions and forks made at one instant (the same created_at to the microsecond)
        are each listed exactly once when paged two at a time, by list_sessions(),
        list_sessions(user_id=) and list_sessions(forked_from=): the cursor breaks ties by
        id, never skipping or repeating a session that shares the last one's timestamp."""
        self.require(manager, "branching")
        space = await self.frozen(manager)
        owner = self.new_user()
        source = await space.create(self.new_id("src"), owner)
        source.add_event("user", "hi")
        await space.save(source)
        forks = [self.new_id("fork") for _ in range(TIED)]
        for fork_id in forks:
            await space.fork(source.session_id, fork_id)
        plain = [self.new_id("tie") for _ in range(TIED)]
        for session_id in plain:
            await space.create(session_id, owner)
        listed = await _forks_listed(space, source.session_id, 2)
        assert sorted(listed) == sorted(forks) and len(listed) == TIED, (
            f"list_sessions(forked_from=..., limit=2) over {TIED} forks made at one instant "
            f"must list each once: expected {sorted(forks)}, found {sorted(listed)}"
        )
        expected = {source.session_id, *forks, *plain}
        for user_id in (None, owner):
            found = [s.session_id for s in await self.list_all(space, user_id=user_id, limit=2)]
            assert sorted(found) == sorted(expected), (
                f"list_sessions(user_id={user_id!r}, limit=2) over sessions made at one instant "
                f"must list each once: missing {sorted(expected - set(found))}, "
                f"unexpected {sorted(set(found) - expected)}"
            )

    async def test_an_erased_forks_id_used_again_is_listed_under_its_new_source(
        self, manager: SessionManager
    ) -> None:
        """Once a fork is erased, by delete() or by delete_user() of its owner, nothing
        of it still lists it under its source: its id used again, by a session that is
        no fork and then by a fork of another source, is listed by
        list_sessions(forked_from=) under the source it now has only (a fork index
        entry left by the erasure must not revive it under the old one)."""
        self.require(manager, "branching")
        for erase in ("delete", "delete_user"):
            owner = self.new_user()
            source = await manager.create(self.new_id("src"), owner)
            source.add_event("user", "hi")
            await manager.save(source)
            fork_id = self.new_id("fork")
            await manager.fork(source.session_id, fork_id)
            if erase == "delete":
                assert await manager.delete(fork_id), (
                    f"delete({fork_id!r}) of a live fork must return True, found False"
                )
            else:
                erased = await manager.delete_user(owner)
                assert erased == 2, (
                    f"delete_user({owner!r}) must erase the user's source and its fork: "
                    f"expected 2 sessions erased, found {erased}"
                )
            await self.check_erased(manager, fork_id, f"{erase}() erased the fork")
            await manager.create(fork_id, self.new_user())
            listed = await _forks_listed(manager, source.session_id, 10)
            assert listed == [], (
                f"after {erase}() of fork {fork_id!r} and create() of a session that is no "
                f"fork under its id, list_sessions(forked_from={source.session_id!r}) must "
                f"list no forks: expected [], found {listed}"
            )
            assert await manager.delete(fork_id), (
                f"delete({fork_id!r}) of the session just created must return True, found False"
            )
            other = await manager.create(self.new_id("src"))
            other.add_event("user", "another source")
            await manager.save(other)
            await manager.fork(other.session_id, fork_id)
            listed = await _forks_listed(manager, source.session_id, 10)
            assert listed == [], (
                f"after {erase}() of fork {fork_id!r} and a fork of another source under "
                f"its id, list_sessions(forked_from={source.session_id!r}) (the old source) "
                f"must list no forks: expected [], found {listed}"
            )
            listed = await _forks_listed(manager, other.session_id, 10)
            assert listed == [fork_id], (
                f"list_sessions(forked_from={other.session_id!r}) must list the fork made "
                f"under the reused id {fork_id!r}: expected [{fork_id!r}], found {listed}"
            )

    # -- fork of an expired source ------------------------------------------------------

    async def test_fork_of_an_expired_source_is_not_found(self, manager: SessionManager) -> None:
        """fork() of a source past its ttl, not yet purged, raises SessionNotFoundError
        and stores nothing under the new id ("an expired session is absent to every
        call"); a moment before the expiry the same fork succeeds."""
        self.require(manager, "branching")
        self.require(manager, "ttl")
        space = await self.frozen(manager, ttl=TTL)
        source = await space.create(self.new_id("src"))
        source.add_event("user", "hi")
        await space.save(source)
        self.clock.advance(PAST_TTL - 10)
        early = self.new_id("fork")
        await space.fork(source.session_id, early)
        self.clock.advance(11)
        late = self.new_id("fork")
        with pytest.raises(SessionNotFoundError):
            await space.fork(source.session_id, late)
        assert await space.get(late) is None, "fork() of an expired source must not store the fork"
        await self.check_erased(space, late, "fork() of an expired source was refused")

    # -- rewind -------------------------------------------------------------------------

    async def test_rewind_of_an_earlier_lifes_copy_is_a_conflict(
        self, manager: SessionManager
    ) -> None:
        """rewind() of a copy loaded before its id was deleted and created again raises
        SessionConflictError and changes nothing, even when the new life stands at the
        copy's version: a rewind checks the lineage with the version, as a save does."""
        self.require(manager, "branching")
        session_id = self.new_id()
        first = await manager.create(session_id)
        for index in range(4):
            first.add_event("user", f"old {index}")
        await manager.save(first)
        stale = await manager.get(session_id)
        assert stale is not None, (
            f"get({session_id!r}) returned None: a session just saved must be found"
        )
        await manager.delete(session_id)
        second = await manager.create(session_id)
        for index in range(4):
            second.add_event("user", f"new {index}")
        await manager.save(second)
        before = await self.readback(manager, session_id)
        assert before is not None and before.version == stale.version, (
            f"setup: the new life stands at version {before and before.version}, "
            f"the stale copy at {stale.version}"
        )
        with pytest.raises(SessionConflictError):
            await manager.rewind(stale, stale.events[0].id)
        after = await self.readback(manager, session_id)
        assert snapshot(after) == snapshot(before), (
            "rewind() of a copy of an earlier life must write nothing, but the session "
            f"changed from {[e.content for e in before.events]} to "
            f"{[e.content for e in after.events] if after else None}"
        )
        await self.check_positions(manager, session_id, len(before.events))

    async def test_rewind_keeps_the_save_token_window(self, manager: SessionManager) -> None:
        """A save whose reply was lost, retried after a rewind of the same session by
        another copy, is recognised as landed (the token window is the session's last
        TOKENS_KEPT writes, whatever mix of saves, compactions and rewinds made them):
        the retry succeeds and writes nothing."""
        self.require(manager, "branching")
        mine = await self.session_with_events(manager, 3)
        sid = mine.session_id
        await _lose_save(manager, mine, "mine")
        other = await manager.get(sid)
        assert other is not None, (
            f"get({sid!r}) returned None after a save() whose reply was lost: the session must "
            "be found"
        )
        await manager.rewind(other, other.events[-2].id)  # another write of the session
        before = await self.readback(manager, sid)
        assert before is not None, (
            f"get({sid!r}) (read-back) returned None after rewind(): the session must still be "
            "stored"
        )
        try:
            await manager.save(mine)  # the very request, token and all
        except SessionConflictError:
            pytest.fail(
                "save() retried after a rewind of the same session raised "
                "SessionConflictError: a rewind must keep the session's save tokens, "
                "so that a save that landed is recognised"
            )
        after = await self.readback(manager, sid)
        assert snapshot(after) == snapshot(before), (
            "the retried save landed twice after a rewind: the session changed from "
            f"{[e.content for e in before.events]} to "
            f"{[e.content for e in after.events] if after else None}"
        )

    # -- save tokens --------------------------------------------------------------------

    async def test_a_save_token_is_recognised_only_for_its_own_session(
        self, manager: SessionManager
    ) -> None:
        """A save request for session B carrying the token of a save that landed on
        session A is not taken as landed: B's save is applied (a token is looked up in
        the session's own tokens only)."""
        mine = await self.session_with_events(manager, 1)
        await _lose_save(manager, mine, "landed on A")
        tracking = mine._loaded
        assert tracking is not None and tracking.sent is not None, "no pending save to replay"
        token = tracking.sent.token
        other = await self.session_with_events(manager, 1)
        other.add_event("user", "meant for B")
        with lost_replies(manager, "_save", landed=False), pytest.raises(BackendUnavailableError):
            await manager.save(other)
        pending = other._loaded
        assert pending is not None and pending.sent is not None, "no pending save for B"
        borrowed = dataclasses.replace(pending.sent, token=token)
        await manager._save(borrowed, borrowed.record.updated_at)
        stored = await self.readback(manager, other.session_id)
        assert stored is not None, (
            f"get({other.session_id!r}) (read-back) returned None after a save carrying another "
            "session's token: the session must still be stored"
        )
        assert [e.content for e in stored.events] == ["e0", "meant for B"], (
            "a save of session B carrying a token of session A must be applied, not taken "
            f"as landed: B holds {[e.content for e in stored.events]}"
        )

    async def test_the_token_window_holds_the_newest_writes_of_a_long_lived_session(
        self, manager: SessionManager
    ) -> None:
        """After more than TOKENS_KEPT writes (saves, compactions, rewinds), a save whose
        reply was lost and which is retried after TOKENS_KEPT - 1 further writes is still
        recognised: the window keeps the newest tokens, not the first ones."""
        session = await self.session_with_events(manager, 2)
        sid = session.session_id
        compaction = manager.capabilities.compaction
        branching = manager.capabilities.branching

        async def write(index: int) -> None:
            copy = await manager.get(sid, last_events=2)
            assert copy is not None, (
                f"get({sid!r}, last_events=2) returned None before write {index}: the session "
                "must still be found"
            )
            if compaction and index % 7 == 3 and copy.events:
                await manager.compact(copy, copy.events[0].id, [_summary(f"c{index}")])
            elif branching and index % 7 == 5 and len(copy.events) >= 2:
                await manager.rewind(copy, copy.events[0].id)
            else:
                copy.add_event("writer", f"w{index}")
                await manager.save(copy)

        for index in range(TOKENS_KEPT + 8):
            await write(index)
        mine = await manager.get(sid, last_events=2)
        assert mine is not None, (
            f"get({sid!r}, last_events=2) returned None after {TOKENS_KEPT + 8} writes: the "
            "session must still be found"
        )
        await _lose_save(manager, mine, "mine")
        for index in range(TOKENS_KEPT - 1):
            await write(1000 + index)
        before = await self.readback(manager, sid)
        assert before is not None, (
            f"get({sid!r}) (read-back) returned None after {TOKENS_KEPT - 1} further writes: "
            "the session must still be stored"
        )
        try:
            await manager.save(mine)
        except SessionConflictError:
            pytest.fail(
                f"a save retried after {TOKENS_KEPT - 1} later writes of a session that had "
                f"made more than {TOKENS_KEPT} raised SessionConflictError: the token window "
                "must keep the newest tokens, not the oldest"
            )
        after = await self.readback(manager, sid)
        assert snapshot(after) == snapshot(before), "the retried save was written a second time"

    # -- delete_user and archives -------------------------------------------------------

    async def test_delete_user_erases_archives_in_its_namespace_only(
        self, manager: SessionManager
    ) -> None:
        """delete_user() leaves nothing of the erased sessions, their archives included,
        and leaves the same user's sessions and archives in another namespace untouched."""
        self.require(manager, "compaction")
        self.require(manager, "namespaces")
        left = manager
        right = await self.variant(manager, namespace=self.new_namespace())
        user = self.new_user()
        sid = self.new_id()
        for space in (left, right):
            session = await space.create(sid, user)
            for index in range(4):
                session.add_event("user", f"e{index}")
            await space.save(session)
            await space.compact(session, session.events[1].id, [_summary("s")], archive=True)
        kept = _held(await self.inventory(right, sid))
        assert await left.delete_user(user) == 1, (
            f"delete_user({user!r}) must count the one session of that user in its own "
            "namespace (not the same id in another namespace): it returned another count"
        )
        await self.check_erased(left, sid, "delete_user() erased the session with its archive")
        found = _held(await self.inventory(right, sid))
        assert found == kept, (
            "delete_user() in one namespace must leave another namespace's sessions and "
            f"archives alone: before {kept}, after {found}"
        )
        archived = await right.archived_events(sid)
        assert [e.content for e in archived] == ["e0", "e1"], (
            f"archived_events() in the other namespace lost its archive: {archived}"
        )
