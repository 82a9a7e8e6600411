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
        assert page.next_cursor is None
        assert len(page.items) == 1
        item = page.items[0]
        assert isinstance(item, SessionSummary)
        assert item.session_id == session_id
        assert item.user_id == user
        assert item.created_at == session.created_at
        assert item.updated_at == session.updated_at
        assert item.event_count == 3
        assert item.version == session.version
        assert not hasattr(item, "events") and not hasattr(item, "state")

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
        assert sorted(item.session_id for item in items) == sorted(ids)
        keys = [(item.created_at, item.session_id) for item in items]
        assert keys == sorted(keys, reverse=True)
        assert [item.session_id for item in items[-3:]] == ids[:3][::-1]

    async def test_list_order_ignores_updates(self, manager: SessionManager) -> None:
        """Saving an older session does not move it in the listing order."""
        lister = await self._lister(manager)
        user = self.new_user()
        ids = [self.new_id() for _ in range(3)]
        for session_id in ids:
            await lister.create(session_id, user)
        oldest = await lister.get(ids[0])
        assert oldest is not None
        oldest.add_event("user", "touch")
        await lister.save(oldest)
        listed = [item.session_id for item in await self.list_all(lister, user_id=user)]
        assert listed == ids[::-1]

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
            assert len(page.items) <= 2
            seen.extend(item.session_id for item in page.items)
            if pages == 2:  # saving sessions mid-way must not make paging skip or repeat
                for session_id in ids:
                    await lister.update(session_id, lambda s: s.add_event("user", "x"))
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == ids[::-1]
        assert pages == 4
        unfiltered = [
            item.session_id
            for item in await self.list_all(lister, limit=3)
            if item.session_id in ids
        ]
        assert unfiltered == ids[::-1]

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
        assert {i.session_id for i in await self.list_all(lister, user_id=alice)} == set(alices)
        assert {i.session_id for i in await self.list_all(lister, user_id=bob)} == set(bobs)
        assert await self.list_all(lister, user_id=self.new_user()) == []
        everyone = {i.session_id for i in await self.list_all(lister)}
        assert {*alices, *bobs, anonymous} <= everyone

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
        assert isinstance(info.value, ValueError)

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
                assert listed == expected, f"limit={limit}, user_id={who!r}"

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
            assert sorted(seen) == sorted(alices), f"limit={limit}"
            assert len(seen) == len(set(seen))
        everyone = [item.session_id for item in await self.list_all(lister, limit=7)]
        assert set(alices) <= set(everyone)

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
        ]

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
        assert await self.list_all(default, user_id=user) == []
        assert await default.delete_user(user) == 0
        assert await default.delete(session_id) is False
        assert await other.get(session_id) is not None
