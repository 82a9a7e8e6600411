"""What the documents look like, their indexes, and the functions that build them and filters.

Two collections per namespace:

``sessions`` -- one document per session::

    {_id: session_id, user_id, state: "<JSON text>", version, created_at: <int us>,
     updated_at: <int us>, expires_at: <date> | null | {pending: true}, event_count, lineage,
     incarnation: <ObjectId>, segments: [[start_position, <gen ObjectId>, span], ...],
     first: <position of the first event, absent = 0>, archives: [<writer>, ...],
     tail: ["<JSON text>", ...], tail_start: <position of tail[0]>, tail_bytes}

``tail`` holds the newest events (at most `BUCKET_EVENTS`, about `TAIL_BYTES`), so an
append is a ``$push`` in the update that publishes it; ``events`` holds the rest in
bucket documents (see `_buckets`), so a long conversation never nears MongoDB's
16 MB document limit::

    {session, incarnation, gen, pos: <first position>, base, writer, data: ["<JSON text>", ...]}

with a unique index on (session, gen, pos). A store written before buckets has one
document per event (``data`` a string, no ``tail_start``): it is read as it is, and its
next buckets go to a fresh generation. Positions are stored from ``first``, which only a
compaction moves: it replaces the head of the history by deleting those documents and
writing its new events just before the cut, never renumbering the events it keeps.

``archive`` -- what compactions asked to keep, one document per replaced event::

    {session, incarnation, writer, at: <version it created>, pos, data}

read only for the writers the session document lists in ``archives`` (a compaction
that lost its publish leaves documents nobody reads, and deletes them).

Why JSON text and not BSON sub-documents: an event's content may hold keys with ``.``
or ``$``, integers up to 2**63-1 next to floats, NUL characters and nesting deeper than
BSON's 100 levels; a string field stores all of that byte for byte, and core decodes a
whole batch of them in one pydantic-core call (`decode_events`), faster than pymongo
could build the dicts. Timestamps are integer microseconds since the epoch because
BSON dates hold milliseconds and the contract keeps microseconds; ``expires_at`` is a
BSON date anyway, since MongoDB's TTL index needs one (rounded *up* to the next
millisecond, so a session never expires before its time to live).

Why ``gen``: see `_buckets.segment_ranges` and the manager's ``_save``. A *generation* is a
fresh ObjectId under which one save (or a run of appends) writes events; the session
document lists which generation owns which range of positions (``segments``), and a
reader takes position ``p`` only from the generation that owns it. Events of an
unpublished or superseded save therefore sit in the collection without ever being read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

from agentsessions import ForkOrigin
from agentsessions.backend import (
    SessionRecord,
    expiry_millis,
    fork_fields,
    fork_origin,
    from_micros,
    stamp_lineage,
    to_micros,
    unstamp_lineage,
)
from bson import ObjectId
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, IndexModel
from pymongo.asynchronous.collection import AsyncCollection

from ._buckets import BUCKET_EVENTS, Segment

__all__ = [
    "Link",
    "archive_docs",
    "create_indexes",
    "list_filter",
    "SessionInfo",
    "expiry_date",
    "info_of",
    "PENDING",
    "expired_filters",
    "forks_filter",
    "is_expired",
    "lineage_of",
    "live_filter",
    "record_of",
    "session_doc",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def expiry_date(when: datetime | None) -> datetime | None:
    """*when* rounded up to BSON's millisecond, so expiry never comes early."""
    if when is None:
        return None
    return _EPOCH + timedelta(milliseconds=expiry_millis(when))


# What a restore's session document holds until its events are written: never visible,
# and not a date, so no TTL monitor ever deletes it. One that deletes from a stale
# snapshot (SecantusDB's does) would otherwise take a document published since.
PENDING: dict[str, Any] = {"pending": True}


def is_expired(doc: dict[str, Any], now: datetime) -> bool:
    """Whether *doc* is invisible at *now*: past its expiry, or a restore's pending document."""
    expires = doc.get("expires_at")
    if isinstance(expires, datetime):
        return expires <= now
    return expires is not None


def expired_filters(now: datetime) -> tuple[dict[str, Any], dict[str, Any]]:
    """Between them, match what `is_expired` says is invisible at *now* (and
    `live_filter` excludes): past its expiry, and a pending restore. Two filters, not
    one ``$or``, so that each query takes the ``expires_at`` index: a server need not
    use an index for an ``$or``, and SecantusDB scans the collection for one."""
    return {"expires_at": {"$lte": now}}, {"expires_at": PENDING}


class Link(NamedTuple):
    """One event loop's client and the namespace's three collections."""

    client: AsyncMongoClient[dict[str, Any]]
    sessions: AsyncCollection[dict[str, Any]]
    events: AsyncCollection[dict[str, Any]]
    archive: AsyncCollection[dict[str, Any]]


async def create_indexes(
    sessions: AsyncCollection[Any], events: AsyncCollection[Any], archive: AsyncCollection[Any]
) -> None:
    """The indexes every query here relies on (creating an existing index is a no-op)."""
    await sessions.create_indexes(
        [
            # Expired sessions are filtered out at read time; the TTL monitor (about
            # once a minute) reclaims their documents.
            IndexModel([("expires_at", ASCENDING)], expireAfterSeconds=0),
            IndexModel([("created_at", DESCENDING), ("_id", DESCENDING)]),
            IndexModel([("user_id", ASCENDING), ("created_at", DESCENDING), ("_id", DESCENDING)]),
            # A session's forks, in listing order (sparse: most sessions are no fork).
            IndexModel(
                [("forked_from.session_id", 1), ("created_at", DESCENDING), ("_id", DESCENDING)],
                sparse=True,
            ),
        ]
    )
    await events.create_indexes([IndexModel([("session", 1), ("gen", 1), ("pos", 1)], unique=True)])
    await archive.create_indexes([IndexModel([("session", 1), ("at", 1), ("pos", 1)])])


