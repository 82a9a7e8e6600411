"""transfer_session: whole sessions or nothing, and leftovers of a hard kill completed."""

from __future__ import annotations

from datetime import datetime

import pytest
from agentsessions import MemorySessionManager, Session
from agentsessions._transfer import Outcome, same_content, transfer_session
from agentsessions.backend import SaveRequest


class FailingSave(MemorySessionManager):
    async def _save(self, request: SaveRequest, now: datetime) -> None:
        raise OSError("connection lost")


async def _source() -> Session:
    manager = MemorySessionManager()
    session = await manager.create("s", "u", state={"k": 1})
    session.add_event("user", "hi")
    await manager.save(session)
    loaded = await manager.get("s")
    assert loaded is not None
    return loaded


async def test_a_failed_second_write_takes_back_the_created_session() -> None:
    source = await _source()
    target = FailingSave()
    with pytest.raises(OSError, match="connection lost"):
        await transfer_session(target, source)
    assert await target.get("s") is None


async def test_a_leftover_of_a_hard_kill_is_completed_then_skipped() -> None:
    source = await _source()
    target = MemorySessionManager()
    await target.create("s", "u", state={"k": 1})  # what a kill between the writes leaves
    assert await transfer_session(target, source) is Outcome.COMPLETED
    copy = await target.get("s")
    assert copy is not None
    assert same_content(copy, source)
    assert await transfer_session(target, source) is Outcome.SKIPPED


async def test_other_content_is_left_untouched() -> None:
    source = await _source()
    target = MemorySessionManager()
    other = await target.create("s", "someone-else")
    other.add_event("user", "mine")
    await target.save(other)
    assert await transfer_session(target, source) is Outcome.DIFFERS
    kept = await target.get("s")
    assert kept is not None
    assert [event.content for event in kept.events] == ["mine"]
