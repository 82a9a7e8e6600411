"""open/close and persistence: a closed manager refuses work; saved data outlives a manager."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable

import pytest
from agentsessions import ManagerClosedError, Session, SessionManager

from ._base import SuiteBase, snapshot


class LifecycleTests(SuiteBase):
    async def test_close_is_idempotent(self, manager: SessionManager) -> None:
        """close() may be called any number of times, on an opened or never-opened manager."""
        opened = manager.with_options()
        await opened.open()
        await opened.close()
        await opened.close()
        never_opened = manager.with_options()
        await never_opened.close()
        await never_opened.close()

    async def test_calls_after_close_raise_manager_closed(self, manager: SessionManager) -> None:
        """Every operation on a closed manager raises ManagerClosedError."""
        session_id = self.new_id()
        closed = manager.with_options()
        await closed.open()
        await closed.close()
        calls: list[Callable[[], Awaitable[object]]] = [
            closed.open,
            lambda: closed.create(session_id),
            lambda: closed.get(session_id),
            lambda: closed.get_or_create(session_id),
            lambda: closed.save(Session(session_id=session_id, version=1)),
            lambda: closed.update(session_id, lambda s: None, create=True),
            lambda: closed.delete(session_id),
            lambda: closed.delete_user(self.new_user()),
            lambda: closed.list_sessions(),
            closed.purge_expired,
        ]
        for call in calls:
            with pytest.raises(ManagerClosedError):
                await call()
        assert await manager.get(session_id) is None, "a closed manager wrote a session"

    async def test_async_with_opens_and_closes(self, manager: SessionManager) -> None:
        """``async with`` opens the manager for the block and closes it on exit, even on error."""
        session_id = self.new_id()
        async with manager.with_options() as scoped:
            await scoped.create(session_id)
        with pytest.raises(ManagerClosedError):
            await scoped.get(session_id)
        failing = manager.with_options()
        with contextlib.suppress(KeyError):
            async with failing:
                raise KeyError("inside")
        with pytest.raises(ManagerClosedError):
            await failing.get(session_id)

    async def test_persistent_data_survives_reconnect(self, manager: SessionManager) -> None:
        """What one manager saved, a fresh manager reads back whole after the first is closed."""
        self.require(manager, "persistent")
        session_id, user = self.new_id(), self.new_user()
        writer = manager.with_options()
        async with writer:
            session = await writer.create(session_id, user, state={"kept": [1, "two"]})
            for i in range(5):
                session.add_event("user", f"e{i}", index=i)
            await writer.save(session)
            written = snapshot(session)
        async with manager.with_options() as reader:
            stored = await reader.get(session_id)
        assert snapshot(stored) == written, (
            f"get({session_id!r}) through a fresh manager, after the writer was closed, must "
            f"read back whole what was saved: expected {written!r}, found {snapshot(stored)!r}"
        )
