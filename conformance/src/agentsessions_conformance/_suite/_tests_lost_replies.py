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
        assert loaded is not None, (
            f"get({session_id!r}) returned None: a session just saved with {events} events "
            "must be found"
        )
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
        assert faults.lost == 1 and faults.calls == 2, (
            "a save() whose reply is lost, then save() again, must reach the backend's write "
            f"exactly twice with one reply lost: found {faults.calls} calls, {faults.lost} "
            "replies lost"
        )
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after a retried save(): "
            "the session must still be found"
        )
        assert stored.version == version + 1, "the retried save took a second version step"
        assert [e.content for e in stored.events] == ["before-0", "before-1", "once"], (
            "the retry of a save() whose reply was lost must land its events exactly once: "
            "expected ['before-0', 'before-1', 'once'], found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        assert stored.state == {"n": 1}, (
            "the retry of a save() whose reply was lost must store its state: expected "
            f"{{'n': 1}}, found {stored.state!r:.100}"
        )
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
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after an update() whose "
            "reply was lost: the session must still be found"
        )
        assert [e.content for e in stored.events] == ["append-1"], (
            "update() applied its function again after a lost reply: the backend did not "
            "recognise the re-sent save's token"
        )
        assert stored.state == {"n": 1}, (
            "update() whose save's reply was lost must apply its function once: expected state "
            f"{{'n': 1}}, found {stored.state!r:.100}"
        )
        assert stored.version == session.version + 1, (
            "update() whose save's reply was lost must take one version step: expected "
            f"version {session.version + 1}, found {stored.version}"
        )
        assert calls == 1, (
            "update() whose save's reply was lost must re-send that save, not call its "
            f"function again: the function ran {calls} times, expected once"
        )
        assert done.version == stored.version, (
            "update() must return the session as stored: it returned version "
            f"{done.version}, the stored session has {stored.version}"
        )
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
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after a save() whose "
            "reply was lost: the session must still be found"
        )
        assert stored.version == version + 1, (
            "a save() whose reply was lost landed, and the edited retry must conflict and "
            f"write nothing: expected version {version + 1}, found {stored.version}"
        )
        assert [e.content for e in stored.events][-1] == "first", (
            "a save() whose reply was lost landed, and the edited retry must conflict and "
            "write nothing: expected the last stored event to be 'first', found "
            f"{[e.content for e in stored.events[-3:]]!r} at the end"
        )
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
            assert unchanged is not None and unchanged.version == version, (
                "a save() lost before it reached the backend must not land: expected "
                f"{session.session_id!r} at version {version}, found "
                f"{'None' if unchanged is None else f'version {unchanged.version}'}"
            )
            await manager.save(session)
        assert faults.lost == 1, (
            f"exactly one save() request must have been lost: found {faults.lost} lost"
        )
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after the retry of a lost "
            "save(): the session must still be found"
        )
        assert stored.version == version + 1, (
            "the retry of a save() lost before it reached the backend must land once: "
            f"expected version {version + 1}, found {stored.version}"
        )
        assert [e.content for e in stored.events][-1] == "late", (
            "the retry of a save() lost before it reached the backend must land its event: "
            f"expected the last stored event to be 'late', found "
            f"{[e.content for e in stored.events[-3:]]!r} at the end"
        )
        await self.check_positions(manager, session.session_id, 3)

    async def test_lost_replies_one_after_another_each_land_once(
        self, manager: SessionManager
    ) -> None:
        """Five saves in a row, each losing its reply once and retried, take five version steps
        and land five events, each once (every retry's token is recognised, not only the first)."""
        session = await self._loaded(manager, events=0)
        version = session.version
        for i in range(5):
            session.add_event("assistant", f"turn-{i}")
            with lost_replies(manager, "_save"):
                with pytest.raises(BackendUnavailableError):
                    await manager.save(session)
                await manager.save(session)
        stored = await self.readback(manager, session.session_id)
        assert stored is not None, (
            f"get({session.session_id!r}) (read-back) returned None after five retried "
            "save()s: the session must still be found"
        )
        assert stored.version == version + 5, (
            "five save()s, each losing its reply once and retried, must take exactly five "
            f"version steps: expected version {version + 5}, found {stored.version}"
        )
        assert [e.content for e in stored.events] == [f"turn-{i}" for i in range(5)], (
            "five save()s, each losing its reply once and retried, must land each event once: "
            f"expected {[f'turn-{i}' for i in range(5)]!r}, found "
            f"{[e.content for e in stored.events[:10]]!r}"
        )
        await self.check_positions(manager, session.session_id, 5)
