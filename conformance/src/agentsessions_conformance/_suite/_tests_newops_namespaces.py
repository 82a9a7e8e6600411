"""Namespaces scope the newer operations: one id in two namespaces is two sessions to
compact(), archived_events(), restore(), ``_load_since`` and the save tokens.

A backend may scope its sessions and events by namespace and forget the archive, the
existence check of a restore, or the token lookup; each of those would let one
application read or block another's data.
"""

from __future__ import annotations

import pytest
from agentsessions import (
    BackendUnavailableError,
    Event,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
)

from .._faults import lost_replies
from ._base import SuiteBase, snapshot
from ._tests_refresh import _lineage
from ._tests_restore import _exported


def _summary(text: str) -> Event:
    return Event(author="summarizer", content={"summary": text})


class NewOpsNamespaceTests(SuiteBase):
    async def _two_spaces(self, manager: SessionManager) -> tuple[SessionManager, SessionManager]:
        self.require(manager, "namespaces")
        left = await self.variant(manager, namespace=self.new_namespace())
        right = await self.variant(manager, namespace=self.new_namespace())
        return left, right

    async def test_namespaces_scope_compaction_and_its_archive(
        self, manager: SessionManager
    ) -> None:
        """One id in two namespaces is two sessions to compact() and archived_events()
        ("the namespace option isolates applications"): a compaction in one leaves the
        other's events, version and archive untouched, each archive holds only its own
        namespace's replaced events, and delete() in one erases only that one's archive."""
        self.require(manager, "compaction")
        left, right = await self._two_spaces(manager)
        sid = self.new_id()
        sessions = {}
        for space, side in ((left, "left"), (right, "right")):
            session = await space.create(sid, state={"side": side})
            for index in range(6):
                session.add_event("user", f"{side} {index}")
            await space.save(session)
            sessions[side] = session
        untouched = snapshot(await self.readback(right, sid))
        left_copy = sessions["left"]
        await left.compact(left_copy, left_copy.events[2].id, [_summary("L")], archive=True)
        assert snapshot(await self.readback(right, sid)) == untouched, (
            "a compaction in one namespace changed the same id in another"
        )
        assert await right.archived_events(sid) == [], "one namespace reads another's archive"
        assert (await self.inventory(right, sid)).archived == 0, (
            "compact(archive=True) in one namespace must archive nothing under the same id in "
            f"another: raw_inventory() of {sid!r} in the other namespace reports archived events"
        )
        await self.check_positions(right, sid, 6)
        right_full = await right.get(sid)
        assert right_full is not None, (
            f"get({sid!r}) in the other namespace returned None after a compaction in the "
            "first: that namespace's session must be untouched"
        )
        right_replaced = right_full.events[:2]
        await right.compact(right_full, right_full.events[1].id, [_summary("R")], archive=True)
        left_archive = [e.content for e in await left.archived_events(sid)]
        assert left_archive == ["left 0", "left 1", "left 2"], (
            "archived_events() in the first namespace must hold only its own 3 replaced "
            f"events: expected ['left 0', 'left 1', 'left 2'], found {left_archive[:8]!r}"
        )
        assert await right.archived_events(sid) == right_replaced, (
            "archived_events() in the second namespace must hold only its own 2 replaced "
            f"events: expected {[e.content for e in right_replaced]!r}"
        )
        assert (await self.inventory(left, sid)).archived == 3, (
            f"storage of the first namespace must hold exactly 3 archived events for {sid!r}: "
            "raw_inventory() reports another count"
        )
        assert (await self.inventory(right, sid)).archived == 2, (
            f"storage of the second namespace must hold exactly 2 archived events for {sid!r}: "
            "raw_inventory() reports another count"
        )
        if manager.options.namespace not in (left.options.namespace, right.options.namespace):
            assert await manager.archived_events(sid) == [], (
                f"archived_events({sid!r}) in the default namespace must be empty: only two "
                "other namespaces compacted that id, yet it returned events"
            )
        assert await left.delete(sid) is True, (
            f"delete({sid!r}) of a stored session must return True: it returned something else"
        )
        await self.check_erased(left, sid, "delete() in one namespace")
        assert await right.archived_events(sid) == right_replaced, (
            "delete() in one namespace erased another's archive"
        )
        kept = await self.readback(right, sid)
        assert kept is not None, "delete() in one namespace deleted the same id in another"
        assert [e.content for e in kept.events] == [
            {"summary": "R"},
            *[f"right {index}" for index in range(2, 6)],
        ], (
            "delete() in one namespace must leave the same id's compacted history in another: "
            "expected [{'summary': 'R'}, 'right 2'..'right 5'], found "
            f"{[e.content for e in kept.events[:8]]!r}"
        )

    async def test_namespaces_scope_restore_load_since_and_tokens(
        self, manager: SessionManager
    ) -> None:
        """restore() of an id live in another namespace succeeds and leaves that one
        untouched, and refuses an id live in its own ("never overwrites"); ``_load_since``
        in one namespace never returns another's session or events; a save token stored
        in one namespace is not recognised for the same id in another (its retry there is
        a conflict that writes nothing)."""
        left, right = await self._two_spaces(manager)
        sid, only_left, user = self.new_id(), self.new_id(), self.new_user()
        mine = await left.create(sid, user, state={"side": "left"})
        for index in range(3):
            mine.add_event("user", f"left {index}")
        await left.save(mine)
        await left.create(only_left, user)
        before_left = snapshot(await self.readback(left, sid))
        original = _exported(sid, user, events=4)
        await right.restore(original)
        assert snapshot(await self.readback(right, sid)) == snapshot(original), (
            f"restore() of {sid!r}, live only in another namespace, must land: the session must "
            "read back exactly as exported, and it does not"
        )
        assert snapshot(await self.readback(left, sid)) == before_left, (
            "a restore in one namespace changed the same id in another"
        )
        with pytest.raises(SessionExistsError):
            await right.restore(_exported(sid, user, events=1))
        with pytest.raises(SessionExistsError):
            await left.restore(_exported(sid, user, events=1))
        assert snapshot(await self.readback(right, sid)) == snapshot(original), (
            "restore() refused with SessionExistsError must write nothing: the restored session "
            f"{sid!r} no longer reads back exactly as exported"
        )
        assert snapshot(await self.readback(left, sid)) == before_left, (
            "restore() refused with SessionExistsError must write nothing: the other "
            f"namespace's {sid!r} reads back changed"
        )

        lineage = await _lineage(left, sid) or "not-a-lineage"
        await right.open()
        now = right.clock.now()
        loaded = await right._load_since(sid, 3, lineage, now)
        assert loaded is not None, (
            f"_load_since({sid!r}) returned None in the namespace where that id was restored: "
            "the restored session must be found"
        )
        assert loaded.record.version == original.version, (
            "_load_since() must return its own namespace's record: expected the restored "
            f"version {original.version}, found {loaded.record.version}"
        )
        assert [e.id for e in loaded.events] == [e.id for e in original.events], (
            "_load_since() in one namespace extended a copy with another namespace's events"
        )
        assert await right._load_since(only_left, 0, lineage, now) is None, (
            f"_load_since({only_left!r}) of an id stored only in another namespace must return "
            "None: it returned that namespace's session"
        )

        # A save of the left session loses its reply; the very request, token and all,
        # is then sent for the same id in the right namespace.
        mine.add_event("user", "left, reply lost")
        with lost_replies(left, "_save"), pytest.raises(BackendUnavailableError):
            await left.save(mine)
        before_right = snapshot(await self.readback(right, sid))
        tracking = mine._loaded
        assert tracking is not None and tracking.sent is not None, "no pending save to replay"
        sent = tracking.sent  # as it was sent (sealed, when the manager encrypts)
        with pytest.raises(SessionConflictError):
            await right._save(sent, sent.record.updated_at)
        assert snapshot(await self.readback(right, sid)) == before_right, (
            "a save token of one namespace was taken for a save of another"
        )
