"""`MongoSessionManager`: sessions in MongoDB through pymongo's native async client.

How a save stays atomic without a transaction
---------------------------------------------
A save may write thousands of events but must land whole or not at all, on a
standalone server (no transactions there) as well as on a replica set. So there is ONE
code path, correct on both, and it needs no transaction. The newest events live in the
session document itself (its *tail*); older ones in bucket documents (see `_buckets`):

1. write the new buckets first, as documents no reader will take: they carry a
   *generation* that does not own their positions yet (a seal of the tail uses the
   session's current generation at positions >= tail_start, which readers never take
   from buckets; a save that rewrites history uses a fresh generation). An append that
   fits the tail writes nothing here;
2. publish with one conditional update of the session document, matched on
   ``{_id, version: expected, incarnation}``: it raises the version, pushes the
   appended events onto the tail (or replaces the tail after a seal), sets the event
   count and, for a rewrite, records which generation owns which range of positions
   (``segments``). This single-document write is atomic on every deployment, and it
   is the only moment anything becomes visible;
3. if the update matched nothing, another save won (or the session is gone): delete
   this attempt's own buckets (by its ``writer`` id) and raise.

Readers read the session document (with its tail), then only the (generation, position
range) pairs it publishes, so the buckets of a loser, of a save killed between steps 1
and 2, or of history a rewrite replaced, are never seen even before they are cleaned
up. Two saves racing at one version both write, one wins step 2; the loser's buckets
carry another generation, or (two seals) collide with the winner's on the unique
(session, gen, pos) index, in which case the second writer moves its buckets to a fresh
generation. A transaction where one exists would cost a round trip more on every save
(commit) and a second code path to test, for no gain in safety.

Readers are not isolated from *cleanup*: superseded buckets are deleted once a later
version is published, so a reader that read the previous session document can find
fewer events than it expects. It then reads again (buckets of a published range are
never rewritten in place, only deleted, so a complete read is a consistent one).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any, ClassVar, NamedTuple, NoReturn, TypeVar
from urllib.parse import parse_qs, urlsplit

from agentsessions import (
    BackendAuthenticationError,
    BackendTimeoutError,
    InvalidInputError,
    InvalidOptionError,
    SessionConflictError,
    SessionError,
    SessionExistsError,
    SessionSerializationError,
    SessionSummary,
)
from agentsessions.backend import (
    TOKENS_KEPT,
    Capabilities,
    CompactRequest,
    ErrorRule,
    EventRecord,
    Finding,
    ForkRequest,
    LoadedSession,
    ManagerOptions,
    RewindRequest,
    SaveRequest,
    SessionManager,
    SessionRecord,
    decode_events,
    fork_by_copy,
    refused,
    scrub_secret,
    stamp_lineage,
    to_micros,
    validate_id,
)
from bson import ObjectId
from bson.errors import InvalidDocument
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, ReadPreference
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.common import URI_OPTIONS_VALIDATOR_MAP
from pymongo.errors import (
    BulkWriteError,
    ConfigurationError,
    ConnectionFailure,
    DocumentTooLarge,
    DuplicateKeyError,
    ExecutionTimeout,
    OperationFailure,
    ProtocolError,
    PyMongoError,
)
from pymongo.results import UpdateResult

from . import _diagnosis
from . import _erasure as erasure
from ._buckets import (
    BUCKET_EVENTS,
    TAIL_BYTES,
    Segment,
    assemble,
    bucket_docs,
    doc_texts,
    read_filter,
    read_plan,
    segment_ranges,
    stale_events_filter,
    text_bytes,
)
from ._layout import (
    PENDING,
    Link,
    SessionInfo,
    archive_docs,
    create_indexes,
    expiry_date,
    forks_filter,
    info_of,
    is_expired,
    list_filter,
    live_filter,
    record_of,
    session_doc,
)
from ._options import DEFAULT_DATABASE, MongoOptions, database_name

__all__ = ["DEFAULT_DATABASE", "MongoSessionManager"]

#: A rewrite adds a segment; past this many the newest half is copied into one fresh
#: generation, so reads stay a handful of index ranges and the copy is amortised.
MAX_SEGMENTS = 16
_LOAD_ATTEMPTS = 16
_SAVE_ATTEMPTS = 4
_INFO_CACHE_SIZE = 4096
#: Server error codes meaning "the credentials are wrong": the server is unusable to us.
_AUTH_CODES = frozenset({13, 18})
#: pymongo's URI options, lower-cased: MongoDB treats option names case-insensitively.
_DRIVER_OPTIONS = frozenset(URI_OPTIONS_VALIDATOR_MAP) | {"ssl", "gssapiservicename"}
# BSON's hard limit is 16 MiB per document; an event (or session) document also holds
# its keys and bookkeeping besides the encoded event (or state).
_MAX_DOCUMENT_BYTES = 16 * 1024 * 1024 - 16 * 1024
_TOO_LARGE = "larger than the server's limit of 16,777,216 bytes per BSON document"
# Server error codes meaning "that document is too large to store".
_TOO_LARGE_CODES = frozenset({10334, 17419, 17420})

Doc = dict[str, Any]
W = TypeVar("W", SaveRequest, CompactRequest, RewindRequest)
_SUMMARY_FIELDS = dict.fromkeys(
    ("user_id", "created_at", "updated_at", "event_count", "version", "forked_from"), 1
)


def _too_large(manager: SessionManager, exc: DocumentTooLarge) -> SessionError:
    # pymongo's own check against the server's limit: never holds the payload.
    return SessionSerializationError("document", f"{_TOO_LARGE} ({exc})")


def _refused_document(manager: SessionManager, exc: InvalidDocument) -> SessionError:
    return InvalidInputError(f"MongoDB refused a document: {exc}")


def _refused_write(manager: SessionManager, exc: BulkWriteError) -> SessionError:
    # Its str() holds the documents themselves: report codes and messages only.
    errors = exc.details.get("writeErrors", [])
    if any(error.get("code") in _TOO_LARGE_CODES for error in errors):
        return SessionSerializationError("events", _TOO_LARGE)
    reasons = "; ".join(str(error.get("errmsg", ""))[:200] for error in errors[:3])
    return manager._unavailable(RuntimeError(f"the server refused the write: {reasons}"))


#: Documents the server or pymongo refuses first (a BulkWriteError may carry the timeout
#: flag too), then the driver's "cannot reach or use the server" errors. ``timeout`` is
#: pymongo's own flag for every timeout (server selection, socket, timeoutMS).
_DRIVER_ERRORS = (
    ErrorRule((DocumentTooLarge,), build=_too_large),  # an InvalidDocument: first
    ErrorRule((InvalidDocument,), build=_refused_document),
    ErrorRule((BulkWriteError,), build=_refused_write),
    ErrorRule((PyMongoError,), BackendTimeoutError, when=lambda exc: bool(exc.timeout)),
    ErrorRule((ConnectionFailure, ProtocolError, ExecutionTimeout)),
    ErrorRule(
        (OperationFailure,), BackendAuthenticationError, when=lambda exc: exc.code in _AUTH_CODES
    ),
)


class _TailCut(NamedTuple):
    """What a compaction or rewind leaves of the tail: where it starts, a bound on its
    bytes, and the ``$slice`` that cuts it in place (0: emptied; None: unchanged)."""

    start: int
    size: int
    keep: int | None


class _Landed(Exception):
    """This save's token is already stored: an earlier attempt of it landed."""


