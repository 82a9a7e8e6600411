"""list_sessions(): summaries, newest created first, a cursor that visits each once."""

from __future__ import annotations

import asyncio
import base64

import pytest
from agentsessions import InvalidInputError, SessionManager, SessionSummary

from ._base import SuiteBase


class ListingTests(SuiteBase):
    async def _lister(self, manager: SessionManager) -> SessionManager:
        # A shared server may hold other sessions: list inside a fresh namespace when
        # the backend has them; otherwise the assertions look only at our own ids.
        if manager.capabilities.namespaces:
            return await self.variant(manager, namespace=self.new_namespace())
        return manager

    async def test_list_returns_summaries(self, manager: SessionManager) -> None:
        """list_sessions() returns summaries: id, user, times, event count, version; no events."""
        lister = await self._lister(manager)
        user = self.new_user()
        session_id = self.new_id()
        session = await lister.create(session_id, user, state={"big": "x" * 100})
        for i in range(3):
            session.add_event("user", f"e{i}")
        await lister.save(session)
        page = await lister.list_sessions(user_id=user)
        assert page.next_cursor is None, (
            "list_sessions(user_id=...) of a user with one session must fit in one page: "
            f"expected next_cursor=None, found {page.next_cursor!r}"
        )
        assert len(page.items) == 1, (
            "list_sessions(user_id=...) must list exactly the user's one session: expected 1 "
            f"summary, found {len(page.items)}: {[i.session_id for i in page.items[:8]]!r}"
        )
        item = page.items[0]
        assert isinstance(item, SessionSummary), (
            f"list_sessions() must return SessionSummary items: found {type(item).__qualname__}"
        )
        assert item.session_id == session_id, (
            f"list_sessions(user_id=...) must list the user's session: expected session_id "
            f"{session_id!r}, found {item.session_id!r}"
        )
        assert item.user_id == user, (
            f"list_sessions() must report the session's owner: expected user_id {user!r}, "
            f"found {item.user_id!r}"
        )
        assert item.created_at == session.created_at, (
            "list_sessions() must report the session's created_at: expected "
            f"{session.created_at.isoformat()}, found {item.created_at.isoformat()}"
        )
        assert item.updated_at == session.updated_at, (
            "list_sessions() must report the updated_at of the last save(): expected "
            f"{session.updated_at.isoformat()}, found {item.updated_at.isoformat()}"
        )
        assert item.event_count == 3, (
            "list_sessions() must count the stored events: expected event_count=3 after a "
            f"save() of 3 events, found {item.event_count}"
        )
        assert item.version == session.version, (
            "list_sessions() must report the version of the last save(): expected "
            f"version={session.version}, found {item.version}"
        )
        assert not hasattr(item, "events") and not hasattr(item, "state"), (
            "list_sessions() returns summaries, never the events or state: the summary has "
            f"{[name for name in ('events', 'state') if hasattr(item, name)]}"
        )

    async def test_list_newest_created_first(self, manager: SessionManager) -> None:
        """list_sessions() orders by created_at descending, ties by session_id descending."""
        lister = await self._lister(manager)
        user = self.new_user()
        ids = [self.new_id() for _ in range(6)]
        for session_id in ids[:3]:
            await lister.create(session_id, user)
        # Concurrent creates may share a timestamp: the tie-break decides their order.
        await asyncio.gather(*(lister.create(session_id, user) for session_id in ids[3:]))
        items = [
            item for item in await self.list_all(lister, user_id=user) if item.session_id in ids
        ]
        assert sorted(item.session_id for item in items) == sorted(ids), (
            f"list_sessions(user_id=...) must list each of the user's {len(ids)} sessions once: "
            f"found {len(items)} of them, {len({i.session_id for i in items})} distinct"
        )
        keys = [(item.created_at, item.session_id) for item in items]
        assert keys == sorted(keys, reverse=True), (
            "list_sessions() must list newest created first, ties by session_id descending: "
            f"found the order {[(c.isoformat(), sid) for c, sid in keys[:8]]!r}"
        )
        assert [item.session_id for item in items[-3:]] == ids[:3][::-1], (
            "list_sessions() must list the 3 sessions created one after another last, newest "
            f"first: expected {ids[:3][::-1]!r}, found {[i.session_id for i in items[-3:]]!r}"
        )

    async def test_list_order_ignores_updates(self, manager: SessionManager) -> None:
        """Saving an older session does not move it in the listing order."""
        lister = await self._lister(manager)
        user = self.new_user()
        ids = [self.new_id() for _ in range(3)]
        for session_id in ids:
            await lister.create(session_id, user)
        oldest = await lister.get(ids[0])
        assert oldest is not None, (
            f"get({ids[0]!r}) returned None: a session just created must be found"
        )
        oldest.add_event("user", "touch")
        await lister.save(oldest)
        listed = [item.session_id for item in await self.list_all(lister, user_id=user)]
        assert listed == ids[::-1], (
            "list_sessions() orders by created_at, so a save() of the oldest session must not "
            f"move it: expected {ids[::-1]!r}, found {listed[:8]!r}"
        )

    async def test_list_paging_visits_each_once(self, manager: SessionManager) -> None:
        """Paging with next_cursor visits each session once, in order, even during saves."""
        lister = await self._lister(manager)
        user = self.new_user()
        ids = [self.new_id() for _ in range(7)]
        for session_id in ids:
            await lister.create(session_id, user)
        seen: list[str] = []
        cursor = None
        pages = 0
        for _ in range(len(ids) + 2):  # more pages than that is already wrong
            page = await lister.list_sessions(user_id=user, limit=2, cursor=cursor)
            pages += 1
            assert len(page.items) <= 2, (
                f"list_sessions(limit=2) must return at most 2 summaries a page: page {pages} "
                f"held {len(page.items)}"
            )
            seen.extend(item.session_id for item in page.items)
            if pages == 2:  # saving sessions mid-way must not make paging skip or repeat
                for session_id in ids:
                    await lister.update(session_id, lambda s: s.add_event("user", "x"))
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == ids[::-1], (
            "paging list_sessions(user_id=..., limit=2) with next_cursor must visit each "
            "session once, newest first, even with saves between pages: expected "
            f"{ids[::-1]!r}, found {seen[:10]!r} ({len(seen)} items)"
        )
        assert pages == 4, (
            f"paging {len(ids)} sessions with list_sessions(limit=2) must take exactly 4 pages "
            f"(the last one with next_cursor=None): it took {pages}"
        )
        unfiltered = [
            item.session_id
            for item in await self.list_all(lister, limit=3)
            if item.session_id in ids
        ]
        assert unfiltered == ids[::-1], (
            "paging list_sessions(limit=3) without a user filter must list the test's sessions "
            f"once each, newest first: expected {ids[::-1]!r}, found {unfiltered[:10]!r}"
        )

    async def test_list_filters_by_user(self, manager: SessionManager) -> None:
        """list_sessions(user_id=...) returns that user's sessions only; without it, everyone's."""
        lister = await self._lister(manager)
        alice, bob = self.new_user(), self.new_user()
        alices = [self.new_id() for _ in range(2)]
        bobs = [self.new_id() for _ in range(3)]
        anonymous = self.new_id()
        for session_id in alices:
            await lister.create(session_id, alice)
        for session_id in bobs:
            await lister.create(session_id, bob)
        await lister.create(anonymous)
        assert {i.session_id for i in await self.list_all(lister, user_id=alice)} == set(alices), (
            "list_sessions(user_id=alice) must list exactly alice's sessions: expected "
            f"{sorted(alices)!r}, found other or missing sessions"
        )
        assert {i.session_id for i in await self.list_all(lister, user_id=bob)} == set(bobs), (
            "list_sessions(user_id=bob) must list exactly bob's sessions: expected "
            f"{sorted(bobs)!r}, found other or missing sessions"
        )
        assert await self.list_all(lister, user_id=self.new_user()) == [], (
            "list_sessions(user_id=...) of a user who has no sessions must list nothing: "
            "found sessions"
        )
        everyone = {i.session_id for i in await self.list_all(lister)}
        assert {*alices, *bobs, anonymous} <= everyone, (
            "list_sessions() without user_id must list every user's sessions, anonymous ones "
            f"too: missing {sorted({*alices, *bobs, anonymous} - everyone)!r}"
        )

    @pytest.mark.parametrize("limit", [0, -1, 1001, "10", 2.0, None, True])
    async def test_list_invalid_limit_raises(self, manager: SessionManager, limit: object) -> None:
        """list_sessions() with a limit outside 1..1000 or not an int raises InvalidInputError."""
        with pytest.raises(InvalidInputError):
            await manager.list_sessions(limit=limit)  # type: ignore[arg-type]

    @pytest.mark.parametrize(
        "cursor",
        [
            "not a cursor!",
            "",
            base64.urlsafe_b64encode(b'["yesterday", "x"]').decode(),
            base64.urlsafe_b64encode(b'["2024-01-01T00:00:00", "x"]').decode(),
            base64.urlsafe_b64encode(b'{"$gt": ""}').decode(),
        ],
        ids=["garbage", "empty", "bad-date", "naive-date", "mongo-operator"],
    )
    async def test_list_malformed_cursor_raises(self, manager: SessionManager, cursor: str) -> None:
        """list_sessions() with a malformed cursor raises InvalidInputError (a ValueError)."""
        with pytest.raises(InvalidInputError) as info:
            await manager.list_sessions(cursor=cursor)
        assert isinstance(info.value, ValueError), (
            f"list_sessions(cursor={cursor!r}) must raise an InvalidInputError that is also a "
            f"ValueError: found {type(info.value).__qualname__}, not a ValueError"
        )

    async def test_list_ties_page_by_id(self, manager: SessionManager) -> None:
        """Sessions created at one instant list by session_id descending, and paging at any
        page size visits each exactly once, filtered by user or not."""
        lister = await self.frozen(manager)
        user = self.new_user()
        tied = [self.new_id() for _ in range(9)]
        for session_id in tied:
            await lister.create(session_id, user)
        self.clock.tick()
        later = [self.new_id() for _ in range(2)]
        for session_id in later:
            await lister.create(session_id, user)
        expected = sorted(later, reverse=True) + sorted(tied, reverse=True)
        ours = set(expected)
        for limit in (1, 2, 4, 100):
            for who in (None, user):
                listed = [
                    item.session_id
                    for item in await self.list_all(lister, user_id=who, limit=limit)
                    if item.session_id in ours
                ]
                assert listed == expected, (
                    f"paging list_sessions(user_id={who!r}, limit={limit}) must list sessions "
                    "created at one instant by session_id descending, each exactly once: "
                    f"expected {expected[:8]!r}, found {listed[:8]!r} ({len(listed)} of "
                    f"{len(expected)})"
                )

    async def test_list_user_filter_holds_on_every_page(self, manager: SessionManager) -> None:
        """With other users' sessions interleaved at the same instants, every page of a
        user-filtered listing holds only that user's sessions, and paging finds all of them."""
        lister = await self.frozen(manager)
        alice, bob = self.new_user(), self.new_user()
        alices: list[str] = []
        for round_ in range(12):
            for who in (bob, alice, None, bob):
                session = await lister.create(self.new_id(), who)
                if who == alice:
                    alices.append(session.session_id)
            if round_ % 3 == 2:
                self.clock.tick()
        for limit in (1, 2, 5):
            cursor = None
            seen: list[str] = []
            for _ in range(len(alices) + 2):
                page = await lister.list_sessions(user_id=alice, limit=limit, cursor=cursor)
                assert {item.user_id for item in page.items} <= {alice}, (
                    f"a page of the user filter (limit={limit}) holds other users' sessions"
                )
                seen.extend(item.session_id for item in page.items)
                cursor = page.next_cursor
                if cursor is None:
                    break
            assert sorted(seen) == sorted(alices), (
                f"paging list_sessions(user_id=alice, limit={limit}) must find each of alice's "
                f"{len(alices)} sessions: found {len(seen)} items, missing "
                f"{sorted(set(alices) - set(seen))[:8]!r}"
            )
            assert len(seen) == len(set(seen)), (
                f"paging list_sessions(user_id=alice, limit={limit}) must visit each session "
                f"once: found {len(seen) - len(set(seen))} repeated"
            )
        everyone = [item.session_id for item in await self.list_all(lister, limit=7)]
        assert set(alices) <= set(everyone), (
            "paging list_sessions(limit=7) without a user filter must list alice's sessions "
            f"too: missing {sorted(set(alices) - set(everyone))[:8]!r}"
        )

    async def test_list_many_pages_in_order(self, manager: SessionManager) -> None:
        """Sixty sessions page out in (created_at, session_id) descending order, one per page."""
        lister = await self.frozen(manager)
        user = self.new_user()
        created: list[tuple[object, str]] = []
        for index in range(60):
            session = await lister.create(self.new_id(), user)
            created.append((session.created_at, session.session_id))
            if index % 4 == 0:
                self.clock.advance(0.001)
        listed = await self.list_all(lister, user_id=user, limit=1)
        assert [item.session_id for item in listed] == [
            sid for _, sid in sorted(created, reverse=True)
        ], (
            f"paging list_sessions(user_id=..., limit=1) through {len(created)} sessions must "
            "list them by (created_at, session_id) descending, one a page: found "
            f"{len(listed)} items, the first ones "
            f"{[(i.created_at.isoformat(), i.session_id) for i in listed[:4]]!r}"
        )

    async def test_default_namespace_lists_only_its_own(self, manager: SessionManager) -> None:
        """The default namespace never lists, counts or erases another namespace's sessions."""
        self.require(manager, "namespaces")
        default = manager
        if manager.options.namespace:
            default = await self.variant(manager, namespace="")
        other = await self.variant(manager, namespace=self.new_namespace())
        user = self.new_user()
        session_id = self.new_id()
        await other.create(session_id, user)
        listed = {item.session_id for item in await self.list_all(default, limit=1000)}
        assert session_id not in listed, "the default namespace lists another one's session"
        assert await self.list_all(default, user_id=user) == [], (
            "list_sessions(user_id=...) in the default namespace must not list a user's "
            f"session stored in another namespace ({session_id!r}): found sessions"
        )
        assert await default.delete_user(user) == 0, (
            "delete_user() in the default namespace must not count or erase sessions of "
            "another namespace: expected it to return 0"
        )
        assert await default.delete(session_id) is False, (
            f"delete({session_id!r}) in the default namespace must return False for a "
            "session stored only in another namespace"
        )
        assert await other.get(session_id) is not None, (
            f"get({session_id!r}) in its own namespace returned None: operations in the "
            "default namespace must never erase another namespace's session"
        )
