"""What a backend stores and is handed: plain records, already validated and encoded.

A backend never sees a `Session` object. `SessionManager` validates ids, checks that
values are JSON, encodes them and works out what changed; the backend only moves
these records in and out of its engine atomically. Keeping that split is what makes
every backend behave the same and a new backend a few hundred lines.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import pydantic_core

from . import _json
from ._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionError,
    SessionNotFoundError,
    SessionSerializationError,
)
from ._models import Event, ForkOrigin, SessionSummary
from ._tracking import LazyEvents, StoredEvents

__all__ = [
    "Capabilities",
    "CompactRequest",
    "EventRecord",
    "ForkRequest",
    "LoadedSession",
    "RewindRequest",
    "SaveRequest",
    "SessionRecord",
    "TOKENS_KEPT",
    "decode_cursor",
    "decode_events",
    "decode_record",
    "decode_summary",
    "encode_record",
    "expiry_millis",
    "fork_fields",
    "fork_origin",
    "refused",
    "encode_cursor",
    "from_micros",
    "stamp_lineage",
    "to_micros",
    "unstamp_lineage",
]

#: How many of a session's latest save tokens a backend keeps (see `SaveRequest`): a
#: retry is recognised as long as fewer saves than this landed after it.
TOKENS_KEPT = 32

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(when: datetime) -> int:
    """Integer microseconds since the epoch, for engines that store timestamps as numbers.

    Exact (timedelta arithmetic; a float timestamp loses microseconds past 2**53) and
    ordered like the datetimes, so an index on it sorts sessions correctly.
    """
    return (when - _EPOCH) // _MICROSECOND


def expiry_millis(when: datetime) -> int:
    """*when* in epoch milliseconds rounded up, for engines that expire data by the
    millisecond: a session must never vanish before its time."""
    return -(-to_micros(when) // 1000)


def from_micros(value: int) -> datetime:
    """The timezone-aware UTC datetime `to_micros` encoded."""
    return _EPOCH + timedelta(microseconds=value)


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend supports beyond the mandatory operations; the kit reads these.

    ``persistent``: data survives closing the manager and connecting again.
    ``shared``: two managers connected to one URL see one store (so the kit can race
    them against each other, not only tasks on one manager).
    ``ttl``: the ``ttl`` option expires sessions.
    ``namespaces``: the ``namespace`` option isolates applications on one server.
    ``max_event_bytes``: the largest encoded event the backend stores, if it has a limit.
    ``max_state_bytes``: the largest encoded state, if it has a limit. The manager
    refuses anything larger with `SessionTooLargeError` before any I/O.
    ``compaction``: the backend implements `SessionManager._compact` (and its archive).
    ``branching``: the backend implements `SessionManager._fork`, ``_rewind`` and
    ``_list_forks`` (`SessionManager.fork`, `rewind`, ``list_sessions(forked_from=...)``).
    """

    persistent: bool = False
    shared: bool = False
    ttl: bool = True
    namespaces: bool = True
    max_event_bytes: int | None = None
    max_state_bytes: int | None = None
    compaction: bool = False
    branching: bool = False


@dataclass(frozen=True, slots=True)
class SessionRecord:
    """One session's row: everything but its events. ``state`` is JSON text.

    ``lineage`` names the stored history: the manager renews it whenever events are
    removed or replaced (a truncating save) and when the session is created or
    restored, and keeps it for a save that only appends. A backend stores what it is
    given with every create, restore and save, and returns it with every load; while
    it is unchanged, the events a copy holds are still the stored ones, so a retry may
    fetch only the events after them (`SessionManager._load_since`). "" means unknown:
    such a copy is always reloaded whole, so a backend that does not store it is
    merely slower on conflicts, never wrong.
    """

    session_id: str
    user_id: str | None
    state: str
    version: int
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    event_count: int
    lineage: str = ""
    #: Where a fork came from (`SessionManager.fork`); stored by `_fork` and `_restore`,
    #: returned by every load and listing, never changed by a save.
    forked_from: ForkOrigin | None = None

    def since_position(self, event_count: int, lineage: str) -> int:
        """Where `SessionManager._load_since` starts reading for a caller holding
        *event_count* events of *lineage*: *event_count* while this record has that
        lineage and at least that many events (the caller's events are still the
        stored ones), else 0 (every event)."""
        return event_count if self.lineage == lineage and self.event_count >= event_count else 0

    def summary(self) -> SessionSummary:
        """This record as `SessionManager.list_sessions` reports it."""
        return SessionSummary(
            session_id=self.session_id,
            user_id=self.user_id,
            created_at=self.created_at,
            updated_at=self.updated_at,
            event_count=self.event_count,
            version=self.version,
            forked_from=self.forked_from,
        )


