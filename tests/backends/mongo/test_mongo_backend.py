"""MongoDB-specific behaviour: URL and options, layout, the save protocol under failure
and races, cleanup of leftovers, expiry, and ids that look like query operators."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from agentsessions import (
    Event,
    InvalidOptionError,
    InvalidSessionIdError,
    SessionConflictError,
    SessionSerializationError,
    SessionTooLargeError,
    connect,
)
from agentsessions.backend import Capabilities
from agentsessions_conformance import FrozenClock
from agentsessions_mongo import MongoSessionManager
from agentsessions_mongo import _manager as manager_module
from agentsessions_mongo._buckets import BUCKET_EVENTS, stored_positions
from agentsessions_mongo._layout import PENDING
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo

ManagerFactory = Callable[..., Awaitable[MongoSessionManager]]
RawDb = AsyncDatabase[dict[str, Any]]


def collections(manager: MongoSessionManager) -> tuple[str, str]:
    prefix = f"{manager.options.namespace}_" if manager.options.namespace else ""
    return f"{prefix}sessions", f"{prefix}events"


async def raw_positions(raw_db: RawDb, manager: MongoSessionManager, session_id: str) -> list[int]:
    """Positions of every stored event of the session (tail and buckets), published or not."""
    sessions, events = collections(manager)
    doc = await raw_db[sessions].find_one(
        {"_id": session_id}, {"first": 1, "tail": 1, "tail_start": 1}
    )
    docs = await raw_db[events].find({"session": session_id}, {"pos": 1, "data": 1}).to_list(None)
    return sorted(stored_positions(doc, docs))


#: More events than the tail holds: a save of this many seals them into buckets.
SEAL = BUCKET_EVENTS + 1


def contents(session: Any) -> list[Any]:
    return [event.content for event in session.events]


# -- URL, options, plugin ------------------------------------------------------------------


def test_plugin_module_does_not_import_pymongo() -> None:
    code = (
        "import sys, agentsessions, agentsessions_mongo._plugin\n"
        "agentsessions.connect('memory://')\n"
        "assert 'pymongo' not in sys.modules, 'pymongo imported'\n"
        "assert 'bson' not in sys.modules, 'bson imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_url_options_and_driver_parameters() -> None:
    manager = connect(
        "mongodb://alice:pa55word@h1:27017,h2:27018/appdb?replicaSet=rs0&AuthSource=admin"
        "&tls=false&ttl=60&namespace=app&server_selection_timeout=2.5&connect_timeout=3"
    )
    assert isinstance(manager, MongoSessionManager)
    assert manager.options.ttl == 60
    assert manager.options.namespace == "app"
    assert manager.options.server_selection_timeout == 2.5
    assert manager.options.connect_timeout == 3
    # Driver options stay in the URL, whatever their case; ours are taken out.
    assert "replicaSet=rs0" in manager._url and "AuthSource=admin" in manager._url
    assert "ttl" not in manager._url and "namespace" not in manager._url
    assert "pa55word" not in repr(manager) and "pa55word" not in manager.url
    srv = connect("mongodb+srv://cluster0.example.invalid/db?socket_timeout=5")
    assert isinstance(srv, MongoSessionManager) and srv.options.socket_timeout == 5


def test_bad_options_are_named() -> None:
    with pytest.raises(InvalidOptionError, match="server_selection_timeout"):
        connect("mongodb://127.0.0.1/db?server_selection_timeout=-1")
    with pytest.raises(InvalidOptionError, match="bogus"):
        connect("mongodb://127.0.0.1/db?bogus=1")


async def test_unacknowledged_writes_are_refused(mongo_url: str) -> None:
    sep = "&" if "?" in mongo_url else "?"
    manager = connect(f"{mongo_url}{sep}w=0")
    with pytest.raises(InvalidOptionError, match="w=0"):
        await manager.open()
    await manager.close()


async def test_database_defaults_to_agentsessions(mongo_url: str, namespace: str) -> None:
    base = mongo_url.split("?")[0].rsplit("/", 1)[0]
    manager = connect(f"{base}/", namespace=namespace)
    assert isinstance(manager, MongoSessionManager)
    async with manager:
        await manager.create("s1")
        database = manager._links.current().client["agentsessions"]
        try:
            assert await database[f"{namespace}_sessions"].count_documents({"_id": "s1"}) == 1
        finally:
            await database.drop_collection(f"{namespace}_sessions")
            await database.drop_collection(f"{namespace}_events")


# -- layout ----------------------------------------------------------------------------


async def test_layout_tail_then_buckets_json_text(
    mongo: MongoSessionManager, raw_db: RawDb
) -> None:
    sessions_name, events_name = collections(mongo)
    session = await mongo.create("layout", "u1", state={"a.b": 1, "$c": 2**63 - 1})
    for index in range(3):
        session.add_event("user", {"n": index, "$k.e": "x\\x00y"})
    await mongo.save(session)

    # Three events fit the tail: pushed into the session document, no bucket written.
    doc = await raw_db[sessions_name].find_one({"_id": "layout"})
    assert doc is not None
    assert doc["user_id"] == "u1" and doc["version"] == 2 and doc["event_count"] == 3
    assert isinstance(doc["state"], str) and '"a.b"' in doc["state"]
    assert doc["expires_at"] is None
    assert doc["tail_start"] == 0 and len(doc["tail"]) == 3
    assert all(isinstance(text, str) for text in doc["tail"])
    assert Event.model_validate_json(doc["tail"][1]).content == {"n": 1, "$k.e": "x\\x00y"}
    assert await raw_db[events_name].count_documents({"session": "layout"}) == 0

    # A save the tail cannot hold seals it: tail and new events go to a full bucket,
    # and what is left over starts the next tail.
    for index in range(3, 3 + SEAL):
        session.add_event("user", {"n": index})
    await mongo.save(session)
    doc = await raw_db[sessions_name].find_one({"_id": "layout"})
    assert doc is not None and doc["tail_start"] == BUCKET_EVENTS
    assert len(doc["tail"]) == 3 + SEAL - BUCKET_EVENTS
    buckets = await raw_db[events_name].find({"session": "layout"}).sort("pos", 1).to_list(None)
    assert [(bucket["pos"], len(bucket["data"])) for bucket in buckets] == [(0, BUCKET_EVENTS)]
    assert Event.model_validate_json(buckets[0]["data"][1]).content == {"n": 1, "$k.e": "x\\x00y"}
    # Appends go to the tail again; every reader sees one history.
    session.add_event("user", {"n": 3 + SEAL})
    await mongo.save(session)
    for reader in (mongo, await _fresh(mongo)):
        whole = await reader.get("layout")
        assert whole is not None
        assert [event.content["n"] for event in whole.events] == list(range(4 + SEAL))
        window = await reader.get("layout", last_events=3)
        assert window is not None
        assert [event.content["n"] for event in window.events] == [1 + SEAL, 2 + SEAL, 3 + SEAL]
    assert await raw_positions(raw_db, mongo, "layout") == list(range(4 + SEAL))

    event_indexes = await raw_db[events_name].index_information()
    assert any(
        info.get("unique") and [k for k, _ in info["key"]] == ["session", "gen", "pos"]
        for info in event_indexes.values()
    )
    session_indexes = await raw_db[sessions_name].index_information()
    assert any(
        info.get("expireAfterSeconds") == 0 and info["key"] == [("expires_at", 1)]
        for info in session_indexes.values()
    )


async def test_timestamps_keep_microseconds(mongo: MongoSessionManager) -> None:
    created = await mongo.create("micro")
    loaded = await mongo.get("micro")
    assert loaded is not None
    assert loaded.created_at == created.created_at
    assert loaded.created_at.tzinfo is not None
    assert loaded.created_at.utcoffset() == timezone.utc.utcoffset(None)


# -- a save killed half way ----------------------------------------------------------------


@pytest.fixture
def kill_after_insert(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make the next save die right after its events are inserted, before publishing."""
    inserted: list[int] = []
    original = MongoSessionManager._insert

    async def insert_then_die(self: MongoSessionManager, docs: list[dict[str, Any]]) -> bool:
        await original(self, docs)
        inserted.append(len(docs))
        monkeypatch.setattr(MongoSessionManager, "_insert", original)
        raise RuntimeError("killed between insert and publish")

    monkeypatch.setattr(MongoSessionManager, "_insert", insert_then_die)
    return inserted


