"""Save tokens: the window of recognised retries is the session's own last `TOKENS_KEPT`
writes, and compactions and restores whose replies were lost landed exactly once.

`SaveRequest`: "keep the tokens of at least the last TOKENS_KEPT saves of the session,
and check them FIRST"; `CompactRequest` stores its token "like a save's". The kit loses
replies at the manager's own write hooks (`lost_replies`), so this runs on any backend.
"""

from __future__ import annotations

import contextlib

import pytest
from agentsessions import (
    BackendUnavailableError,
    Event,
    Session,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
)
from agentsessions.backend import TOKENS_KEPT

from .._faults import lost_replies
from ._base import SuiteBase, snapshot
from ._tests_restore import _exported


def _summary(text: str) -> Event:
    return Event(author="summarizer", content={"summary": text})


class SaveTokenTests(SuiteBase):
    async def _neighbours(
        self, manager: SessionManager, session_id: str
    ) -> list[tuple[SessionManager, Session]]:
        """Sessions other writes go to meanwhile: another id in the namespace and, with
        namespaces, the same id in a fresh one."""
        others = [(manager, await manager.create(self.new_id()))]
        if manager.capabilities.namespaces:
            elsewhere = await self.variant(manager, namespace=self.new_namespace())
            others.append((elsewhere, await elsewhere.create(session_id)))
        return others

    async def _lose_one_save(self, manager: SessionManager, session: Session, text: str) -> None:
        session.add_event("user", text)
        with lost_replies(manager, "_save"), pytest.raises(BackendUnavailableError):
            await manager.save(session)

    async def test_save_token_window_is_the_sessions_last_writes(
        self, manager: SessionManager
    ) -> None:
        """A save whose reply was lost, retried after TOKENS_KEPT - 1 later writes of the
        same session (saves and, where supported, compactions and rewinds: "keep the
        tokens of at least the last TOKENS_KEPT saves of the session"), is recognised:
        it succeeds and writes nothing, however many writes other sessions (in its
        namespace and the same id in another) took meanwhile. Retried after more, it is
        recognised or a conflict, and never lands twice."""
        session = await self.session_with_events(manager, 1)
        sid = session.session_id
        neighbours = await self._neighbours(manager, sid)
        compaction = manager.capabilities.compaction
        branching = manager.capabilities.branching
        for later, text in ((TOKENS_KEPT - 1, "mine"), (TOKENS_KEPT + 4, "mine again")):
            mine = await manager.get(sid)
            assert mine is not None, (
                f"get({sid!r}) returned None: a session just saved must be found"
            )
            landed_at = mine.version + 1
            await self._lose_one_save(manager, mine, text)
            landed = await self.readback(manager, sid)
            assert landed is not None and landed.version == landed_at, (
                "a save() whose reply was lost must still have landed, one version on: "
                f"expected version {landed_at}, read back "
                f"{'None' if landed is None else f'version {landed.version}'}"
            )
            assert [e.content for e in landed.events].count(text) == 1, (
                "the save whose reply was lost did not land once"
            )
            rival = await manager.get(sid, last_events=2)
            assert rival is not None, (
                f"get({sid!r}, last_events=2) returned None: a session just saved must be found"
            )
            for index in range(later):
                if compaction and index % 8 == 7:
                    await manager.compact(rival, rival.events[0].id, [_summary(f"c{index}")])
                elif branching and index % 8 == 3 and len(rival.events) >= 2:
                    await manager.rewind(rival, rival.events[-2].id)
                else:
                    rival.add_event("rival", f"r{index}")
                    await manager.save(rival)
                for space, other in neighbours:
                    other.add_event("other", index)
                    await space.save(other)
            stored = await self.readback(manager, sid)
            assert stored is not None, (
                f"get({sid!r}) (read-back) returned None after {later} later writes: the "
                "session must still be stored"
            )
            before = snapshot(stored)
            if later < TOKENS_KEPT:
                await manager.save(mine)  # recognised: the very request, token and all
                assert mine.version == landed_at, (
                    f"the retried save() of a write that landed {later} writes earlier (within "
                    f"TOKENS_KEPT={TOKENS_KEPT}) must be recognised, leaving the copy at the "
                    f"version it landed at: expected version {landed_at}, the copy has "
                    f"{mine.version}"
                )
            else:
                # Past the window: recognised, or refused as stale; either writes nothing.
                with contextlib.suppress(SessionConflictError):
                    await manager.save(mine)
            assert snapshot(await self.readback(manager, sid)) == before, (
                f"the retry of a save that landed {later} writes earlier was written again"
            )
            await self.check_positions(manager, sid, len(stored.events))

    async def test_lost_reply_compaction_lands_once(self, manager: SessionManager) -> None:
        """A compaction whose reply was lost raises BackendUnavailableError and landed
        once ("all of it, or nothing"): re-read, the session holds the compacted history
        one version on and the archive the replaced events once; compact() again from the
        same copy raises SessionConflictError and writes nothing."""
        self.require(manager, "compaction")
        session = await self.session_with_events(manager, 8)
        sid, version = session.session_id, session.version
        replaced = session.events[:3]
        cut = session.events[2].id
        with lost_replies(manager, "_compact") as faults, pytest.raises(BackendUnavailableError):
            await manager.compact(session, cut, [_summary("s")], archive=True)
        assert faults.lost == 1, (
            "compact() must call the backend's _compact hook once, whose reply the kit lost: "
            f"{faults.lost} replies were lost"
        )
        stored = await self.readback(manager, sid)
        assert stored is not None and stored.version == version + 1, (
            "a compact() whose reply was lost must still have landed, one version on: expected "
            f"version {version + 1}, read back "
            f"{'None' if stored is None else f'version {stored.version}'}"
        )
        assert [e.content for e in stored.events] == [
            {"summary": "s"},
            *[f"e{index}" for index in range(3, 8)],
        ], (
            "a compact() whose reply was lost must have landed the compacted history: expected "
            "[{'summary': 's'}, 'e3'..'e7'], found "
            f"{[e.content for e in stored.events[:8]]!r}"
        )
        assert await manager.archived_events(sid) == replaced, (
            f"archived_events({sid!r}) after a compact(archive=True) whose reply was lost must "
            f"return the 3 replaced events, once: expected {[e.content for e in replaced]!r}"
        )
        before = snapshot(stored)
        with pytest.raises(SessionConflictError):
            await manager.compact(session, session.events[2].id, [_summary("s")], archive=True)
        assert snapshot(await self.readback(manager, sid)) == before, (
            "compact() again from the same copy raised SessionConflictError, so it must write "
            f"nothing: {sid!r} reads back changed"
        )
        assert await manager.archived_events(sid) == replaced, "the archive took them twice"
        assert (await self.inventory(manager, sid)).archived == 3, (
            f"storage must hold exactly the 3 archived events of {sid!r} after a compaction "
            "that landed once: raw_inventory() reports another count"
        )
        await self.check_positions(manager, sid, 6)

    async def test_lost_request_compaction_retry_lands(self, manager: SessionManager) -> None:
        """A compaction lost before it reached the backend wrote nothing; compact() again
        from the same copy lands it, once."""
        self.require(manager, "compaction")
        session = await self.session_with_events(manager, 5)
        before = snapshot(await self.readback(manager, session.session_id))
        with lost_replies(manager, "_compact", landed=False):
            with pytest.raises(BackendUnavailableError):
                await manager.compact(session, session.events[1].id, [_summary("s")])
            assert snapshot(await self.readback(manager, session.session_id)) == before, (
                "a compact() lost before it reached the backend must write nothing: "
                f"{session.session_id!r} reads back changed"
            )
            await manager.compact(session, session.events[1].id, [_summary("s")])
        stored = await self.readback(manager, session.session_id)
        assert snapshot(stored) == snapshot(session), (
            "compact() retried from the same copy after a lost request must land: the stored "
            f"session must equal the compacted copy: expected {snapshot(session)!r}, read back "
            f"{snapshot(stored)!r}"
        )
        await self.check_positions(manager, session.session_id, 4)

    async def test_lost_reply_restore_lands_once(self, manager: SessionManager) -> None:
        """A restore whose reply was lost landed once: it reads back exactly as exported,
        and restore() again raises SessionExistsError ("never overwrites") and writes
        nothing; one lost before it was sent wrote nothing, and restore() again lands it."""
        original = _exported(self.new_id(), self.new_user(), events=5)
        with lost_replies(manager, "_restore"), pytest.raises(BackendUnavailableError):
            await manager.restore(original)
        assert snapshot(await self.readback(manager, original.session_id)) == snapshot(original), (
            "a restore() whose reply was lost must still have landed: "
            f"{original.session_id!r} must read back exactly as exported, and it does not"
        )
        with pytest.raises(SessionExistsError):
            await manager.restore(original)
        assert snapshot(await self.readback(manager, original.session_id)) == snapshot(original), (
            "restore() again raised SessionExistsError, so it must write nothing: "
            f"{original.session_id!r} no longer reads back exactly as exported"
        )
        await self.check_positions(manager, original.session_id, 5)
        unsent = _exported(self.new_id(), self.new_user(), events=2)
        with lost_replies(manager, "_restore", landed=False):
            with pytest.raises(BackendUnavailableError):
                await manager.restore(unsent)
            assert await self.readback(manager, unsent.session_id) is None, (
                "a restore() lost before it reached the backend must write nothing: "
                f"get({unsent.session_id!r}) found the session"
            )
            await manager.restore(unsent)
        assert snapshot(await self.readback(manager, unsent.session_id)) == snapshot(unsent), (
            "restore() retried after a lost request must land: "
            f"{unsent.session_id!r} must read back exactly as exported, and it does not"
        )
