"""create(): stores a new session and never overwrites one."""

from __future__ import annotations

import pytest
from agentsessions import SessionExistsError, SessionManager

from ._base import SuiteBase, snapshot


class CreateTests(SuiteBase):
    async def test_create_stores_new_session(self, manager: SessionManager) -> None:
        """create() stores a new empty session at version 1 with the given user and state."""
        session_id, user = self.new_id(), self.new_user()
        created = await manager.create(session_id, user, state={"plan": ["a", "b"]})
        assert created.session_id == session_id, (
            f"create({session_id!r}) must return a session with that id: it has "
            f"session_id={created.session_id!r}"
        )
        assert created.user_id == user, (
            f"create({session_id!r}, {user!r}) must return a session owned by that user: it has "
            f"user_id={created.user_id!r}"
        )
        assert created.events == [], (
            f"create() must return a session with no events: it has {len(created.events)}"
        )
        assert created.state == {"plan": ["a", "b"]}, (
            f"create(state={{'plan': ['a', 'b']}}) must return that state: it has {created.state!r}"
        )
        assert created.version == 1, (
            f"create() must return a session at version 1: it has version {created.version}"
        )
        assert created.created_at == created.updated_at, (
            "create() must return a session whose updated_at equals its created_at: created_at "
            f"{created.created_at.isoformat()}, updated_at {created.updated_at.isoformat()}"
        )
        stored = await self.readback(manager, session_id)
        assert stored is not None, "the created session is not stored"
        assert snapshot(stored) == snapshot(created), (
            f"get({session_id!r}) (read-back) after create() must return exactly what create() "
            f"returned: expected {snapshot(created)!r}, read back {snapshot(stored)!r}"
        )

    async def test_create_without_user_or_state(self, manager: SessionManager) -> None:
        """create() with no user_id and no state stores user None and an empty state."""
        session_id = self.new_id()
        await manager.create(session_id)
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None after create({session_id!r}): "
            "the created session must be stored"
        )
        assert stored.user_id is None, (
            "create() without a user_id must store user_id None: read back "
            f"user_id={stored.user_id!r}"
        )
        assert stored.state == {}, (
            f"create() without a state must store an empty state: read back {stored.state!r}"
        )

    async def test_create_never_overwrites(self, manager: SessionManager) -> None:
        """create() of a stored id raises SessionExistsError; the stored one is untouched."""
        session_id, user = self.new_id(), self.new_user()
        first = await manager.create(session_id, user, state={"who": "first"})
        first.add_event("user", "hello")
        await manager.save(first)
        before = snapshot(await self.readback(manager, session_id))
        with pytest.raises(SessionExistsError):
            await manager.create(session_id, self.new_user(), state={"who": "second"})
        with pytest.raises(SessionExistsError):
            await manager.create(session_id)
        assert snapshot(await self.readback(manager, session_id)) == before, (
            f"create({session_id!r}) of an id already stored raised SessionExistsError, so it "
            "must leave the stored session untouched: it reads back changed"
        )

    async def test_create_state_is_copied(self, manager: SessionManager) -> None:
        """Mutating the state given to create(), or its result, changes nothing stored."""
        session_id = self.new_id()
        state: dict[str, object] = {"items": [1, 2], "nested": {"k": "v"}}
        created = await manager.create(session_id, state=state)
        state["items"].append(3)  # type: ignore[attr-defined]
        state["new"] = True
        created.state["nested"]["k"] = "changed"
        created.add_event("user", "not saved")
        for stored in (await self.readback(manager, session_id), await manager.get(session_id)):
            assert stored is not None, (
                f"get({session_id!r}) returned None after create({session_id!r}): the created "
                "session must be stored"
            )
            assert stored.state == {"items": [1, 2], "nested": {"k": "v"}}, (
                "create() must store a copy of the state: mutating the dict given to create(), "
                "or the returned session's state, must not change what is stored: expected "
                f"{{'items': [1, 2], 'nested': {{'k': 'v'}}}}, found {stored.state!r}"
            )
            assert stored.events == [], (
                "an event added to create()'s result without save() must not be stored: found "
                f"{[e.content for e in stored.events[:8]]!r}"
            )
