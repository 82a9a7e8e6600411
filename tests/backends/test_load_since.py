"""Every real backend reads only what changed for a retry (the kit also allows all).

The kit accepts either answer from ``_load_since`` (the default reads everything, and
is correct); the backends shipped here must take the fast path, or a lost race costs
the whole history again.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agentsessions import SessionManager, connect
from backend_params import BACKENDS, with_option

SERVER_SCHEMES = {"postgres", "redis", "redis_cluster", "mongo", "mysql"}


@pytest.fixture(params=BACKENDS)
async def manager(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionManager]:
    kind: str = request.param
    namespace = f"since_{uuid.uuid4().hex[:16]}"
    if kind == "memory":
        url = f"memory://{namespace}"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        assert kind in SERVER_SCHEMES
        url = with_option(request.getfixturevalue(f"{kind}_url"), "namespace", namespace)
    async with connect(url) as opened:
        yield opened
        for summary in (await opened.list_sessions(limit=1000)).items:
            await opened.delete(summary.session_id)


async def test_load_since_reads_only_the_appended_events(manager: SessionManager) -> None:
    session = await manager.create("s")
    for index in range(3):
        session.add_event("user", index)
    await manager.save(session)
    held = await manager._load("s", 0, manager.clock.now())
    assert held is not None and held.record.lineage  # every shipped backend stores it
    session.add_event("user", 3)
    session.state["n"] = 4
    await manager.save(session)

    loaded = await manager._load_since("s", 3, held.record.lineage, manager.clock.now())
    assert loaded is not None
    assert [event.content for event in loaded.events] == [3]
    assert (loaded.record.version, loaded.record.event_count) == (3, 4)
    assert loaded.record.lineage == held.record.lineage
    assert manager.__class__._load_since is not SessionManager._load_since


async def test_load_since_reads_everything_after_a_rewrite(manager: SessionManager) -> None:
    session = await manager.create("s")
    for index in range(3):
        session.add_event("user", index)
    await manager.save(session)
    held = await manager._load("s", 0, manager.clock.now())
    assert held is not None
    session.events.pop()
    session.add_event("user", "again")
    await manager.save(session)

    loaded = await manager._load_since("s", 3, held.record.lineage, manager.clock.now())
    assert loaded is not None
    assert [event.content for event in loaded.events] == [0, 1, "again"]
    assert loaded.record.lineage not in ("", held.record.lineage)


async def test_a_save_that_left_the_lineage_behind_makes_it_unknown(
    manager: SessionManager,
) -> None:
    # An older release saves without writing the lineage. Redis and MongoDB would still
    # run it (SQLite and PostgreSQL refuse it with their schema version), so there the
    # lineage is tied to the version it was written with.
    from agentsessions_mongo import MongoSessionManager
    from agentsessions_redis import RedisSessionManager

    session = await manager.create("s")
    session.add_event("user", 0)
    await manager.save(session)
    if isinstance(manager, RedisSessionManager):
        await manager.client.hset(manager.keys.session("s").hash, "v", 3)  # type: ignore[misc]
    elif isinstance(manager, MongoSessionManager):
        await manager._sessions.update_one({"_id": "s"}, {"$set": {"version": 3}})
    else:
        pytest.skip("the schema version keeps older releases out")
    loaded = await manager._load("s", 0, manager.clock.now())
    assert loaded is not None and loaded.record.version == 3
    assert loaded.record.lineage == ""