class MongoSessionManager(SessionManager):
    """Sessions in MongoDB: ``mongodb://[user:pass@]host[:port][,host...]/[database]``.

    The database is the URL's path (``agentsessions`` when there is none); driver
    options such as ``replicaSet``, ``authSource`` or ``tls`` stay in the URL.
    """

    Options: ClassVar[type[MongoOptions]] = MongoOptions
    driver_errors = _DRIVER_ERRORS
    driver_query_params: ClassVar[frozenset[str]] = _DRIVER_OPTIONS
    capabilities: Capabilities = Capabilities(
        persistent=True,
        shared=True,
        ttl=True,
        namespaces=True,
        max_event_bytes=_MAX_DOCUMENT_BYTES,
        max_state_bytes=_MAX_DOCUMENT_BYTES,
        compaction=True,
        branching=True,
    )
    db_system = "mongodb"
    default_port = 27017

    options: MongoOptions

    def __init__(self, url: str, options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        self.database_name = database_name(url)  # a malformed URL fails at connect()
        # An AsyncMongoClient refuses to be used from a loop other than its first:
        # one client (with its pool and monitors) per event loop.
        self._links = self.per_loop(self._new_link, _close_link, prepare=_prepare)
        # What this manager last saw of each session, so that the save following a
        # get needs no extra read. Entries are facts about (incarnation, version) and
        # are only used when the version matches, so a stale entry costs a read, never
        # correctness.
        self._infos: OrderedDict[str, SessionInfo] = OrderedDict()
        self._infos_lock = threading.Lock()

    # -- plumbing -----------------------------------------------------------------------

    @property
    def _sessions(self) -> AsyncCollection[Doc]:
        return self._links.current().sessions

    @property
    def _events(self) -> AsyncCollection[Doc]:
        return self._links.current().events

    @property
    def _archive(self) -> AsyncCollection[Doc]:
        return self._links.current().archive

    def _forget(self, session_id: str) -> None:
        self._infos.pop(session_id, None)

    def _remember(self, session_id: str, info: SessionInfo) -> None:
        # Threads with their own loops share the cache: its steps must not interleave.
        with self._infos_lock:
            self._infos[session_id] = info
            self._infos.move_to_end(session_id)
            if len(self._infos) > _INFO_CACHE_SIZE:
                self._infos.popitem(last=False)

    async def _new_link(self) -> Link:
        o = self.options
        kwargs: dict[str, Any] = {"tz_aware": True, "tzinfo": timezone.utc}
        # Every driver wait is bounded by the deadline; a shorter one given wins. A
        # connect_timeout alone also bounds finding a server (what else is connecting?).
        # Not timeoutMS: with it pymongo ignores serverSelectionTimeoutMS, so a shorter
        # connect_timeout would not be honoured; the manager enforces the deadline.
        in_url = {name.lower() for name in parse_qs(urlsplit(self._url).query)}
        for name, value in (
            (
                "serverSelectionTimeoutMS",
                o.bounded(o.server_selection_timeout or o.connect_timeout),
            ),
            ("connectTimeoutMS", o.bounded(o.connect_timeout)),
            ("socketTimeoutMS", o.bounded(o.socket_timeout)),
        ):
            if name.lower() not in in_url:  # the URL's own ...MS parameter is kept
                kwargs[name] = max(1, round(value * 1000))
        try:
            client: AsyncMongoClient[Doc] = AsyncMongoClient(self._url, **kwargs)
        except ConfigurationError as exc:
            raise InvalidOptionError(f"{self.url}: {scrub_secret(str(exc), self._url)}") from None
        # Reads go to the primary whatever the URL says: a save must see the latest
        # version, and a get must see the save that just returned.
        database = client.get_database(self.database_name, read_preference=ReadPreference.PRIMARY)
        if not database.write_concern.acknowledged:
            await client.close()
            raise InvalidOptionError(
                f"{self.url}: unacknowledged writes (w=0) cannot tell whether a save "
                "landed; use w=1 or w=majority"
            )
        prefix = f"{o.namespace}_" if o.namespace else ""
        return Link(
            client,
            database[f"{prefix}sessions"],
            database[f"{prefix}events"],
            database[f"{prefix}archive"],
        )

    # -- create / load --------------------------------------------------------------------

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        session_id = validate_id(record.session_id)
        if record.user_id is not None:
            validate_id(record.user_id, "user_id")
        incarnation, gen = ObjectId(), ObjectId()
        await self._insert_session(session_doc(record, incarnation, gen), now)
        info = SessionInfo(
            1, incarnation, ((0, gen, BUCKET_EVENTS),), 0, lineage=record.lineage, tail_start=0
        )
        self._remember(session_id, info)

    async def _insert_session(self, doc: Doc, now: datetime) -> None:
        """Insert a new session document, replacing an expired one with its id.

        `SessionExistsError` if a live session has the id.
        """
        session_id = doc["_id"]
        while True:
            try:
                await self._sessions.insert_one(dict(doc))
                return
            except DuplicateKeyError:
                pass
            old = await self._sessions.find_one(
                {"_id": session_id}, {"incarnation": 1, "expires_at": 1}
            )
            if old is None:
                continue  # deleted since our insert failed: try again
            if not is_expired(old, now):
                raise SessionExistsError(session_id) from None
            replaced = await self._sessions.replace_one(
                # Still the expired (or pending) document we read: an exact match.
                {
                    "_id": session_id,
                    "incarnation": old["incarnation"],
                    "expires_at": old["expires_at"],
                },
                doc,
            )
            if replaced.matched_count:
                # The expired incarnation can never be written again: its events go.
                lives = {"session": session_id, "incarnation": old["incarnation"]}
                await self._quietly(erasure.forget_lives(self._links.current(), lives))
                return

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        """The session document first, pending (invisible), then the events, then one
        update that gives it its real expiry: the publish, atomic like a save's.

        The document exists before any event is written, so cleanup that deletes the
        events of vanished incarnations never takes ours. Whoever takes the id
        meanwhile (a create replaces an invisible document) wins, and this restore
        raises `SessionExistsError`. Pending is not a date, so the TTL monitor never
        deletes the document: one that deletes from a snapshot taken before the publish
        would lose a restore that reported success. A kill before the publish leaves a
        pending document and events for `purge_expired`, never a visible session.
        """
        session_id = validate_id(record.session_id)
        if record.user_id is not None:
            validate_id(record.user_id, "user_id")
        for _ in range(_SAVE_ATTEMPTS):
            incarnation, gen = ObjectId(), ObjectId()
            doc = session_doc(record, incarnation, gen)
            info = SessionInfo(
                record.version,
                incarnation,
                ((0, gen, BUCKET_EVENTS),),
                record.event_count,
                lineage=record.lineage,
                tail_start=record.event_count,
            )
            if not events:  # nothing to write before the publish: it is the insert
                await self._insert_session(doc, now)
                self._remember(session_id, info)
                return
            doc["expires_at"] = PENDING
            await self._insert_session(doc, now)
            mine = {"session": session_id, "incarnation": incarnation}
            try:
                texts = [event.data for event in events]
                docs = bucket_docs(
                    session_id, incarnation, record.version, gen, ObjectId(), 0, texts
                )
                if not await self._insert(docs):
                    raise AssertionError(f"generation {gen} of {session_id!r} had events")
                published = await self._sessions.update_one(
                    {"_id": session_id, "incarnation": incarnation},
                    {"$set": {"expires_at": expiry_date(record.expires_at)}},
                )
            except BaseException:
                await self._quietly(
                    self._sessions.delete_one({"_id": session_id, "incarnation": incarnation})
                )
                await self._quietly(self._events.delete_many(mine))
                raise
            if published.matched_count:
                self._remember(session_id, info)
                return
            await self._quietly(self._events.delete_many(mine))
            current = await self._sessions.find_one({"_id": session_id}, {"expires_at": 1})
            # Another restore's pending document took the id: that restore wins, as a
            # live session would. Retrying would take it back and the two would keep
            # undoing each other until both gave up.
            if current is not None and (
                not is_expired(current, now) or current.get("expires_at") == PENDING
            ):
                raise SessionExistsError(session_id)
            # Deleted or purged while pending (it looked expired): write it again.
        raise self._unavailable(
            RuntimeError(f"session {session_id!r} kept vanishing while being restored")
        )

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        return await self._read_session(session_id, now, last_events=last_events)

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        return await self._read_session(session_id, now, since=(event_count, lineage))

    async def _read_session(
        self,
        session_id: str,
        now: datetime,
        *,
        last_events: int | None = None,
        since: tuple[int, str] | None = None,
    ) -> LoadedSession | None:
        """The document, then the events it publishes from the first one wanted: the
        newest *last_events*, or those after a copy of *since* (count, lineage) while
        the stored lineage is that one, or all."""
        validate_id(session_id)
        for _ in range(_LOAD_ATTEMPTS):
            doc = await self._sessions.find_one({"_id": session_id})
            if doc is None or is_expired(doc, now):
                self._infos.pop(session_id, None)
                return None
            info = info_of(doc)
            self._remember(session_id, info)
            record, count = record_of(doc), info.event_count
            if since is not None:
                low = record.since_position(*since)
            else:
                low = 0 if last_events is None else max(0, count - last_events)
            texts = await self._read_texts(session_id, info, low, count, doc.get("tail", ()))
            if texts is not None:
                return LoadedSession(record, decode_events(texts))
            # A save published since we read the session document and its cleanup
            # removed events of the version we read: read the new version.
        raise self._unavailable(
            RuntimeError(
                f"session {session_id!r}: its events kept changing or are missing "
                f"(read {_LOAD_ATTEMPTS} times)"
            )
        )

    async def _read_texts(
        self,
        session_id: str,
        info: SessionInfo,
        low: int,
        high: int,
        tail: Sequence[str] | None = None,
    ) -> list[str] | None:
        """The event texts of positions [low, high) as *info* publishes them: from the
        buckets before the tail, then from *tail* (the session document's, read again
        at *info*'s version when not given).

        None when some are missing: a later save's cleanup (or publish) got there first.
        """
        ts = info.start_of_tail
        low, high = info.first + low, info.first + high
        texts: list[str] = []
        stop = min(high, ts)
        if low < stop:
            # The range is known exactly, so this is a bounded index scan of just the
            # buckets wanted (no "sort desc, limit n" needed to find the newest).
            plan = read_plan(info.segments, ts, low, stop)
            cursor = self._events.find(
                read_filter(session_id, plan), {"_id": 0, "gen": 1, "pos": 1, "data": 1}
            ).sort("pos", ASCENDING)
            found = assemble(plan, await cursor.to_list(None))
            if found is None or len(found) != stop - low:
                return None
            texts = found
        if high > ts:
            if tail is None:
                tail = await self._tail_texts(session_id, info)
            if tail is None or len(tail) != info.tail_count:
                return None
            texts.extend(tail[max(low, ts) - ts : high - ts])
        return texts

    async def _tail_texts(self, session_id: str, info: SessionInfo) -> list[str] | None:
        """The tail stored at *info*'s version; None once the session has moved on."""
        doc = await self._sessions.find_one(
            {"_id": session_id, "incarnation": info.incarnation, "version": info.version},
            {"_id": 0, "tail": 1},
        )
        return None if doc is None else list(doc.get("tail", ()))

    async def _covering(
        self, session_id: str, info: SessionInfo, at: int
    ) -> tuple[int, list[str]] | None:
        """Where the bucket holding stored position *at* begins, and its texts from there.

        ``(at, [])`` when *at* begins a bucket, or lies in the tail. A history cut at *at*
        (a rewrite, a rewind, a compaction) rewrites the rest of that bucket, so that no
        document ever straddles the start of a segment. None when the bucket is gone: a
        later publish's cleanup took it.
        """
        ts = info.start_of_tail
        if at >= ts:
            return at, []
        owner = [item for item in segment_ranges(info.segments, ts) if item[1] <= at < item[2]]
        if not owner:
            return at, []
        gen, start, _, span = owner[0]
        if at == start or span == 1:
            return at, []
        doc = await self._events.find_one(
            {"session": session_id, "gen": gen, "pos": {"$gt": at - span, "$lte": at}},
            {"_id": 0, "pos": 1, "data": 1},
            sort=[("pos", DESCENDING)],
        )
        if doc is None:
            return None
        first, texts = doc["pos"], doc_texts(doc)
        if first + len(texts) <= at:
            return None
        if first < start:  # a leftover of an earlier cut that cleanup has not reached
            texts, first = texts[start - first :], start
        return first, texts

    # -- save -----------------------------------------------------------------------------

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        validate_id(request.session_id)
        await self._publish(self._try_save, request, now)

    async def _publish(
        self,
        attempt: Callable[[W, SessionInfo, datetime], Awaitable[bool]],
        request: W,
        now: datetime,
    ) -> None:
        """Run one save or compaction *attempt* until it publishes (see the module's doc)."""
        for _ in range(_SAVE_ATTEMPTS):
            try:
                cached = self._infos.get(request.session_id)
                if cached is None or not request.expects(cached.version, cached.lineage):
                    cached = await self._stored_info(request, now)
                if await attempt(request, cached, now):
                    return
            except _Landed:
                return
        raise SessionConflictError(
            request.session_id, request.expected_version, "the session was replaced meanwhile"
        )

    async def _stored_info(
        self, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> SessionInfo:
        """The stored session as *request* expects it; `_Landed` if its token is stored,
        else the contract error of a session gone or at another version."""
        doc = await self._sessions.find_one({"_id": request.session_id}, {"state": 0, "tail": 0})
        if doc is not None and request.token in doc.get("tokens", ()):
            raise _Landed
        if doc is None or is_expired(doc, now):
            raise refused(request, live=False)
        info = info_of(doc)
        self._remember(request.session_id, info)
        if not request.expects(info.version, info.lineage):
            # Another version, or the expected one of another life of the id.
            raise refused(request, live=True)
        return info

    async def _try_save(self, request: SaveRequest, info: SessionInfo, now: datetime) -> bool:
        """One attempt; False when the session was re-created meanwhile (try again).

        An append that fits in the tail writes nothing before its publish: its events
        are ``$push``ed by the very update that checks the version. One that does not
        fit *seals* the tail: the tail and the new events go to full buckets first, and
        the publish replaces the tail with what is left over. A cut inside the tail
        rewrites the tail in the publish; a rewrite reaching before the tail writes a
        fresh generation (see `_write_generation`) and empties the tail.
        """
        record = request.record
        session_id = record.session_id
        writer = ObjectId()
        keep = info.first + request.keep  # the stored position of the first new event
        ts = info.start_of_tail
        new_texts = [event.data for event in request.new_events]
        segments = info.segments
        written: tuple[ObjectId, int] | None = None  # (gen, first position) we wrote
        update: Doc = {
            "state": record.state,
            "version": record.version,
            "updated_at": to_micros(record.updated_at),
            "expires_at": expiry_date(record.expires_at),
            "event_count": record.event_count,
            "lineage": stamp_lineage(record.lineage, record.version),
        }
        # The token lands with the version (see SaveRequest); the latest are kept.
        push: Doc = {"tokens": {"$each": [request.token], "$slice": -TOKENS_KEPT}}
        tail_start, tail_bytes = info.tail_start, info.tail_bytes
        if keep < ts:
            segments, written = await self._write_generation(
                request, info, writer, keep, new_texts, now
            )
            update["tail"], tail_start, tail_bytes = [], keep + len(new_texts), 0
        else:
            new_bytes = sum(map(text_bytes, new_texts))
            size = info.tail_bytes + new_bytes
            if keep == info.end and _fits_tail(
                info.tail_count + len(new_texts), size, record.state
            ):
                if new_texts:
                    push["tail"] = {"$each": new_texts}
                tail_start, tail_bytes = ts, size
            else:
                # Cut inside the tail, or the tail can no longer hold it (with this state).
                stored_tail = await self._tail_texts(session_id, info)
                if stored_tail is None:
                    self._infos.pop(session_id, None)
                    return await self._explain_failed_publish(request, now)
                head = stored_tail[: keep - ts]
                size = sum(map(text_bytes, head)) + new_bytes
                if _fits_tail(len(head) + len(new_texts), size, record.state):
                    update["tail"] = head + new_texts
                    tail_start, tail_bytes = ts, size
                else:
                    # Whole buckets are sealed; what is left over starts the next tail.
                    texts = head + new_texts
                    cut = len(texts) - len(texts) % BUCKET_EVENTS
                    rest = texts[cut:]
                    size = sum(map(text_bytes, rest))
                    if not cut or not _fits_tail(len(rest), size, record.state):
                        cut, rest, size = len(texts), [], 0
                    segments, written = await self._seal(request, info, writer, texts[:cut], now)
                    update["tail"], tail_start, tail_bytes = rest, ts + cut, size
        update["tail_start"] = info.start_of_tail if tail_start is None else tail_start
        update["tail_bytes"] = tail_bytes
        # A document from before buckets gets its segments in the new form too: a
        # release from before buckets then fails on it, instead of missing the tail.
        if segments != info.segments or info.tail_start is None:
            update["segments"] = [list(segment) for segment in segments]
        published = await self._sessions.update_one(
            {
                "_id": session_id,
                "version": request.expected_version,
                "incarnation": info.incarnation,
                **_lineage_filter(request),
                **live_filter(now),
            },
            {"$set": update, "$push": push},
        )
        if not published.matched_count:
            if written is not None:
                await self._quietly(self._discard(session_id, written[0], written[1], writer))
            self._infos.pop(session_id, None)
            return await self._explain_failed_publish(request, now)
        stored = SessionInfo(
            record.version,
            info.incarnation,
            segments,
            record.event_count,
            info.first,
            record.lineage,
            update["tail_start"],
            tail_bytes,
        )
        self._remember(session_id, stored)
        if segments != info.segments:
            await self._quietly(
                self._events.delete_many(
                    stale_events_filter(
                        session_id, info.incarnation, segments, stored.start_of_tail, record.version
                    )
                )
            )
        return True

    async def _seal(
        self,
        request: SaveRequest,
        info: SessionInfo,
        writer: ObjectId,
        texts: list[str],
        now: datetime,
    ) -> tuple[tuple[Segment, ...], tuple[ObjectId, int] | None]:
        """Write *texts* (the tail's positions on) as buckets; the segments that publish them.

        They go to the current generation, where the tail starts, unless a bucket is
        already there: one of a save racing us at this version, or left by one that died
        before publishing. We cannot tell which, and must not delete the other writer's
        buckets, so ours move to a fresh generation; whichever save publishes decides.
        The per-event layout's generations (another span) get no buckets either.
        """
        ts = info.start_of_tail
        if not texts:  # an empty tail that only a too large state pushed out
            return info.segments, None
        _, gen, span = info.segments[-1]
        if span == BUCKET_EVENTS:
            docs = bucket_docs(
                request.session_id, info.incarnation, info.version, gen, writer, ts, texts
            )
            if await self._insert(docs):
                return info.segments, (gen, ts)
            await self._discard(request.session_id, gen, ts, writer)
        return await self._write_generation(request, info, writer, ts, texts, now)

    async def _write_generation(
        self,
        request: SaveRequest,
        info: SessionInfo,
        writer: ObjectId,
        at: int,
        texts: list[str],
        now: datetime,
    ) -> tuple[tuple[Segment, ...], tuple[ObjectId, int] | None]:
        """Write *texts* from stored position *at* on under a fresh generation; the
        segments that publish them.

        The fresh generation owns positions from the start of the bucket holding *at*
        on (it gets that bucket's events before *at* too), so the events it replaces
        stay readable under their own generation until the publish. When the segment
        list grows past `MAX_SEGMENTS`, the newer half of the kept events is copied
        into the fresh generation too.
        """
        session_id = request.record.session_id
        covering = await self._covering(session_id, info, at)
        if covering is None:
            await self._lost(request, now)
        begin, head = covering[0], covering[1][: at - covering[0]]
        gen = ObjectId()
        kept = [segment for segment in info.segments if segment[0] < begin]
        start = begin
        if len(kept) >= MAX_SEGMENTS:
            half = MAX_SEGMENTS // 2
            start = kept[half][0]
            kept = kept[:half]
        written: list[str] = []
        if start < begin:
            copied = await self._read_texts(
                session_id, info, start - info.first, begin - info.first
            )
            if copied is None:
                await self._lost(request, now)
            written.extend(copied)
        written.extend(head)
        written.extend(texts)
        segments = (*kept, (start, gen, BUCKET_EVENTS))
        if not written:
            return segments, None  # a pure truncation: nothing to write
        docs = bucket_docs(session_id, info.incarnation, info.version, gen, writer, start, written)
        if not await self._insert(docs):
            raise AssertionError(f"generation {gen} of session {session_id!r} already had events")
        return segments, (gen, start)

    async def _lost(
        self, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> NoReturn:
        """A read of events this request's version publishes came back short: only a
        publish after that version removes them, so the request has lost. Say so the
        usual way (`_Landed` if it is an earlier attempt of this very request)."""
        self._infos.pop(request.session_id, None)
        if await self._explain_failed_publish(request, now):
            raise _Landed
        raise SessionConflictError(request.session_id, request.expected_version)

    # -- compaction -------------------------------------------------------------------------

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        validate_id(request.session_id)
        await self._publish(self._try_compact, request, now)

    async def _publish_rewrite(
        self,
        session_id: str,
        request: CompactRequest | RewindRequest,
        info: SessionInfo,
        segments: Sequence[Segment],
        now: datetime,
        archive_writer: ObjectId | None,
        tail: _TailCut,
        *,
        first: int | None = None,
    ) -> UpdateResult:
        """Publish a compaction's or rewind's new session document, only over the version,
        incarnation and lineage the request read: the new segments (and *first*, when the
        head moved), what is left of the tail, the request's token, and the archive
        written by *archive_writer*."""
        update: Doc = {
            "version": request.version,
            "updated_at": to_micros(request.updated_at),
            "expires_at": expiry_date(request.expires_at),
            "event_count": request.event_count,
            "lineage": stamp_lineage(request.lineage, request.version),
            "tail_start": tail.start,
            "tail_bytes": tail.size,
        }
        if first is not None:
            update["first"] = first
        update["segments"] = [list(segment) for segment in segments]
        push: Doc = {"tokens": {"$each": [request.token], "$slice": -TOKENS_KEPT}}
        if tail.keep == 0:
            update["tail"] = []
        elif tail.keep is not None:
            # Cut in place: the texts need not travel (a negative count keeps the end).
            push["tail"] = {"$each": [], "$slice": tail.keep}
        if archive_writer is not None:
            push["archives"] = archive_writer
        return await self._sessions.update_one(
            {
                "_id": session_id,
                "version": request.expected_version,
                "incarnation": info.incarnation,
                **_lineage_filter(request),
                **live_filter(now),
            },
            {"$set": update, "$push": push},
        )

    async def _try_compact(self, request: CompactRequest, info: SessionInfo, now: datetime) -> bool:
        """One attempt, published like a save's; False when the session was re-created.

        The new events take the stored positions just before the cut under a fresh
        generation, the kept generations' segments start at the cut, and ``first``
        moves to the first new event: only the head is written or deleted. A cut inside
        a bucket copies that bucket's kept events into the fresh generation too; a cut
        inside the tail drops the tail's head in place.
        """
        session_id = request.session_id
        writer = ObjectId()
        cut = info.first + request.replaced
        new_first = cut - len(request.new_events)
        ts = info.start_of_tail
        archived = False
        if request.archive:
            texts = await self._read_texts(session_id, info, 0, request.replaced)
            if texts is None:  # a later publish's cleanup: this compaction has lost
                await self._lost(request, now)
            docs = archive_docs(session_id, info.incarnation, writer, request.version, texts)
            await self._archive.insert_many(docs, ordered=True)
            archived = True
        written = [event.data for event in request.new_events]
        kept: list[Segment] = []
        if cut >= ts:
            left = info.end - cut
            tail = _TailCut(cut, info.tail_bytes if left else 0, None)
            if left < info.tail_count:
                tail = _TailCut(cut, tail.size, -left if left else 0)
        else:
            covering = await self._covering(session_id, info, cut)
            if covering is None:
                if archived:
                    await self._quietly(self._archive.delete_many({"writer": writer}))
                await self._lost(request, now)
            begin, bucket = covering
            written.extend(bucket[cut - begin :])
            resume = begin + len(bucket) if bucket else cut
            for kept_gen, start, end, span in segment_ranges(info.segments, ts):
                if end > resume:
                    kept.append((max(start, resume), kept_gen, span))
            tail = _TailCut(ts, info.tail_bytes, None)
        segments: list[Segment] = []
        gen: ObjectId | None = None
        if written:
            gen = ObjectId()
            docs = bucket_docs(
                session_id, info.incarnation, info.version, gen, writer, new_first, written
            )
            if not await self._insert(docs):
                raise AssertionError(f"generation {gen} of session {session_id!r} had events")
            segments.append((new_first, gen, BUCKET_EVENTS))
        segments.extend(kept)
        if not segments:  # no buckets left at all: seals need a generation to write in
            segments.append((new_first, ObjectId(), BUCKET_EVENTS))
        published = await self._publish_rewrite(
            session_id,
            request,
            info,
            segments,
            now,
            writer if archived else None,
            tail,
            first=new_first,
        )
        if not published.matched_count:
            if gen is not None:
                await self._quietly(self._discard(session_id, gen, new_first, writer))
            if archived:
                await self._quietly(self._archive.delete_many({"writer": writer}))
            self._infos.pop(session_id, None)
            return await self._explain_failed_publish(request, now)
        stored = SessionInfo(
            request.version,
            info.incarnation,
            tuple(segments),
            request.event_count,
            new_first,
            request.lineage,
            tail.start,
            tail.size,
        )
        self._remember(session_id, stored)
        await self._quietly(
            self._events.delete_many(
                stale_events_filter(
                    session_id, info.incarnation, segments, tail.start, request.version
                )
            )
        )
        return True

    # -- branching ---------------------------------------------------------------------------

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        # MongoDB has no atomic copy between a session's documents and another's short of
        # a multi-document transaction (which a standalone server lacks): the fork is the
        # source's one consistent load, stored with the restore's pending-then-publish.
        validate_id(request.session_id)
        return await fork_by_copy(self, request, now)

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        validate_id(request.session_id)
        await self._publish(self._try_rewind, request, now)

    async def _try_rewind(self, request: RewindRequest, info: SessionInfo, now: datetime) -> bool:
        """One attempt, published like a save's; False when the session was re-created.

        A pure truncation, and the archive, when asked, gets the dropped events first,
        tagged like a compaction's. A cut inside the tail drops its end in place; a cut
        before it gives the positions from the cut's bucket on to a fresh generation
        (holding that bucket's kept events), so that a seal after the rewind never meets
        a dropped bucket not yet cleaned up, and the tail is emptied.
        """
        session_id = request.session_id
        writer = ObjectId()
        cut = info.first + request.keep
        ts = info.start_of_tail
        archived = False
        if request.archive and request.keep < info.event_count:
            texts = await self._read_texts(session_id, info, request.keep, info.event_count)
            if texts is None:  # a later publish's cleanup: this rewind has lost
                await self._lost(request, now)
            docs = archive_docs(session_id, info.incarnation, writer, request.version, texts)
            await self._archive.insert_many(docs, ordered=True)
            archived = True
        segments = info.segments
        written: tuple[ObjectId, int] | None = None
        if cut >= ts:
            left = cut - ts
            tail = _TailCut(ts, info.tail_bytes if left else 0, left)
        else:
            covering = await self._covering(session_id, info, cut)
            if covering is None:
                if archived:
                    await self._quietly(self._archive.delete_many({"writer": writer}))
                await self._lost(request, now)
            begin, bucket = covering
            gen = ObjectId()
            segments = (
                *(segment for segment in segments if segment[0] < begin),
                (begin, gen, BUCKET_EVENTS),
            )
            if begin < cut:
                docs = bucket_docs(
                    session_id,
                    info.incarnation,
                    info.version,
                    gen,
                    writer,
                    begin,
                    bucket[: cut - begin],
                )
                if not await self._insert(docs):
                    raise AssertionError(f"generation {gen} of session {session_id!r} had events")
                written = (gen, begin)
            tail = _TailCut(cut, 0, 0)
        published = await self._publish_rewrite(
            session_id, request, info, segments, now, writer if archived else None, tail
        )
        if not published.matched_count:
            if written is not None:
                await self._quietly(self._discard(session_id, written[0], written[1], writer))
            if archived:
                await self._quietly(self._archive.delete_many({"writer": writer}))
            self._infos.pop(session_id, None)
            return await self._explain_failed_publish(request, now)
        stored = SessionInfo(
            request.version,
            info.incarnation,
            segments,
            request.event_count,
            info.first,
            request.lineage,
            tail.start,
            tail.size,
        )
        self._remember(session_id, stored)
        if segments != info.segments:
            await self._quietly(
                self._events.delete_many(
                    stale_events_filter(
                        session_id, info.incarnation, segments, tail.start, request.version
                    )
                )
            )
        return True

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        docs = (
            await self._sessions.find(forks_filter(source_id, user_id, after, now), _SUMMARY_FIELDS)
            .sort([("created_at", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [record_of({**doc, "state": ""}).summary() for doc in docs]

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        validate_id(session_id)
        doc = await self._sessions.find_one(
            {"_id": session_id}, {"incarnation": 1, "archives": 1, "expires_at": 1}
        )
        if doc is None or is_expired(doc, now) or not doc.get("archives"):
            return []
        cursor = self._archive.find(
            {
                "session": session_id,
                "incarnation": doc["incarnation"],
                "writer": {"$in": doc["archives"]},
            },
            {"_id": 0, "data": 1},
        ).sort([("at", ASCENDING), ("pos", ASCENDING)])
        return [item["data"] async for item in cursor]

    async def _insert(self, docs: list[Doc]) -> bool:
        """Insert in order; False if a position of this generation is already taken."""
        try:
            await self._events.insert_many(docs, ordered=True)
        except BulkWriteError as exc:
            errors = exc.details.get("writeErrors", [])
            if errors and all(error.get("code") == 11000 for error in errors):
                return False
            raise
        return True

    async def _discard(self, session_id: str, gen: ObjectId, first: int, writer: ObjectId) -> None:
        """Delete what one save attempt wrote (it was never published, and never will be).

        Its first bucket goes last: while any of its buckets is left, the one at *first*
        is too, so a seal there collides and moves on (see `_seal`)."""
        mine = {"session": session_id, "gen": gen, "writer": writer}
        await self._events.delete_many({**mine, "pos": {"$gt": first}})
        await self._events.delete_many({**mine, "pos": first})

    async def _explain_failed_publish(
        self, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> bool:
        """Why the conditional update matched nothing: True if *request* landed before
        (an earlier attempt of this very save), False if worth retrying; else raise."""
        try:
            await self._stored_info(request, now)
        except _Landed:
            return True
        return False  # same version, another incarnation: deleted and re-created meanwhile

    # -- delete / list / purge ----------------------------------------------------------------

    async def _delete(self, session_id: str, now: datetime) -> bool:
        validate_id(session_id)
        self._forget(session_id)
        return await erasure.delete_session(self._links.current(), session_id, now)

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        validate_id(user_id, "user_id")
        return await erasure.delete_user(self._links.current(), user_id, now, self._forget)

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        if user_id is not None:
            validate_id(user_id, "user_id")
        docs = (
            await self._sessions.find(list_filter(user_id, after, now), _SUMMARY_FIELDS)
            .sort([("created_at", DESCENDING), ("_id", DESCENDING)])
            .limit(limit)
            .to_list(None)
        )
        return [record_of({**doc, "state": ""}).summary() for doc in docs]

    async def _diagnose(self, now: datetime) -> list[Finding]:
        return await _diagnosis.diagnose(self._links.current(), self.encryption is not None)

    async def _purge_expired(self, now: datetime) -> int:
        """Delete expired sessions with their events, then events no session owns (see
        `erasure.purge_expired`: it scans the events collection; run it as upkeep)."""
        return await erasure.purge_expired(self._links.current(), now, self._forget)


async def _close_link(link: Link) -> None:
    await link.client.close()


async def _prepare(link: Link) -> None:
    await create_indexes(link.sessions, link.events, link.archive)


def _fits_tail(count: int, size: int, state: str) -> bool:
    """Whether a tail of *count* events, *size* bytes of text, stays inline in a session
    document holding *state*: the tail's own bounds, and the document's."""
    if count > BUCKET_EVENTS or size > TAIL_BYTES:
        return False
    return 4 * len(state) + size <= _MAX_DOCUMENT_BYTES or (
        text_bytes(state) + size <= _MAX_DOCUMENT_BYTES
    )


def _lineage_filter(request: SaveRequest | CompactRequest | RewindRequest) -> Doc:
    """The publish filter's lineage clause: none when the request names no lineage."""
    if not request.expected_lineage:
        return {}
    return {"lineage": stamp_lineage(request.expected_lineage, request.expected_version)}
