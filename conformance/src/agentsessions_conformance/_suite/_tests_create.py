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
        assert created.session_id == session_id
        assert created.user_id == user
        assert created.events == []
        assert created.state == {"plan": ["a", "b"]}
        assert created.version == 1
        assert created.created_at == created.updated_at
        stored = await self.readback(manager, session_id)
        assert stored is not None, "the created session is not stored"
        assert snapshot(stored) == snapshot(created)

    async def test_create_without_user_or_state(self, manager: SessionManager) -> None:
        """create() with no user_id and no state stores user None and an empty state."""
        session_id = self.new_id()
        await manager.create(session_id)
        stored = await self.readback(manager, session_id)
        assert stored is not None
        assert stored.user_id is None
        assert stored.state == {}

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
        assert snapshot(await self.readback(manager, session_id)) == before

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
            assert stored is not None
            assert stored.state == {"items": [1, 2], "nested": {"k": "v"}}
            assert stored.events == []
