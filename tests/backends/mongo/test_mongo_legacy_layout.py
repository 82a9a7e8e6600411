"""A store written before buckets (one document per event, no tail) keeps working.

The old layout is written here by hand, as the backend stored it: per-event documents
``{session, incarnation, gen, pos, base, writer, data: "<JSON text>"}`` and a session
document whose segments are ``[start, gen]`` pairs, with no ``tail`` fields. The new code
must read it (whole and by tail), save onto it, seal, rewrite, compact, rewind and copy
it, with every stored position accounted for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agentsessions import Event
from agentsessions_mongo import MongoSessionManager
from agentsessions_mongo._buckets import BUCKET_EVENTS, stored_positions
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo

ManagerFactory = Callable[..., Awaitable[MongoSessionManager]]
RawDb = AsyncDatabase[dict[str, Any]]
HISTORY = 2 * BUCKET_EVENTS  # sealed whole: two full buckets, an empty tail


def _names(manager: MongoSessionManager) -> tuple[str, str]:
    prefix = f"{manager.options.namespace}_" if manager.options.namespace else ""
    return f"{prefix}sessions", f"{prefix}events"


async def _positions(raw_db: RawDb, manager: MongoSessionManager, session_id: str) -> list[int]:
    sessions, events = _names(manager)
    doc = await raw_db[sessions].find_one({"_id": session_id})
    docs = await raw_db[events].find({"session": session_id}).to_list(None)
    return sorted(stored_positions(doc, docs))


async def _write_legacy(raw_db: RawDb, manager: MongoSessionManager, session_id: str) -> None:
    """Store *session_id* (HISTORY events, all in buckets) again in the per-event layout."""
    sessions, events = _names(manager)
    doc = await raw_db[sessions].find_one({"_id": session_id})
    assert doc is not None and doc["tail"] == [] and len(doc["segments"]) == 1
    buckets = await raw_db[events].find({"session": session_id}).sort("pos", 1).to_list(None)
    assert sum(len(bucket["data"]) for bucket in buckets) == HISTORY
    legacy = [
        {
            "session": session_id,
            "incarnation": bucket["incarnation"],
            "gen": bucket["gen"],
            "pos": bucket["pos"] + offset,
            "base": bucket["base"],
            "writer": bucket["writer"],
            "data": text,
        }
        for bucket in buckets
        for offset, text in enumerate(bucket["data"])
    ]
    await raw_db[events].delete_many({"session": session_id})
    await raw_db[events].insert_many(legacy)
    start, gen, _ = doc["segments"][0]
    await raw_db[sessions].update_one(
        {"_id": session_id},
        {
            "$set": {"segments": [[start, gen]]},
            "$unset": {"tail": "", "tail_start": "", "tail_bytes": ""},
        },
    )


async def _legacy(
    make_manager: ManagerFactory, raw_db: RawDb, session_id: str
) -> tuple[MongoSessionManager, list[Any]]:
    """A manager with a cold cache on a store holding *session_id* in the old layout."""
    writer = await make_manager()
    session = await writer.create(session_id)
    session.events = [Event(author="user", content=index) for index in range(HISTORY)]
    await writer.save(session)
    await _write_legacy(raw_db, writer, session_id)
    sessions, events = _names(writer)
    assert await raw_db[events].count_documents({"session": session_id}) == HISTORY
    assert "tail_start" not in (await raw_db[sessions].find_one({"_id": session_id}) or {})
    return await make_manager(), list(range(HISTORY))


def contents(session: Any) -> list[Any]:
    return [event.content for event in session.events]


async def test_legacy_layout_is_read_whole_and_by_tail(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    manager, expected = await _legacy(make_manager, raw_db, "old")
    whole = await manager.get("old")
    assert whole is not None and contents(whole) == expected and whole.version == 2
    for count in (1, 5, BUCKET_EVENTS + 1):
        window = await manager.get("old", last_events=count)
        assert window is not None and contents(window) == expected[-count:]
    assert await _positions(raw_db, manager, "old") == expected


async def test_legacy_layout_takes_appends_and_seals_into_buckets(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    manager, expected = await _legacy(make_manager, raw_db, "old")
    session = await manager.get("old", last_events=2)
    assert session is not None
    session.add_event("user", "tail")
    await manager.save(session)  # into the (new) tail: the per-event documents stay
    expected.append("tail")
    sessions, events = _names(manager)
    assert await raw_db[events].count_documents({"session": "old"}) == HISTORY
    # The segments are stored in the new form, so an older release fails on the
    # session rather than read it without its tail.
    doc = await raw_db[sessions].find_one({"_id": "old"})
    assert doc is not None and doc["tail_start"] == HISTORY and len(doc["tail"]) == 1
    assert [len(segment) for segment in doc["segments"]] == [3]
    for index in range(BUCKET_EVENTS):
        session.add_event("user", f"sealed{index}")
    await manager.save(session)  # a seal: buckets under a fresh generation
    expected.extend(f"sealed{index}" for index in range(BUCKET_EVENTS))
    buckets = (
        await raw_db[events].find({"session": "old", "data": {"$type": "array"}}).to_list(None)
    )
    assert [(bucket["pos"], len(bucket["data"])) for bucket in buckets] == [
        (HISTORY, BUCKET_EVENTS)
    ]
    for reader in (manager, await make_manager()):
        whole = await reader.get("old")
        assert whole is not None and contents(whole) == expected
        window = await reader.get("old", last_events=BUCKET_EVENTS + 3)
        assert window is not None and contents(window) == expected[-(BUCKET_EVENTS + 3) :]
    assert await _positions(raw_db, manager, "old") == list(range(len(expected)))


async def test_legacy_layout_rewrites_compacts_and_rewinds(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    manager, expected = await _legacy(make_manager, raw_db, "old")
    session = await manager.get("old")
    assert session is not None
    # A rewrite inside the per-event documents: from there on, a fresh generation.
    session.events[10] = Event(author="user", content="edited")
    await manager.save(session)
    expected[10] = "edited"
    stored = await (await make_manager()).get("old")
    assert stored is not None and contents(stored) == expected
    assert await _positions(raw_db, manager, "old") == list(range(HISTORY))

    # A compaction cutting inside what is still per-event (positions 0..9).
    summary = Event(author="system", content="summary")
    await manager.compact(stored, stored.events[4].id, [summary], archive=True)
    expected = ["summary", *expected[5:]]
    again = await (await make_manager()).get("old")
    assert again is not None and contents(again) == expected
    archived = await manager.archived_events("old")
    assert [event.content for event in archived] == list(range(5))
    assert await _positions(raw_db, manager, "old") == list(range(len(expected)))

    # A rewind into the per-event documents, then an append.
    await manager.rewind(again, again.events[3].id, archive=True)
    expected = expected[:4]
    again.add_event("user", "after")
    await manager.save(again)
    expected.append("after")
    final = await (await make_manager()).get("old")
    assert final is not None and contents(final) == expected
    assert await _positions(raw_db, manager, "old") == list(range(len(expected)))


async def test_legacy_layout_moves_to_buckets_by_copy(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    """What ``agentsessions copy`` does (a load, then `restore` into the target): the
    copy is stored in buckets, the source is untouched."""
    manager, expected = await _legacy(make_manager, raw_db, "old")
    source = await manager.get("old")
    assert source is not None
    target = await make_manager(namespace=f"{manager.options.namespace}_copy")
    await target.restore(source)
    copied = await target.get("old")
    assert copied is not None and contents(copied) == expected
    assert copied.version == source.version
    _, events = _names(target)
    buckets = await raw_db[events].find({"session": "old"}).sort("pos", 1).to_list(None)
    assert [len(bucket["data"]) for bucket in buckets] == [BUCKET_EVENTS, HISTORY - BUCKET_EVENTS]
    _, old_events = _names(manager)
    assert await raw_db[old_events].count_documents({"session": "old"}) == HISTORY