async def test_killed_seal_is_invisible_and_cleaned_by_next_seal(
    mongo: MongoSessionManager, raw_db: RawDb, kill_after_insert: list[int]
) -> None:
    session = await mongo.create("killed")
    # The first save is killed between its buckets and its publish.
    for index in range(SEAL):
        session.add_event("user", f"lost{index}")
    with pytest.raises(RuntimeError, match="killed"):
        await mongo.save(session)
    assert kill_after_insert == [1]  # one full bucket (the last event was for the tail)
    leftovers = list(range(BUCKET_EVENTS))
    assert await raw_positions(raw_db, mongo, "killed") == leftovers  # leftovers...

    for reader in (mongo, await _fresh(mongo)):
        stored = await reader.get("killed")
        assert stored is not None and stored.version == 1 and stored.events == []
        window = await reader.get("killed", last_events=2)
        assert window is not None and window.events == []

    # ...an append that fits the tail neither sees nor touches them...
    stored = await mongo.get("killed")
    assert stored is not None
    stored.add_event("user", "next")
    await mongo.save(stored)
    assert await raw_positions(raw_db, mongo, "killed") == sorted([0, *leftovers])
    # ...and the next seal, which lands on the same position, moves to a fresh
    # generation, whose publish sweeps them.
    for index in range(BUCKET_EVENTS):
        stored.add_event("user", index)
    await mongo.save(stored)
    again = await (await _fresh(mongo)).get("killed")
    assert again is not None and contents(again) == ["next", *range(BUCKET_EVENTS)]
    assert again.version == 3
    assert await raw_positions(raw_db, mongo, "killed") == list(range(SEAL))


