"""What the base class and `agentsessions.backend` do for every backend: rows to records
and back, the error of a refused write, driver waits, per-loop preparation, newer schemas."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import (
    BackendUnavailableError,
    MemorySessionManager,
    SessionConflictError,
    SessionNotFoundError,
)
from agentsessions.backend import (
    CompactRequest,
    ManagerOptions,
    SaveRequest,
    SchemaTooNewError,
    SessionRecord,
    decode_record,
    decode_summary,
    encode_record,
    expiry_millis,
    refused,
    stamp_lineage,
    to_micros,
    unstamp_lineage,
)

WHEN = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)
RECORD = SessionRecord("s1", "ada", '{"a":1}', 3, WHEN, WHEN + timedelta(seconds=1), None, 7)


def test_a_record_round_trips_through_its_row() -> None:
    assert decode_record(encode_record(RECORD)) == RECORD
    row = encode_record(RECORD, micros=True)
    assert row == (
        "s1", "ada", '{"a":1}', 3, to_micros(WHEN), to_micros(WHEN) + 10**6, None, 7, "",
    )  # fmt: skip
    assert decode_record(row) == RECORD
    with_lineage = SessionRecord(*encode_record(RECORD)[:8], "0123456789abcdef")
    assert decode_record(encode_record(with_lineage)) == with_lineage
    assert decode_record(row[:8]).lineage == ""  # a row without the column: unknown


def test_a_row_of_bytes_and_digits_decodes() -> None:
    expires = WHEN + timedelta(hours=1)
    fields = [b"s1", None, b"{}", b"3", str(to_micros(WHEN)).encode(), to_micros(WHEN), None, b"0"]
    fields[6] = str(to_micros(expires)).encode()
    record = decode_record(fields)
    assert record == SessionRecord("s1", None, "{}", 3, WHEN, WHEN, expires, 0)
    summary = decode_summary([b"s1", b"ada", WHEN, to_micros(WHEN), b"4", 2])
    assert (summary.user_id, summary.created_at, summary.event_count, summary.version) == (
        "ada",
        WHEN,
        4,
        2,
    )


def test_expiry_millis_rounds_up() -> None:
    assert expiry_millis(WHEN) == to_micros(WHEN) // 1000 + 1
    whole = WHEN.replace(microsecond=678000)
    assert expiry_millis(whole) == to_micros(whole) // 1000


def test_a_refused_write_is_a_conflict_while_live_else_not_found() -> None:
    save = SaveRequest(RECORD, expected_version=2, stored_event_count=7, keep=7, new_events=[])
    compact = CompactRequest("s2", 5, 6, WHEN, None, 10, 4, [])
    conflict = refused(save, live=True, stored_version=9)
    assert isinstance(conflict, SessionConflictError)
    assert conflict.session_id == "s1"
    assert conflict.expected_version == 2
    assert "stored version is 9" in str(conflict)
    assert "stored version" not in str(refused(compact, live=True))
    missing = refused(compact, live=False)
    assert isinstance(missing, SessionNotFoundError)
    assert "s2" in str(missing)
    other_life = refused(save, live=True, stored_version=-2, other_life=True)
    assert isinstance(other_life, SessionConflictError)
    assert "created or restored again" in str(other_life)
    assert "-2" not in str(other_life)
    assert isinstance(refused(save, live=False, other_life=True), SessionNotFoundError)


def test_a_request_expects_its_version_and_its_lineage_unless_it_names_none() -> None:
    save = SaveRequest(
        RECORD, expected_version=2, stored_event_count=7, keep=7, new_events=[],
        expected_lineage="life-1",
    )  # fmt: skip
    assert save.expects(2, "life-1")
    assert not save.expects(3, "life-1")
    assert not save.expects(2, "life-2")  # the same version of another life of the id
    assert not save.expects(2, "")
    unknown = CompactRequest("s2", 5, 6, WHEN, None, 10, 4, [])  # expected_lineage ""
    assert unknown.expects(5, "any-life")
    assert unknown.expects(5, "")
    assert not unknown.expects(4, "any-life")


def test_load_since_starts_after_the_copy_only_while_its_lineage_is_stored() -> None:
    record = SessionRecord(*encode_record(RECORD)[:8], "life-1")  # 7 events
    assert record.since_position(5, "life-1") == 5
    assert record.since_position(7, "life-1") == 7
    assert record.since_position(8, "life-1") == 0  # more than stored: a rewrite
    assert record.since_position(5, "life-2") == 0
    assert record.since_position(5, "") == 0


def test_a_stamped_lineage_reads_back_only_at_the_version_it_was_written() -> None:
    stored = stamp_lineage("0123abcd", 7)
    assert stored == "0123abcd:7"
    assert unstamp_lineage(stored, 7) == "0123abcd"
    assert unstamp_lineage(stored, "7") == "0123abcd"
    assert unstamp_lineage(stored.encode(), b"7") == "0123abcd"  # a Redis hash's bytes
    # An older release saved version 8 without touching the field: unknown, not stale.
    assert unstamp_lineage(stored, 8) == ""
    assert unstamp_lineage(stored.encode(), b"70") == ""
    assert unstamp_lineage(None, 7) == ""
    assert unstamp_lineage(stored, None) == ""
    assert unstamp_lineage("no-colon", 7) == ""


def test_driver_waits_are_bounded_by_the_timeout() -> None:
    options = ManagerOptions(timeout=5)
    assert options.bounded(None) == 5
    assert options.bounded(2) == 2
    assert options.bounded(60) == 5


class _Prepared(MemorySessionManager):
    """A manager with per-loop resources whose preparation fails until told otherwise."""

    def __init__(self, url: str = "memory://", options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        self.failures = 1
        self.prepared: list[int] = []
        self.closed: list[int] = []
        self.opened = 0
        self.resources = self.per_loop(self._new, self._close_one, prepare=self._prepare)

    async def _new(self) -> int:
        self.opened += 1
        return self.opened

    async def _close_one(self, resource: int) -> None:
        self.closed.append(resource)

    async def _prepare(self, resource: int) -> None:
        self.prepared.append(resource)
        if self.failures:
            self.failures -= 1
            raise OSError("the schema is not ready")


async def test_prepare_runs_once_and_a_failed_resource_is_closed() -> None:
    manager = _Prepared()
    with pytest.raises(OSError, match="schema is not ready"):  # memory declares no rules
        await manager.create("s")
    assert manager.prepared == [1]
    assert manager.closed == [1]  # closed, not leaked
    await manager.create("s")
    assert manager.prepared == [1, 2]
    assert manager.resources.current() == 2

    def other_loop() -> int:
        async def use() -> int:
            await manager.get("s")
            value = manager.resources.current()
            return value

        return asyncio.run(use())

    assert await asyncio.to_thread(other_loop) == 3
    assert manager.prepared == [1, 2]  # not again for the second loop
    await manager.close()


async def test_a_schema_from_a_newer_release_names_the_distribution() -> None:
    class Newer(MemorySessionManager):
        async def _open(self) -> None:
            raise SchemaTooNewError(9, 4, "schema 'app'")

    with pytest.raises(BackendUnavailableError) as info:
        await Newer("memory://").open()
    message = str(info.value)
    assert "schema 'app' has agentsessions schema version 9, newer than the 4" in message
    dist = Newer.__module__.partition(".")[0].replace("_", "-")
    assert f"this {dist} understands; upgrade {dist}" in message
