"""Lost replies: a write lands but its reply never arrives, and the retry must not repeat it.

The kit wraps the manager's own write hook (`lost_replies`), so this runs on any backend
with no adopter code. A backend that does not check the save token FIRST (before the
version check) turns the retry of a landed save into a conflict, and the retry of an
``update()`` into its function applied twice: these clauses fail on it.
"""

from __future__ import annotations

import pytest
from agentsessions import (
    BackendUnavailableError,
    Session,
    SessionConflictError,
    SessionManager,
)

from .._faults import lost_replies
from ._base import SuiteBase


class LostReplyTests(SuiteBase):
    async def _loaded(self, manager: SessionManager, events: int = 2) -> Session:
        session_id = self.new_id()
        session = await manager.create(session_id, state={"n": 0})
        for i in range(events):
            session.add_event("user", f"before-{i}")
        await manager.save(session)
        loaded = await manager.get(session_id)
        assert loaded is not None
        return loaded

    async def test_lost_reply_save_retry_lands_exactly_once(self, manager: SessionManager) -> None:
        """A save whose reply was lost raises BackendUnavailableError; save() again with the
        session unchanged re-sends it with its token and succeeds, and it landed once: one
        version step, its events once, its state once."""
        session = await self._loaded(manager)
        version = session.version
        session.add_event("assistant", "once")
        session.state["n"] = 1
        with lost_replies(manager, "_save") as faults:
            with pytest.raises(BackendUnavailableError):
                await manager.save(session)
            await manager.save(session)  # the retry: same request, same token
        assert faults.lost == 1 and faults.calls == 2
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert stored.version == version + 1, "the retried save took a second version step"
        assert [e.content for e in stored.events] == ["before-0", "before-1", "once"]
        assert stored.state == {"n": 1}
        await self.check_positions(manager, session.session_id, 3)

    async def test_lost_reply_update_applies_fn_once(self, manager: SessionManager) -> None:
        """update() whose save's reply was lost re-sends that save until answered: *fn* is
        applied exactly once (one event, one version step), and the call succeeds."""
        session = await self._loaded(manager, events=0)
        calls = 0

        def append(current: Session) -> None:
            nonlocal calls
            calls += 1
            current.add_event("assistant", f"append-{calls}")
            current.state["n"] = current.state["n"] + 1

        with lost_replies(manager, "_save"):
            done = await manager.update(session.session_id, append)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert [e.content for e in stored.events] == ["append-1"], (
            "update() applied its function again after a lost reply: the backend did not "
            "recognise the re-sent save's token"
        )
        assert stored.state == {"n": 1}
        assert stored.version == session.version + 1
        assert calls == 1
        assert done.version == stored.version
        await self.check_positions(manager, session.session_id, 1)

    async def test_lost_reply_then_edit_is_a_new_save(self, manager: SessionManager) -> None:
        """After a lost reply, a session changed before the retry makes a new save: it
        conflicts with the first one, which landed, and nothing more is written."""
        session = await self._loaded(manager)
        version = session.version
        session.add_event("assistant", "first")
        with lost_replies(manager, "_save"), pytest.raises(BackendUnavailableError):
            await manager.save(session)
        session.add_event("assistant", "second")
        with pytest.raises(SessionConflictError):
            await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert stored.version == version + 1
        assert [e.content for e in stored.events][-1] == "first"
        await self.check_positions(manager, session.session_id, 3)

    async def test_lost_request_save_retry_lands(self, manager: SessionManager) -> None:
        """A save lost before it reached the backend did not land; the retry with the session
        unchanged lands it once."""
        session = await self._loaded(manager)
        version = session.version
        session.add_event("assistant", "late")
        with lost_replies(manager, "_save", landed=False) as faults:
            with pytest.raises(BackendUnavailableError):
                await manager.save(session)
            unchanged = await self.readback(manager, session.session_id)
            assert unchanged is not None and unchanged.version == version
            await manager.save(session)
        assert faults.lost == 1
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert stored.version == version + 1
        assert [e.content for e in stored.events][-1] == "late"
        await self.check_positions(manager, session.session_id, 3)

    async def test_lost_replies_one_after_another_each_land_once(
        self, manager: SessionManager
    ) -> None:
        """Five saves in a row, each losing its reply once and retried: five version steps,
        five events, each once (every retry's token is recognised, not only the first)."""
        session = await self._loaded(manager, events=0)
        version = session.version
        for i in range(5):
            session.add_event("assistant", f"turn-{i}")
            with lost_replies(manager, "_save"):
                with pytest.raises(BackendUnavailableError):
                    await manager.save(session)
                await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None
        assert stored.version == version + 5
        assert [e.content for e in stored.events] == [f"turn-{i}" for i in range(5)]
        await self.check_positions(manager, session.session_id, 5)