async def test_cancelled_seal_is_invisible_and_cleaned(
    mongo: MongoSessionManager, raw_db: RawDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await mongo.create("cancelled")
    session.add_event("user", "a")
    await mongo.save(session)

    inserted = asyncio.Event()
    original = MongoSessionManager._insert

    async def insert_then_hang(self: MongoSessionManager, docs: list[dict[str, Any]]) -> bool:
        ok = await original(self, docs)
        inserted.set()
        await asyncio.Event().wait()  # never published: the task is cancelled here
        return ok

    monkeypatch.setattr(MongoSessionManager, "_insert", insert_then_hang)
    for index in range(BUCKET_EVENTS):
        session.add_event("user", index)
    task = asyncio.create_task(mongo.save(session))
    await inserted.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    monkeypatch.setattr(MongoSessionManager, "_insert", original)

    # The tail's "a", and the cancelled seal's bucket (which copied it).
    assert await raw_positions(raw_db, mongo, "cancelled") == sorted([0, *range(BUCKET_EVENTS)])
    stored = await (await _fresh(mongo)).get("cancelled")
    assert stored is not None and contents(stored) == ["a"] and stored.version == 2
    tail = await mongo.get("cancelled", last_events=5)
    assert tail is not None and contents(tail) == ["a"]

    for index in range(BUCKET_EVENTS):
        tail.add_event("user", f"d{index}")
    await mongo.save(tail)
    final = await (await _fresh(mongo)).get("cancelled")
    assert final is not None and contents(final) == ["a", *(f"d{i}" for i in range(BUCKET_EVENTS))]
    assert await raw_positions(raw_db, mongo, "cancelled") == list(range(SEAL))


async def test_killed_rewrite_is_invisible_and_cleaned_by_next_rewrite(
    mongo: MongoSessionManager, raw_db: RawDb
) -> None:
    history = 2 * BUCKET_EVENTS
    session = await mongo.create("rewrite")
    session.events = [Event(author="user", content=i) for i in range(history)]
    await mongo.save(session)  # sealed: two full buckets, an empty tail
    original = MongoSessionManager._insert

    async def insert_then_die(self: MongoSessionManager, docs: list[dict[str, Any]]) -> bool:
        await original(self, docs)
        raise RuntimeError("killed rewrite")

    # A rewrite (replace the last event, in the second bucket) killed between its insert
    # and its publish: it wrote that whole bucket again, under a fresh generation.
    session.events[-1] = Event(author="user", content="edited")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(MongoSessionManager, "_insert", insert_then_die)
        with pytest.raises(RuntimeError, match="killed rewrite"):
            await mongo.save(session)
    kept = list(range(history))
    dead = list(range(BUCKET_EVENTS, history))
    assert await raw_positions(raw_db, mongo, "rewrite") == sorted(kept + dead)
    stored = await (await _fresh(mongo)).get("rewrite")
    assert stored is not None and contents(stored) == kept and stored.version == 2

    # Its documents carry a generation nobody publishes, so a plain append neither
    # sees nor trips over them (and, to stay O(new events), does not look for them)...
    stored.add_event("user", "appended")
    await mongo.save(stored)
    assert await raw_positions(raw_db, mongo, "rewrite") == sorted([*kept, history, *dead])
    # ...the next save that publishes a new generation sweeps every dead document.
    stored.events[history - 2] = Event(author="user", content="edited again")
    await mongo.save(stored)
    final = await (await _fresh(mongo)).get("rewrite")
    assert final is not None
    assert contents(final) == [*range(history - 2), "edited again", history - 1, "appended"]
    assert await raw_positions(raw_db, mongo, "rewrite") == list(range(history + 1))

    assert await mongo.delete("rewrite")
    assert await raw_positions(raw_db, mongo, "rewrite") == []


# -- racing saves ----------------------------------------------------------------------------


@pytest.mark.parametrize("first_to_publish", ["paused", "other"])
async def test_two_saves_that_both_wrote_events_one_wins_cleanly(
    make_manager: ManagerFactory,
    raw_db: RawDb,
    monkeypatch: pytest.MonkeyPatch,
    first_to_publish: str,
) -> None:
    """Both saves write their events before either publishes; exactly one lands.

    ``paused`` inserts first (so ``other`` collides with it on the unique index and
    moves to a fresh generation), then the two publish in the order parametrized.
    """
    paused_manager, other_manager = await make_manager(), await make_manager()
    base = await paused_manager.create("race")
    base.add_event("user", "base")
    await paused_manager.save(base)
    mine = await paused_manager.get("race")
    theirs = await other_manager.get("race")
    assert mine is not None and theirs is not None
    # Both seal: the tail's "base" and their events go to buckets before the publish.
    for index in range(BUCKET_EVENTS):
        mine.add_event("user", f"paused-{index}")
        theirs.add_event("user", f"other-{index}")

    original = MongoSessionManager._insert
    inserted, release = asyncio.Event(), asyncio.Event()

    async def pausing_insert(self: MongoSessionManager, docs: list[dict[str, Any]]) -> bool:
        ok = await original(self, docs)
        if self is paused_manager:
            inserted.set()
            await release.wait()
        return ok

    monkeypatch.setattr(MongoSessionManager, "_insert", pausing_insert)
    paused_task = asyncio.create_task(paused_manager.save(mine))
    await inserted.wait()
    # The tail's "base", and the paused seal's bucket (which copied it).
    assert len(await raw_positions(raw_db, paused_manager, "race")) == 1 + BUCKET_EVENTS

    if first_to_publish == "other":
        await other_manager.save(theirs)
        release.set()
        with pytest.raises(SessionConflictError):
            await paused_task
        expected = ["base", *(f"other-{index}" for index in range(BUCKET_EVENTS))]
    else:
        # Let the paused save publish first, while the other one is between its own
        # insert and publish.
        other_inserted = asyncio.Event()
        other_release = asyncio.Event()

        async def pausing_other(self: MongoSessionManager, docs: list[dict[str, Any]]) -> bool:
            ok = await pausing_insert(self, docs)
            if self is other_manager and ok:  # paused once its events are in
                other_inserted.set()
                await other_release.wait()
            return ok

        monkeypatch.setattr(MongoSessionManager, "_insert", pausing_other)
        other_task = asyncio.create_task(other_manager.save(theirs))
        await other_inserted.wait()
        release.set()
        await paused_task
        other_release.set()
        with pytest.raises(SessionConflictError):
            await other_task
        expected = ["base", *(f"paused-{index}" for index in range(BUCKET_EVENTS))]

    monkeypatch.setattr(MongoSessionManager, "_insert", original)
    for reader in (paused_manager, other_manager, await _fresh(paused_manager)):
        stored = await reader.get("race")
        assert stored is not None and contents(stored) == expected and stored.version == 3
    assert await raw_positions(raw_db, paused_manager, "race") == list(range(len(expected)))


async def test_concurrent_updates_from_two_managers_lose_nothing(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    first, second = await make_manager(), await make_manager()
    await first.create("contended")

    async def append(manager: MongoSessionManager, value: int) -> None:
        # group=False: every call saves on its own, so 24 saves race (grouped, the calls
        # of each manager would share saves and only the two managers would race).
        await manager.update("contended", lambda s: s.add_event("user", value), group=False)

    await asyncio.gather(*(append((first, second)[i % 2], i) for i in range(24)))
    stored = await (await _fresh(first)).get("contended")
    assert stored is not None
    assert sorted(contents(stored)) == list(range(24)) and stored.version == 25
    assert await raw_positions(raw_db, first, "contended") == list(range(24))


async def test_many_rewrites_keep_segments_bounded(
    mongo: MongoSessionManager, raw_db: RawDb
) -> None:
    session = await mongo.create("edits")
    turns = manager_module.MAX_SEGMENTS + 4
    for turn in range(turns):
        session.events.extend(Event(author="user", content=turn) for _ in range(SEAL))
        await mongo.save(session)  # a full bucket sealed, one event in the tail
        # Edit the turn's last sealed event: a rewrite into a fresh generation from
        # its bucket's start, which adds a segment each time.
        session.events[-2] = Event(author="user", content=f"edited{turn}")
        await mongo.save(session)
    expected = [
        content
        for turn in range(turns)
        for content in [*([turn] * (BUCKET_EVENTS - 1)), f"edited{turn}", turn]
    ]
    stored = await (await _fresh(mongo)).get("edits")
    assert stored is not None and contents(stored) == expected
    tail = await mongo.get("edits", last_events=5)
    assert tail is not None and contents(tail) == expected[-5:]
    doc = await raw_db[collections(mongo)[0]].find_one({"_id": "edits"})
    assert doc is not None and 1 <= len(doc["segments"]) <= manager_module.MAX_SEGMENTS
    assert await raw_positions(raw_db, mongo, "edits") == list(range(len(expected)))


async def test_reader_rereads_when_cleanup_overtakes_it(
    make_manager: ManagerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, writer = await make_manager(), await make_manager()
    session = await writer.create("overtaken")
    session.events = [Event(author="user", content=i) for i in range(SEAL)]
    await writer.save(session)  # sealed into buckets, which the rewrite below replaces
    original = MongoSessionManager._read_texts
    interposed: list[bool] = []

    async def read_after_a_rewrite(self: MongoSessionManager, *args: Any) -> list[str] | None:
        if self is reader and not interposed:
            interposed.append(True)
            # Between the reader's session read and its event read, a rewrite lands
            # and its cleanup deletes the events the reader is about to fetch.
            session.events[1:] = [Event(author="user", content="new")]
            await writer.save(session)
        return await original(self, *args)

    monkeypatch.setattr(MongoSessionManager, "_read_texts", read_after_a_rewrite)
    stored = await reader.get("overtaken")
    assert interposed == [True]
    assert stored is not None and contents(stored) == [0, "new"] and stored.version == 3


# -- expiry ------------------------------------------------------------------------------


async def test_create_over_expired_and_purge_reclaim_events(
    make_manager: ManagerFactory, raw_db: RawDb
) -> None:
    # The managers' own clock passes the ttl: a busy machine cannot make a session
    # expire before the test means it to.
    clock = FrozenClock()
    short = await make_manager(ttl=60, clock=clock)
    session = await short.create("old", "u")
    session.add_event("user", "old")
    await short.save(session)
    gone = await short.create("ttl-monitor", "u")
    gone.events = [Event(author="user", content=i) for i in range(SEAL)]
    await short.save(gone)  # sealed: a full bucket, and one event in the tail
    clock.advance(61)
    assert await short.get("old") is None

    fresh = await short.create("old", "u")
    assert fresh.events == [] and fresh.version == 1
    assert await raw_positions(raw_db, short, "old") == []  # the expired one's events went

    # What MongoDB's TTL monitor does: it deletes the session document, not its buckets.
    await raw_db[collections(short)[0]].delete_one({"_id": "ttl-monitor"})
    assert await raw_positions(raw_db, short, "ttl-monitor") == list(range(BUCKET_EVENTS))
    assert await short.purge_expired() == 0
    assert await raw_positions(raw_db, short, "ttl-monitor") == []

    kept = await make_manager(clock=clock)
    live = await kept.create("live")
    live.add_event("user", "stays")
    await kept.save(live)
    clock.advance(61)
    assert await kept.purge_expired() == 1  # "old" (re-created with the ttl) expired again
    assert await raw_positions(raw_db, kept, "live") == [0]


async def test_delete_user_and_purge_erase_every_batch_with_its_events(
    make_manager: ManagerFactory, raw_db: RawDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentsessions_mongo import _erasure

    monkeypatch.setattr(_erasure, "_BATCH", 3)  # 8 sessions: three rounds each
    clock = FrozenClock()
    manager = await make_manager(ttl=60, clock=clock)
    for name in ("mine", "doomed"):
        for index in range(8):
            session = await manager.create(f"{name}-{index}", name)
            session.events = [Event(author="user", content="x") for _ in range(SEAL)]
            await manager.save(session)
    await manager.create("other-user", "someone")
    assert await manager.delete_user("mine") == 8
    page = await manager.list_sessions(limit=100)
    assert sorted(info.session_id for info in page.items) == sorted(
        [f"doomed-{index}" for index in range(8)] + ["other-user"]
    )
    clock.advance(61)
    assert await manager.purge_expired() == 9
    assert await raw_db[collections(manager)[1]].count_documents({}) == 0


async def test_the_lives_filter_matches_those_lives_and_no_other_life_of_their_ids(
    mongo: MongoSessionManager, raw_db: RawDb
) -> None:
    from agentsessions_mongo._erasure import lives_filter
    from bson import ObjectId

    old, new, other = ObjectId(), ObjectId(), ObjectId()
    events = raw_db[collections(mongo)[1]]
    await events.insert_many(
        [
            {"session": "a", "incarnation": old, "gen": old, "pos": 0},
            # "a" deleted and re-created: its new life must survive
            {"session": "a", "incarnation": new, "gen": new, "pos": 0},
            {"session": "b", "incarnation": other, "gen": other, "pos": 0},
            {"session": "c", "incarnation": ObjectId(), "gen": ObjectId(), "pos": 0},
        ]
    )
    result = await events.delete_many(lives_filter("session", [("a", old), ("b", other)]))
    assert result.deleted_count == 2
    left = [(doc["session"], doc["incarnation"]) async for doc in events.find({}).sort("session")]
    assert [session for session, _ in left] == ["a", "c"] and left[0][1] == new


async def test_a_stale_ttl_monitor_never_takes_a_restored_session(
    mongo: MongoSessionManager, raw_db: RawDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A TTL monitor that deletes what matched in a snapshot taken while a restore was
    pending (SecantusDB's does, without re-checking) must find nothing to take."""
    sessions = raw_db[collections(mongo)[0]]
    snapshot: list[Any] = []
    original = MongoSessionManager._insert

    async def insert_while_a_monitor_looks(self: MongoSessionManager, docs: list[Any]) -> bool:
        # Between the pending document and the publish: what a TTL index would expire now.
        expired = {"expires_at": {"$type": "date", "$lte": datetime.now(timezone.utc)}}
        snapshot.extend([doc["_id"] async for doc in sessions.find(expired, {"_id": 1})])
        return await original(self, docs)

    monkeypatch.setattr(MongoSessionManager, "_insert", insert_while_a_monitor_looks)
    async with connect("memory://") as memory:
        source = await memory.create("moved", "u", state={"k": 1})
        source.add_event("user", "hello")
        await memory.save(source)
    await mongo.restore(source)
    monkeypatch.setattr(MongoSessionManager, "_insert", original)

    assert snapshot == []  # the pending document is not a date: no TTL index matches it
    await sessions.delete_many({"_id": {"$in": snapshot}})  # the monitor's stale delete
    restored = await (await _fresh(mongo)).get("moved")
    assert restored is not None and contents(restored) == ["hello"]


async def test_a_restore_killed_before_its_publish_is_invisible_and_purged(
    mongo: MongoSessionManager, raw_db: RawDb, kill_after_insert: list[int]
) -> None:
    async with connect("memory://") as memory:
        source = await memory.create("half", "u")
        source.add_event("user", "never seen")
        await memory.save(source)
    with pytest.raises(RuntimeError, match="killed"):
        await mongo.restore(source)
    assert kill_after_insert == [1]
    # What a kill leaves (the restore's own cleanup did not run): rebuild it by hand.
    sessions = raw_db[collections(mongo)[0]]
    await sessions.insert_one({"_id": "half", "incarnation": "dead", "expires_at": PENDING})
    for reader in (mongo, await _fresh(mongo)):
        assert await reader.get("half") is None
        assert [s.session_id for s in (await reader.list_sessions()).items] == []
    assert await mongo.purge_expired() == 1
    assert await sessions.count_documents({"_id": "half"}) == 0
    fresh = await mongo.create("half")  # and the id is free again
    assert fresh.version == 1


# -- ids -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [{"$ne": None}, {"$gt": ""}, ["$where"], 1])
async def test_operator_documents_are_refused_as_ids(
    mongo: MongoSessionManager, raw_db: RawDb, bad: Any
) -> None:
    await mongo.create("victim", "victim-user")
    with pytest.raises(InvalidSessionIdError):
        await mongo.get(bad)
    with pytest.raises(InvalidSessionIdError):
        await mongo.delete(bad)
    with pytest.raises(InvalidSessionIdError):
        await mongo.create("attacker", bad)
    with pytest.raises(InvalidSessionIdError):
        await mongo.delete_user(bad)
    with pytest.raises(InvalidSessionIdError):
        await mongo.list_sessions(user_id=bad)
    # Defence in depth: the backend's own hooks refuse them too.
    with pytest.raises(InvalidSessionIdError):
        await mongo._load(bad, None, datetime.now(timezone.utc))
    with pytest.raises(InvalidSessionIdError):
        await mongo._delete(bad, datetime.now(timezone.utc))
    assert await raw_db[collections(mongo)[0]].count_documents({}) == 1
    assert await mongo.get("victim") is not None


@pytest.mark.parametrize("text", ["$where", "$ne", '{"$ne": null}', "a.b", "$", "x$y.z"])
async def test_operator_looking_strings_are_plain_ids(
    mongo: MongoSessionManager, raw_db: RawDb, text: str
) -> None:
    other = await mongo.create("bystander", "someone")
    session = await mongo.create(text, text)
    session.add_event("user", text)
    await mongo.save(session)
    stored = await mongo.get(text, user_id=text)
    assert stored is not None and stored.session_id == text and contents(stored) == [text]
    page = await mongo.list_sessions(user_id=text)
    assert [item.session_id for item in page.items] == [text]
    doc = await raw_db[collections(mongo)[0]].find_one({"_id": text})
    assert doc is not None and doc["user_id"] == text
    assert await mongo.delete_user(text) == 1
    assert await mongo.get(other.session_id) is not None


# -- limits ----------------------------------------------------------------------------------


async def test_oversized_state_is_refused_and_nothing_written(mongo: MongoSessionManager) -> None:
    session = await mongo.create("huge")
    session.add_event("user", "small")
    session.state["blob"] = "x" * (17 * 1024 * 1024)
    with pytest.raises(SessionTooLargeError, match="16760832 bytes") as caught:
        await mongo.save(session)
    assert "xxxx" not in str(caught.value) and len(str(caught.value)) < 300
    stored = await mongo.get("huge")
    assert stored is not None and stored.version == 1 and stored.state == {}


@pytest.mark.parametrize("where", ["event", "state"])
async def test_the_servers_document_limit_is_a_documented_error(
    mongo: MongoSessionManager, where: str
) -> None:
    """Past the server's own limit (the manager's check switched off): a
    SessionSerializationError stating the limit, never the payload; nothing stored."""
    mongo.capabilities = Capabilities(persistent=True, shared=True)
    session = await mongo.create("huge")
    if where == "event":
        session.add_event("user", "x" * (17 * 1024 * 1024))
    else:
        session.state["blob"] = "x" * (17 * 1024 * 1024)
    with pytest.raises(SessionSerializationError) as caught:
        await mongo.save(session)
    message = str(caught.value)
    assert "xxxx" not in message and len(message) < 500, message[:500]
    assert "bytes" in message
    stored = await mongo.get("huge")
    assert stored is not None and stored.version == 1 and stored.events == []


async def _fresh(manager: MongoSessionManager) -> MongoSessionManager:
    """Another manager on the same store: sees what is stored, not what *manager* caches."""
    other = manager.with_options()
    await other.open()
    _opened_fresh.append(other)
    return other


_opened_fresh: list[MongoSessionManager] = []


@pytest.fixture(autouse=True)
async def _close_fresh() -> Any:
    yield
    while _opened_fresh:
        await _opened_fresh.pop().close()