def list_filter(
    user_id: str | None, after: tuple[datetime, str] | None, now: datetime
) -> dict[str, Any]:
    """The live sessions (of *user_id*, if given) strictly after the cursor position
    *after* in the listing order (created_at, _id) descending."""
    conditions: list[dict[str, Any]] = [live_filter(now)]
    if after is not None:
        created, last_id = to_micros(after[0]), after[1]
        before = [
            {"created_at": {"$lt": created}},
            {"created_at": created, "_id": {"$lt": last_id}},
        ]
        conditions.append({"$or": before})
    query: dict[str, Any] = {} if user_id is None else {"user_id": user_id}
    query["$and"] = conditions
    return query


def archive_docs(
    session_id: str, incarnation: ObjectId, writer: ObjectId, at: int, texts: Sequence[str]
) -> list[dict[str, Any]]:
    """The archive documents of a compaction: *texts* kept, tagged with version *at*."""
    return [
        {
            "session": session_id,
            "incarnation": incarnation,
            "writer": writer,
            "at": at,
            "pos": position,
            "data": text,
        }
        for position, text in enumerate(texts)
    ]


def live_filter(now: datetime) -> dict[str, Any]:
    """Matches sessions that have not expired at *now* (the TTL monitor lags by ~60 s)."""
    return {"$or": [{"expires_at": None}, {"expires_at": {"$gt": now}}]}


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What a save needs to know of the stored session at one version.

    ``(incarnation, version)`` names one state for good: versions only grow within an
    incarnation and every create starts a new incarnation, so a cached `SessionInfo`
    is never wrong, only possibly outdated (and a save checks both before publishing).
    """

    version: int
    incarnation: ObjectId
    segments: tuple[Segment, ...]
    event_count: int
    first: int = 0  # the stored position of the first event (moved by compactions)
    lineage: str = ""  # the stored SessionRecord.lineage at this version ("" unknown)
    tail_start: int | None = None  # where the inline tail begins (None: it is empty)
    tail_bytes: int = 0  # at least the UTF-8 size of the tail's texts

    @property
    def end(self) -> int:
        """The stored position just past the last event."""
        return self.first + self.event_count

    @property
    def start_of_tail(self) -> int:
        """The stored position of the tail's first event (== `end` when it is empty):
        buckets hold the positions before it."""
        return self.end if self.tail_start is None else self.tail_start

    @property
    def tail_count(self) -> int:
        return self.end - self.start_of_tail


def info_of(doc: dict[str, Any]) -> SessionInfo:
    return SessionInfo(
        version=doc["version"],
        incarnation=doc["incarnation"],
        segments=tuple(_segment(item) for item in doc["segments"]),
        event_count=doc["event_count"],
        first=int(doc.get("first", 0)),
        lineage=lineage_of(doc),
        tail_start=doc.get("tail_start"),
        tail_bytes=int(doc.get("tail_bytes", 0)),
    )


def _segment(item: Sequence[Any]) -> Segment:
    """A stored ``[start, gen, span]``; the per-event layout's ``[start, gen]`` has span 1."""
    return (int(item[0]), item[1], int(item[2]) if len(item) > 2 else 1)


def session_doc(record: SessionRecord, incarnation: ObjectId, gen: ObjectId) -> dict[str, Any]:
    """A new session document; its events (if any) go to buckets of *gen*, its tail is empty."""
    return {
        "_id": record.session_id,
        "user_id": record.user_id,
        "state": record.state,
        "version": record.version,
        "created_at": to_micros(record.created_at),
        "updated_at": to_micros(record.updated_at),
        "expires_at": expiry_date(record.expires_at),
        "event_count": record.event_count,
        "lineage": stamp_lineage(record.lineage, record.version),
        "incarnation": incarnation,
        "segments": [[0, gen, BUCKET_EVENTS]],
        "tail_start": record.event_count,
        **_origin_doc(record),
    }


def _origin_doc(record: SessionRecord) -> dict[str, Any]:
    """A fork's ``forked_from`` sub-document (absent for a session that is no fork)."""
    source, version, event_id = fork_fields(record)
    if source is None:
        return {}
    return {"forked_from": {"session_id": source, "version": version, "event_id": event_id}}


def forks_filter(
    source_id: str, user_id: str | None, after: tuple[datetime, str] | None, now: datetime
) -> dict[str, Any]:
    """`list_filter` narrowed to the forks of *source_id*."""
    return {**list_filter(user_id, after, now), "forked_from.session_id": source_id}


def record_of(doc: dict[str, Any]) -> SessionRecord:
    return SessionRecord(
        session_id=doc["_id"],
        user_id=doc.get("user_id"),
        state=doc["state"],
        version=doc["version"],
        created_at=from_micros(doc["created_at"]),
        updated_at=from_micros(doc["updated_at"]),
        expires_at=doc.get("expires_at"),
        event_count=doc["event_count"],
        lineage=lineage_of(doc),
        forked_from=_origin_of(doc.get("forked_from")),
    )


def _origin_of(origin: dict[str, Any] | None) -> ForkOrigin | None:
    if origin is None:
        return None
    return fork_origin(origin["session_id"], origin["version"], origin.get("event_id"))


def lineage_of(doc: dict[str, Any]) -> str:
    """The session's lineage (`stamp_lineage`'d), or "" (unknown: a retry reads it whole)."""
    return unstamp_lineage(doc.get("lineage"), doc["version"])
