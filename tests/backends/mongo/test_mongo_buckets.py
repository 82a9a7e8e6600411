"""The bucket layout's pure parts, without a server: cutting texts into buckets, which
buckets a read asks for, putting a range back together, and what cleanup may take."""

from __future__ import annotations

from typing import Any

from agentsessions_mongo._buckets import (
    BUCKET_BYTES,
    BUCKET_EVENTS,
    assemble,
    bucket_docs,
    read_filter,
    read_plan,
    stale_events_filter,
    stored_positions,
)
from bson import ObjectId

GEN = ObjectId()


def _buckets(start: int, texts: list[str], gen: ObjectId = GEN) -> list[dict[str, Any]]:
    return bucket_docs("s", ObjectId(), 1, gen, ObjectId(), start, texts)


def _matches(query: dict[str, Any], doc: dict[str, Any]) -> bool:
    """*doc* matches one clause of a `read_filter` (session, gen, pos range)."""
    clauses = query.get("$or", [query])
    return any(
        doc["gen"] == clause["gen"] and clause["pos"]["$gt"] < doc["pos"] < clause["pos"]["$lt"]
        for clause in clauses
    )


def test_texts_are_cut_into_full_buckets_and_a_large_event_gets_its_own() -> None:
    texts = [f"e{i}" for i in range(2 * BUCKET_EVENTS + 5)]
    docs = _buckets(10, texts)
    assert [(doc["pos"], len(doc["data"])) for doc in docs] == [
        (10, BUCKET_EVENTS),
        (10 + BUCKET_EVENTS, BUCKET_EVENTS),
        (10 + 2 * BUCKET_EVENTS, 5),
    ]
    assert [text for doc in docs for text in doc["data"]] == texts
    big = "x" * (BUCKET_BYTES + 1)
    docs = _buckets(0, ["a", big, "b"])
    assert [doc["data"] for doc in docs] == [["a"], [big], ["b"]]


def test_a_tail_read_asks_for_the_last_buckets_only() -> None:
    history = 5000
    docs = _buckets(0, [str(i) for i in range(history)])
    plan = read_plan([(0, GEN, BUCKET_EVENTS)], history, history - 20, history)
    matched = [doc for doc in docs if _matches(read_filter("s", plan), doc)]
    assert 1 <= len(matched) <= 2
    assert assemble(plan, matched) == [str(i) for i in range(history - 20, history)]
    whole = read_plan([(0, GEN, BUCKET_EVENTS)], history, 0, history)
    assert assemble(whole, docs) == [str(i) for i in range(history)]


def test_per_event_documents_read_as_buckets_of_one() -> None:
    legacy = [{"gen": GEN, "pos": i, "data": str(i)} for i in range(100)]
    plan = read_plan([(0, GEN, 1)], 100, 90, 100)
    matched = [doc for doc in legacy if _matches(read_filter("s", plan), doc)]
    assert [doc["pos"] for doc in matched] == list(range(90, 100))
    assert assemble(plan, matched) == [str(i) for i in range(90, 100)]


def test_a_missing_bucket_makes_the_read_incomplete() -> None:
    docs = _buckets(0, [str(i) for i in range(3 * BUCKET_EVENTS)])
    plan = read_plan([(0, GEN, BUCKET_EVENTS)], 3 * BUCKET_EVENTS, 0, 3 * BUCKET_EVENTS)
    assert assemble(plan, [docs[0], docs[2]]) is None
    assert assemble(plan, docs[:2]) is None


def test_segments_take_their_own_positions_from_their_own_generation() -> None:
    other = ObjectId()
    old = _buckets(0, [f"old{i}" for i in range(BUCKET_EVENTS)])
    new = _buckets(BUCKET_EVENTS // 2, ["new"], other)
    segments = [(0, GEN, BUCKET_EVENTS), (BUCKET_EVENTS // 2, other, BUCKET_EVENTS)]
    plan = read_plan(segments, BUCKET_EVENTS // 2 + 1, 0, BUCKET_EVENTS // 2 + 1)
    texts = assemble(plan, sorted(old + new, key=lambda doc: doc["pos"]))
    assert texts == [*(f"old{i}" for i in range(BUCKET_EVENTS // 2)), "new"]


def test_cleanup_never_takes_the_open_generation_past_the_tail_start() -> None:
    other = ObjectId()
    query = stale_events_filter("s", ObjectId(), [(0, other, 64), (100, GEN, 64)], 300, 7)
    clauses = query["$or"]
    assert {"gen": {"$nin": [other, GEN]}} in clauses
    assert {"gen": other, "pos": {"$gte": 100}} in clauses  # past its range: dead
    assert {"gen": GEN, "pos": {"$lt": 100}} in clauses  # before its range: dead
    # Where the next seal writes is left alone (no clause on GEN past a position).
    assert not [c for c in clauses if c.get("gen") == GEN and "$gte" in c.get("pos", {})]
    assert query["base"] == {"$lt": 7}


def test_stored_positions_count_tail_and_bucket_events_from_first() -> None:
    docs = [{"pos": 5, "data": ["a", "b"]}, {"pos": 7, "data": "c"}]
    session = {"first": 5, "tail_start": 8, "tail": ["d", "e"]}
    assert sorted(stored_positions(session, docs)) == [0, 1, 2, 3, 4]
    assert sorted(stored_positions(None, docs)) == [5, 6, 7]
