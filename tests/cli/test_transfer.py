"""restore and transfer_session: whole sessions, exactly, or nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import (
    Event,
    InvalidInputError,
    MemorySessionManager,
    PartialSessionError,
    Session,
    SessionExistsError,
)
from agentsessions.backend import EventRecord, SessionRecord
from agentsessions_cli._transfer import Outcome, differences, transfer_many, transfer_session

_THEN = datetime(2022, 2, 2, 2, 2, 2, 222222, tzinfo=timezone.utc)


class FailingRestore(MemorySessionManager):
    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        raise OSError("connection lost")


def _source(session_id: str = "s") -> Session:
    return Session(
        session_id=session_id,
        user_id="u",
        events=[Event(id="e1", author="user", content="hi", timestamp=_THEN)],
        state={"k": 1},
        created_at=_THEN,
        updated_at=_THEN + timedelta(hours=1),
        version=4,
    )


async def test_restore_keeps_every_preserved_field() -> None:
    target = MemorySessionManager()
    source = _source()
    restored = await target.restore(source)
    stored = await target.get("s")
    assert stored is not None
    assert differences(stored, source) == []
    assert differences(restored, source) == []
    assert (stored.created_at, stored.updated_at, stored.version) == (
        _THEN,
        _THEN + timedelta(hours=1),
        4,
    )


async def test_restore_converts_offsets_to_utc_and_refuses_naive_times() -> None:
    target = MemorySessionManager()
    source = _source()
    source.created_at = _THEN.astimezone(timezone(timedelta(hours=5)))
    restored = await target.restore(source)
    assert restored.created_at == _THEN and restored.created_at.utcoffset() == timedelta(0)
    naive = _source("naive").model_copy(update={"updated_at": datetime(2022, 1, 1)})
    with pytest.raises(InvalidInputError, match="updated_at must be a timezone-aware"):
        await target.restore(naive)
    assert await target.get("naive") is None


async def test_a_partially_loaded_session_cannot_be_restored() -> None:
    source_store = MemorySessionManager()
    await source_store.restore(_source())
    partial = await source_store.get("s", last_events=0)
    assert partial is not None
    with pytest.raises(PartialSessionError, match="load it whole"):
        await MemorySessionManager().restore(partial)


async def test_a_failed_restore_leaves_nothing_and_raises() -> None:
    target = FailingRestore()
    with pytest.raises(OSError, match="connection lost"):
        await transfer_session(target, _source())
    assert await target.get("s") is None


async def test_transfer_creates_then_skips_identical_then_refuses_other_content() -> None:
    target = MemorySessionManager()
    assert await transfer_session(target, _source()) is Outcome.CREATED
    assert await transfer_session(target, _source()) is Outcome.SKIPPED
    changed = _source().model_copy(update={"version": 5})
    assert await transfer_session(target, changed) is Outcome.DIFFERS
    stored = await target.get("s")
    assert stored is not None and stored.version == 4


async def test_other_content_is_left_untouched() -> None:
    target = MemorySessionManager()
    other = await target.create("s", "someone-else")
    other.add_event("user", "mine")
    await target.save(other)
    assert await transfer_session(target, _source()) is Outcome.DIFFERS
    kept = await target.get("s")
    assert kept is not None
    assert [event.content for event in kept.events] == ["mine"]
    with pytest.raises(SessionExistsError):
        await target.restore(_source())


async def test_differences_names_each_field_that_differs() -> None:
    a = _source()
    b = a.model_copy(
        update={"created_at": _THEN + timedelta(microseconds=1), "state": {"k": 2}}, deep=True
    )
    assert differences(a, b) == ["state", "created_at"]
    c = a.model_copy(deep=True)
    c.events[0] = c.events[0].model_copy(update={"timestamp": _THEN + timedelta(seconds=1)})
    assert differences(a, c) == ["events"]


async def test_transfer_many_writes_every_session_before_raising_the_first_failure() -> None:
    target = MemorySessionManager()
    await target.create("s2", "someone-else")
    sources = [_source(f"s{i}") for i in range(5)]
    sources[3] = sources[3].model_copy(update={"version": 0})  # refused: not a stored version
    with pytest.raises(InvalidInputError, match="version"):
        await transfer_many(target, sources)
    stored = {s.session_id for s in (await target.list_sessions()).items}
    assert stored == {"s0", "s1", "s2", "s4"}
