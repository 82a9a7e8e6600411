"""Bucket documents: how events are cut into them, read back from them, and swept.

A session's events are stored in two places (see `_layout`):

- the **tail**, the newest events, inline in the session document (``tail``, from stored
  position ``tail_start`` on), so that an append is one ``$push`` in the very update
  that checks the version, and a read of the last few events reads one document;
- **buckets** in the events collection for everything before ``tail_start``: one
  document holds a run of consecutive positions,
  ``{session, incarnation, gen, pos: <first position>, base, writer, data: [text, ...]}``,
  at most `BUCKET_EVENTS` events (``span`` of its segment) and about `BUCKET_BYTES`.
  A store written before buckets existed holds one document per event with ``data``
  a string: its segments carry no span (read as span 1), and it is read as buckets of
  one event.

Every segment's documents hold at most ``span`` events, so the documents that can hold
positions ``[lo, hi)`` of a segment have ``pos`` in ``(lo - span, hi)``: a bounded
range of the unique (session, gen, pos) index, whatever the history's length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bson import ObjectId

__all__ = [
    "BUCKET_BYTES",
    "BUCKET_EVENTS",
    "TAIL_BYTES",
    "Segment",
    "assemble",
    "bucket_docs",
    "doc_texts",
    "read_filter",
    "read_plan",
    "segment_ranges",
    "stale_events_filter",
    "stored_positions",
    "text_bytes",
]

#: Events per bucket, and in the tail. Chosen from measurement (docs/benchmarks.md).
BUCKET_EVENTS = 64
#: A sealed bucket is cut before it passes this many bytes of event text (an event
#: larger than this gets a bucket of its own), far from the 16 MiB document limit.
BUCKET_BYTES = 1024 * 1024
#: The tail is sealed into buckets before its event text passes this many bytes: it is
#: read with the session document by every get and save that needs that document.
TAIL_BYTES = 256 * 1024

Segment = tuple[int, ObjectId, int]
"""(first position, generation, span): the generation owns positions from here to the next
start; each of its documents holds at most *span* events (1 for the per-event layout)."""

Plan = list[tuple[ObjectId, int, int, int]]


def text_bytes(text: str) -> int:
    """The UTF-8 size of *text* (what BSON stores), without encoding ASCII."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def doc_texts(doc: dict[str, Any]) -> list[str]:
    """The event texts of one event document: a bucket's list, or a per-event string."""
    data = doc["data"]
    return [data] if isinstance(data, str) else list(data)


def bucket_docs(
    session_id: str,
    incarnation: ObjectId,
    base: int,
    gen: ObjectId,
    writer: ObjectId,
    start: int,
    texts: Sequence[str],
) -> list[dict[str, Any]]:
    """*texts* (positions from *start* on) cut into bucket documents of one save attempt.

    ``base`` (the version the writer expects) and ``writer`` (its attempt id) are what
    make cleanup safe: a writer expecting version ``b`` can never publish once the
    session is past ``b``, and a writer that lost deletes exactly its own documents.
    """
    docs: list[dict[str, Any]] = []
    chunk: list[str] = []
    size = 0
    position = start
    for text in texts:
        length = text_bytes(text)
        if chunk and (len(chunk) >= BUCKET_EVENTS or size + length > BUCKET_BYTES):
            docs.append(_bucket(session_id, incarnation, base, gen, writer, position, chunk))
            position += len(chunk)
            chunk, size = [], 0
        chunk.append(text)
        size += length
    if chunk:
        docs.append(_bucket(session_id, incarnation, base, gen, writer, position, chunk))
    return docs


def _bucket(
    session_id: str,
    incarnation: ObjectId,
    base: int,
    gen: ObjectId,
    writer: ObjectId,
    position: int,
    texts: list[str],
) -> dict[str, Any]:
    return {
        "session": session_id,
        "incarnation": incarnation,
        "gen": gen,
        "pos": position,
        "base": base,
        "writer": writer,
        "data": texts,
    }