def fork_origin(
    source: str | bytes | None, version: int | str | bytes | None, event_id: str | bytes | None
) -> ForkOrigin | None:
    """The `ForkOrigin` an engine stored as three nullable fields (source id, its version,
    the cut event id), or None when the session is no fork (no source)."""
    if source is None or version is None:
        return None
    return ForkOrigin.model_construct(
        session_id=_text(source),
        version=int(version if isinstance(version, int) else _text(version)),
        event_id=None if event_id is None else _text(event_id),
    )


def decode_record(fields: Sequence[Any]) -> SessionRecord:
    """A `SessionRecord` from an engine's row, given in the record's field order.

    Text may come as str or UTF-8 bytes, numbers as ints or their digits, timestamps
    as datetimes or `to_micros` integers; a missing owner or expiry is None. The
    lineage may be left out or None (then it is "", unknown); it may be followed by
    the three fields of `fork_origin` (source id, version, cut event id).
    """
    session_id, user_id, state, version, created, updated, expires, count, *rest = fields
    lineage = rest[0] if rest else None
    origin = fork_origin(*rest[1:4]) if len(rest) >= 4 else None
    return SessionRecord(
        _text(session_id),
        None if user_id is None else _text(user_id),
        _text(state),
        int(version),
        _when(created),
        _when(updated),
        None if expires is None else _when(expires),
        int(count),
        "" if lineage is None else _text(lineage),
        origin,
    )


def encode_record(record: SessionRecord, *, micros: bool = False) -> tuple[Any, ...]:
    """*record*'s fields in its field order, for an engine's insert (`decode_record`'s
    inverse); with *micros*, timestamps as `to_micros` integers."""
    times: tuple[Any, ...] = (record.created_at, record.updated_at, record.expires_at)
    if micros:
        times = tuple(None if when is None else to_micros(when) for when in times)
    head = (record.session_id, record.user_id, record.state, record.version)
    return (*head, *times, record.event_count, record.lineage)


def stamp_lineage(lineage: str, version: int) -> str:
    """*lineage* as an engine stores it beside the version it was written at,
    ``"<lineage>:<version>"``, where an older release's save could leave the field as it
    was: `unstamp_lineage` then finds another version and reads "" (unknown, a full
    reload), never a stale lineage that would pass for an append."""
    return f"{lineage}:{version}"


def unstamp_lineage(stored: str | bytes | None, version: int | str | bytes | None) -> str:
    """The lineage `stamp_lineage` stored, if it was written at *version* (the stored
    version, as a number or its digits); else, or when either is missing, "" (unknown)."""
    if stored is None or version is None:
        return ""
    at = str(version) if isinstance(version, int) else _text(version)
    lineage, _, written_at = _text(stored).rpartition(":")
    return lineage if written_at == at else ""


def decode_summary(fields: Sequence[Any]) -> SessionSummary:
    """A `SessionSummary` from an engine's row in its field order, as `decode_record`
    (the three fields of `fork_origin` may follow)."""
    session_id, user_id, created, updated, count, version, *origin = fields
    return SessionSummary(
        _text(session_id),
        None if user_id is None else _text(user_id),
        _when(created),
        _when(updated),
        int(count),
        int(version),
        fork_origin(*origin) if len(origin) == 3 else None,
    )


def fork_fields(record: SessionRecord) -> tuple[str | None, int | None, str | None]:
    """*record*'s ``forked_from`` as the three nullable fields `fork_origin` reads."""
    origin = record.forked_from
    if origin is None:
        return (None, None, None)
    return (origin.session_id, origin.version, origin.event_id)


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode()


