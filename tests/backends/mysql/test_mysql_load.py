"""The MySQL load: one statement for a session with events (the record packed on its
first row), the two-select snapshot load for the rest; both read the same session."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timezone
from typing import Any

import agentsessions
import pytest
import pytest_asyncio
from agentsessions.backend import to_micros
from agentsessions_mysql import MySQLSessionManager
from agentsessions_mysql._manager import _LOAD_ALL, _loaded
from agentsessions_mysql._schema import unpack_record

pytestmark = pytest.mark.mysql

#: Bytes that a naive split of the packed row would cut at.
AWKWARD = "a|b,c - 1|2 ünï \u00a0|"


@pytest_asyncio.fixture
async def manager(database_url: str) -> AsyncIterator[MySQLSessionManager]:
    found = agentsessions.connect(database_url, ttl=3600)  # every session has an expiry
    assert isinstance(found, MySQLSessionManager)
    async with found:
        yield found


def _count_snapshots(manager: MySQLSessionManager, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    original = manager._snapshot

    async def counted(sql: str, args: Any) -> Any:
        calls.append(sql)
        return await original(sql, args)

    monkeypatch.setattr(manager, "_snapshot", counted)
    return calls


async def test_a_session_with_events_loads_in_one_statement_with_every_field(
    manager: MySQLSessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = await manager.create(
        session_id="pk-" + AWKWARD, user_id="u-" + AWKWARD, state={"k": AWKWARD}
    )
    for index in range(5):
        source.add_event("user", f"{AWKWARD}{index}")
    await manager.save(source)
    await manager.fork(
        "pk-" + AWKWARD,
        "fk-" + AWKWARD,
        through_event_id=source.events[2].id,
        user_id="u-" + AWKWARD,
    )
    fork = await manager.get("fk-" + AWKWARD)
    assert fork is not None
    snapshots = _count_snapshots(manager, monkeypatch)

    for session_id, expected in (("pk-" + AWKWARD, source), ("fk-" + AWKWARD, fork)):
        full = await manager.get(session_id)
        last = await manager.get(session_id, last_events=2)
        assert full is not None and last is not None, f"{session_id!r} not found"
        for loaded in (full, last):
            assert loaded.user_id == "u-" + AWKWARD
            assert loaded.state == expected.state
            assert loaded.version == expected.version
            assert loaded.created_at == expected.created_at
            assert loaded.updated_at == expected.updated_at
            assert loaded.forked_from == expected.forked_from
        assert [e.content for e in full.events] == [e.content for e in expected.events]
        assert [e.content for e in last.events] == [e.content for e in expected.events[-2:]]
        assert last.first_event_position == len(expected.events) - 2
    assert fork.forked_from is not None, "the fork must name its source"
    assert snapshots == [], f"a session with events took the two-select load: {snapshots!r}"
    now = datetime.now(timezone.utc)
    for session_id in ("pk-" + AWKWARD, "fk-" + AWKWARD):
        joined = await manager._load(session_id, None, now)
        key = (manager._ns, session_id.encode())
        live = (*key, to_micros(now))
        reference = _loaded(*await manager._snapshot(_LOAD_ALL, (*live, *key)))
        assert joined is not None and reference is not None
        assert joined.record == reference.record, "the packed record differs from the row"
        assert joined.record.expires_at is not None, "the ttl's expiry must come back"


async def test_a_session_without_events_and_an_absent_one_take_the_snapshot_load(
    manager: MySQLSessionManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    await manager.create(session_id="empty", state={"a": 1})
    snapshots = _count_snapshots(manager, monkeypatch)
    empty = await manager.get("empty")
    tail = await manager.get("empty", last_events=3)
    assert empty is not None and tail is not None
    assert empty.events == [] and tail.events == [] and empty.state == {"a": 1}
    assert await manager.get("no-such-session") is None
    assert await manager.get("no-such-session", last_events=3) is None
    assert len(snapshots) == 4, f"expected one snapshot load per call, found {snapshots!r}"


def test_unpack_refuses_a_row_that_does_not_add_up() -> None:
    good = b"3,10,20,2,-,-,-,2,0,-,-|{}"
    assert unpack_record(b"s", good) == (
        b"s",
        None,
        b"{}",
        3,
        10,
        20,
        None,
        2,
        b"",
        None,
        None,
        None,
    )
    with pytest.raises(ValueError, match="does not add up"):
        unpack_record(b"s", good + b"x")