def segment_ranges(segments: Sequence[Segment], stop: int) -> list[tuple[ObjectId, int, int, int]]:
    """(gen, start, end, span) for each segment; the last one ends at stored position *stop*."""
    ranges = []
    for index, (start, gen, span) in enumerate(segments):
        end = segments[index + 1][0] if index + 1 < len(segments) else stop
        ranges.append((gen, start, end, span))
    return ranges


def read_plan(segments: Sequence[Segment], stop: int, low: int, high: int) -> Plan:
    """(gen, lo, hi, span): which generation gives which stored positions of [low, high)."""
    plan: Plan = []
    for gen, start, end, span in segment_ranges(segments, stop):
        lo, hi = max(start, low), min(end, high)
        if lo < hi:
            plan.append((gen, lo, hi, span))
    return plan


def read_filter(session_id: str, plan: Plan) -> dict[str, Any]:
    """The documents that can hold the positions of *plan*: one bounded range of the
    (session, gen, pos) index per generation."""
    clauses = [{"gen": gen, "pos": {"$gt": lo - span, "$lt": hi}} for gen, lo, hi, span in plan]
    if len(clauses) == 1:
        return {"session": session_id, **clauses[0]}
    return {"session": session_id, "$or": clauses}


def assemble(plan: Plan, docs: Sequence[dict[str, Any]]) -> list[str] | None:
    """The texts of *plan*'s positions, in order, out of *docs* (sorted by pos); None if
    one is missing (a later publish's cleanup deleted it)."""
    by_gen: dict[ObjectId, list[dict[str, Any]]] = {}
    for doc in docs:
        by_gen.setdefault(doc["gen"], []).append(doc)
    texts: list[str] = []
    for gen, lo, hi, _ in plan:
        at = lo
        for doc in by_gen.get(gen, ()):
            data = doc_texts(doc)
            start, end = doc["pos"], doc["pos"] + len(data)
            if end <= at:
                continue  # wholly before what is wanted (a lagging cleanup's leftover)
            if start > at:
                return None  # a gap
            stop = min(end, hi)
            texts.extend(data[at - start : stop - start])
            at = stop
            if at == hi:
                break
        if at != hi:
            return None
    return texts


def stale_events_filter(
    session_id: str,
    incarnation: ObjectId,
    segments: Sequence[Segment],
    tail_start: int,
    version: int,
) -> dict[str, Any]:
    """Event documents of this incarnation that no reader can ever need again.

    Called right after publishing *version*, whose buckets end at stored position
    *tail_start*. A document is dead when it is not published by *version* (its
    generation owns no segment, or it lies wholly outside its generation's segment) AND
    its writer expected a version below *version*, so that writer can never publish it.
    Writers that loaded *version* itself may be writing right now: their ``base`` is
    *version*, so they are left alone. Both facts only ever stay true, which makes this
    delete safe however late it reaches the server.

    Documents of the last generation from *tail_start* on are never swept here: that is
    where the next seal writes, and a leftover there makes it collide and move to a
    fresh generation (whose publish sweeps the old one). Sweeping part of such leftovers
    could let a seal land among the rest, two documents claiming one position.
    """
    ranges = segment_ranges(segments, tail_start)
    unpublished: list[dict[str, Any]] = [{"gen": {"$nin": [gen for gen, _, _, _ in ranges]}}]
    unpublished.extend({"gen": gen, "pos": {"$gte": end}} for gen, _, end, _ in ranges[:-1])
    # No document straddles a segment's start (a cut inside a bucket rewrites it).
    unpublished.extend({"gen": gen, "pos": {"$lt": start}} for gen, start, _, _ in ranges)
    return {
        "session": session_id,
        "incarnation": incarnation,
        "base": {"$lt": version},
        "$or": unpublished,
    }


def stored_positions(session: dict[str, Any] | None, events: Sequence[dict[str, Any]]) -> list[int]:
    """Every stored event position of a session (its tail, and every event of every
    event document, published or not), relative to its first event."""
    first = session.get("first", 0) if session else 0
    positions = [
        position
        for doc in events
        for position in range(doc["pos"], doc["pos"] + len(doc_texts(doc)))
    ]
    if session is not None and "tail_start" in session:
        start = session["tail_start"]
        positions.extend(range(start, start + len(session.get("tail", ()))))
    return [position - first for position in positions]