def _when(value: datetime | int | bytes) -> datetime:
    return value if isinstance(value, datetime) else from_micros(int(value))


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One event at its position (0-based) in the session; ``data`` is the whole event as JSON."""

    position: int
    data: str


@dataclass(frozen=True, slots=True)
class LoadedSession:
    """What a backend returns from a load: the record and the events it read.

    ``events`` are the newest ``len(events)`` events in order, so the first one sits
    at position ``record.event_count - len(events)`` (from `SessionManager._load_since`:
    either all of them or exactly those after the caller's copy).
    """

    record: SessionRecord
    events: list[Event]


@dataclass(frozen=True, slots=True)
class SaveRequest:
    """One atomic save, expressed as "keep a prefix, replace the rest".

    Apply it all or nothing, and only if the stored version is still
    ``expected_version`` and, when ``expected_lineage`` is not "", the stored lineage
    is still ``expected_lineage`` (else raise `SessionConflictError`; if the session
    is not stored or has expired, `SessionNotFoundError`):

    1. delete the events at positions ``>= keep`` (none when ``keep == stored_event_count``,
       the common case of a plain append: skip the statement),
    2. insert ``new_events`` (their positions start at ``keep``),
    3. write ``record`` (new version, state, updated_at, expires_at, event_count).

    ``token`` makes it idempotent: store it atomically with the version the save
    creates, keep the tokens of at least the last `TOKENS_KEPT` saves of the session,
    and check them FIRST: a request whose token is already stored landed before (its
    first attempt failed ambiguously) and succeeds at once without writing anything.

    ``expected_lineage`` is the `SessionRecord.lineage` the copy was loaded with. The
    manager renews the lineage at every create and restore, so it tells the lives of
    an id apart: a copy of an earlier life (the id was deleted or expired, then
    created again) is stale even where its version number matches the new life's,
    and only the lineage check refuses it. "" (a copy that does not know it) skips
    that check.
    """

    record: SessionRecord
    expected_version: int
    stored_event_count: int
    keep: int
    new_events: list[EventRecord]
    token: str = ""
    expected_lineage: str = ""

    def expects(self, version: int, lineage: str) -> bool:
        """Whether a stored session at *version* with *lineage* is the one this request
        was made from: the version check and, unless ``expected_lineage`` is "", the
        lineage check, which `SessionManager._save` makes atomically with the write."""
        return _expects(self, version, lineage)

    def same_change(self, other: SaveRequest) -> bool:
        """Whether *other* writes what this request writes (tokens and times aside)."""
        return (
            self.expected_version == other.expected_version
            and self.expected_lineage == other.expected_lineage
            and self.keep == other.keep
            and self.record.state == other.record.state
            and self.record.event_count == other.record.event_count
            and [event.data for event in self.new_events]
            == [event.data for event in other.new_events]
        )

    @property
    def session_id(self) -> str:
        """The id of the session saved (``record.session_id``)."""
        return self.record.session_id

    @property
    def truncates(self) -> bool:
        """Whether any stored event is deleted."""
        return self.keep < self.stored_event_count


@dataclass(frozen=True, slots=True)
class CompactRequest:
    """One atomic compaction: replace the oldest ``replaced`` events with ``new_events``.

    Apply it all or nothing, and only if the stored version is still
    ``expected_version`` and, unless ``expected_lineage`` is "", the stored lineage is
    still ``expected_lineage`` (see `SaveRequest`; else raise `SessionConflictError`;
    if the session is not stored or has expired, `SessionNotFoundError`):

    1. if ``archive``, copy the events at positions ``0 .. replaced - 1`` to the
       backend's archive of the session (tagged with ``expected_version``), inside the
       engine: they never travel to the client;
    2. delete those events (a range delete: O(replaced), never a rewrite of the rest),
    3. insert ``new_events`` in their place, so that they come first, in order, before
       the events that were at ``replaced ..`` (which keep their order),
    4. write ``version``, ``updated_at``, ``expires_at``, ``event_count`` and ``lineage`` (state,
       ``user_id`` and ``created_at`` are not touched), and store ``token`` like a
       save's (see `SaveRequest`): a request whose token is stored landed before and
       succeeds at once without writing anything.

    Positions here are logical (0 is the first event); a backend that stores positions
    may keep its own offset instead of renumbering the events that stay.
    """

    session_id: str
    expected_version: int
    version: int
    updated_at: datetime
    expires_at: datetime | None
    stored_event_count: int
    replaced: int
    new_events: list[EventRecord]
    archive: bool = False
    token: str = ""
    #: The new `SessionRecord.lineage` (a compaction replaces stored events): store it.
    lineage: str = ""
    #: The lineage the copy was loaded with, checked like a save's ("" skips the check).
    expected_lineage: str = ""

    @property
    def event_count(self) -> int:
        """How many events the session holds once the compaction lands."""
        return self.stored_event_count - self.replaced + len(self.new_events)

    def expects(self, version: int, lineage: str) -> bool:
        """Whether a stored session at *version* with *lineage* is the one this request
        was made from (see `SaveRequest.expects`)."""
        return _expects(self, version, lineage)


@dataclass(frozen=True, slots=True)
class ForkRequest:
    """One atomic fork: a new session holding a prefix of a stored one, copied by the engine.

    Apply it all or nothing, as of one consistent snapshot of the source:

    1. the source ``source_id`` must be live (else `SessionNotFoundError`) and, when
       ``user_id`` is not None, owned by it (else `SessionOwnershipError`);
    2. the copied prefix is every event up to and including the one whose id is
       ``through_event_id`` (None: all of them); no such event is an
       `InvalidInputError` naming it;
    3. ``session_id`` must not be live (else `SessionExistsError`; an expired one is
       replaced, with its events and archive removed, as by `SessionManager._create`);
    4. insert the new session: owner and (when ``state`` is None) state copied from the
       source, ``version`` 1, ``created_at == updated_at == created_at`` given,
       ``expires_at`` and ``lineage`` as given, ``event_count`` the prefix's length,
       ``forked_from`` = (``source_id``, the source's version read, ``through_event_id``);
       then its events at positions 0 .. n-1, copied inside the engine (they never
       travel to the client), with no archive and no save tokens.

    Nothing of the source changes. The hook returns the new session's record.
    Any failure writes nothing.
    """

    source_id: str
    session_id: str
    through_event_id: str | None
    #: The new session's state as stored JSON text, or None to copy the source's.
    state: str | None
    user_id: str | None
    created_at: datetime
    expires_at: datetime | None
    lineage: str


@dataclass(frozen=True, slots=True)
class RewindRequest:
    """One atomic rewind: drop the events at positions ``>= keep``.

    Apply it all or nothing, only if the stored version is still ``expected_version``
    and, unless ``expected_lineage`` is "", the stored lineage is still
    ``expected_lineage`` (else `SessionConflictError`; if the session is not live,
    `SessionNotFoundError`):

    1. if ``archive``, copy the events at positions ``keep ..`` to the session's
       archive (as `CompactRequest` does, tagged with ``expected_version``), inside
       the engine;
    2. delete them (a range delete of the tail: O(dropped));
    3. write ``version``, ``updated_at``, ``expires_at``, ``event_count`` (= ``keep``)
       and ``lineage``, keeping state, owner, ``created_at`` and ``forked_from``, and
       store ``token`` like a save's (a request whose token is stored landed before).

    Positions are logical, as in `CompactRequest`.
    """

    session_id: str
    expected_version: int
    version: int
    updated_at: datetime
    expires_at: datetime | None
    stored_event_count: int
    keep: int
    archive: bool = False
    token: str = ""
    lineage: str = ""
    expected_lineage: str = ""

    @property
    def event_count(self) -> int:
        """How many events the session holds once the rewind lands."""
        return self.keep

    @property
    def dropped(self) -> int:
        """How many events the rewind removes."""
        return self.stored_event_count - self.keep

    def expects(self, version: int, lineage: str) -> bool:
        """Whether a stored session at *version* with *lineage* is the one this request
        was made from (see `SaveRequest.expects`)."""
        return _expects(self, version, lineage)


def _expects(
    request: SaveRequest | CompactRequest | RewindRequest, version: int, lineage: str
) -> bool:
    return version == request.expected_version and request.expected_lineage in ("", lineage)


def refused(
    request: SaveRequest | CompactRequest | RewindRequest,
    *,
    live: bool,
    stored_version: int | None = None,
    other_life: bool = False,
) -> SessionError:
    """The error for *request* when its version check failed and its token is not stored:
    `SessionConflictError` while a live session holds the id (naming *stored_version*
    when the engine read it, or, with *other_life*, saying that the lineage check failed:
    the id was created or restored again since the copy was loaded), else
    `SessionNotFoundError`."""
    session_id = request.session_id
    if not live:
        return SessionNotFoundError(session_id)
    if other_life:
        detail = "the id was created or restored again since this copy was loaded"
    else:
        detail = "" if stored_version is None else f"stored version is {stored_version}"
    return SessionConflictError(session_id, request.expected_version, detail)


def decode_events(texts: Sequence[str] | Sequence[bytes]) -> list[Event]:
    """The events stored as these JSON texts (str or UTF-8 bytes), in order.

    Decoded lazily: the list validates and builds them all in one pydantic-core pass
    the first time the caller looks at them (`LazyEvents`); a caller that only
    appends and saves never pays for it.
    """
    if not texts:
        return []
    # A copy: the backend may reuse its list; the texts themselves are immutable.
    return LazyEvents(StoredEvents(texts[:]))


_EVENT_FIELDS = frozenset(Event.model_fields)
_MAX_NAME = 255  # Event.id and Event.author, as the model declares them


def _check_name(value: object, path: str) -> None:
    if type(value) is not str:
        raise SessionSerializationError(path, f"must be a str, not {type(value).__name__}")
    if not 1 <= len(value) <= _MAX_NAME:
        raise SessionSerializationError(path, f"must be 1 to {_MAX_NAME} characters long")
    _json.check_text(value, path)


def _check_id(value: object, path: str) -> None:
    # The rule of every id (`validate_id`): an event id that is only whitespace could be
    # saved but never named again, as fork's or rewind's ``through_event_id`` say.
    _check_name(value, path)
    if isinstance(value, str) and value.isspace():
        raise SessionSerializationError(path, "must not be blank (only whitespace)")


def _check_timestamp(value: object, path: str) -> None:
    if not isinstance(value, datetime):
        raise SessionSerializationError(path, f"must be a datetime, not {type(value).__name__}")
    if value.utcoffset() is None:
        raise SessionSerializationError(path, "is naive; events need a timezone-aware datetime")
    try:
        value.astimezone(timezone.utc)
    except OverflowError:
        raise SessionSerializationError(path, "is out of range once converted to UTC") from None


def encode_event(event: Event, position: int, path: str) -> EventRecord:
    """Check and encode one event; *path* names it in errors (``events[3]``).

    Every field is checked again, because an Event need not have been validated
    (``Event.model_construct`` skips it): what is stored must always load back.
    """
    fields = event.__dict__
    if fields.keys() != _EVENT_FIELDS:
        missing = sorted(_EVENT_FIELDS - fields.keys()) or ["fields"]
        raise SessionSerializationError(f"{path}.{missing[0]}", "is missing from the Event")
    # The common case settled inline (short ASCII names, a UTC timestamp); anything
    # else takes the full checks, which name the field. Paths are built only there.
    ident, author, timestamp = fields["id"], fields["author"], fields["timestamp"]
    if (
        type(ident) is not str
        or not 0 < len(ident) <= _MAX_NAME
        or not ident.isascii()
        or ident.isspace()
    ):
        _check_id(ident, f"{path}.id")
    if type(author) is not str or not 0 < len(author) <= _MAX_NAME or not author.isascii():
        _check_name(author, f"{path}.author")
    in_utc = type(timestamp) is datetime and timestamp.tzinfo is timezone.utc
    if not in_utc:
        _check_timestamp(timestamp, f"{path}.timestamp")
    metadata = fields["metadata"]
    if type(metadata) is not dict:
        raise SessionSerializationError(
            f"{path}.metadata", f"must be a dict, not {type(metadata).__name__}"
        )
    content = fields["content"]
    _json.check_json(content, path + ".content")
    if metadata:
        _json.check_json(metadata, path + ".metadata")
    if not in_utc or type(event) is not Event:
        return EventRecord(position=position, data=event.model_dump_json())
    # What model_dump_json writes for an Event of checked JSON with a UTC timestamp (the
    # same fields in the same order, the same serializers), without calling the
    # model's timestamp serializer, a Python function, for every event saved.
    data = pydantic_core.to_json(
        {
            "id": ident,
            "author": author,
            "content": content,
            "timestamp": timestamp,
            "metadata": metadata,
        }
    ).decode()
    return EventRecord(position=position, data=data)


def encode_cursor(created_at: datetime, session_id: str) -> str:
    """An opaque cursor for the listing order (created_at, session_id) descending."""
    raw = _json.dumps([created_at.isoformat(), session_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The inverse of `encode_cursor`; a malformed cursor is an `InvalidInputError`."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, session_id = _json.loads(raw)
        when = datetime.fromisoformat(created)
        if when.tzinfo is None or not isinstance(session_id, str):
            raise ValueError(cursor)
    except (ValueError, TypeError) as exc:
        raise InvalidInputError(f"malformed listing cursor {cursor!r}") from exc
    return when, session_id
