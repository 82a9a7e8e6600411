"""The in-memory backend (``memory://``): the reference semantics of the contract.

It stores encoded JSON, not objects, so nothing a caller holds is ever aliased with
what is stored, exactly as with a real database. ``memory://`` is private to one
manager; ``memory://NAME`` is shared by every manager in the process that uses NAME.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from datetime import datetime

import pydantic_core

from ._diagnosis import Finding, finding
from ._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
)
from ._manager import ManagerOptions, SessionManager
from ._models import ForkOrigin, SessionSummary
from ._records import (
    TOKENS_KEPT,
    Capabilities,
    CompactRequest,
    EventRecord,
    ForkRequest,
    LoadedSession,
    RewindRequest,
    SaveRequest,
    SessionRecord,
    decode_events,
)
from ._urls import parse_server_url

__all__ = ["MemorySessionManager"]


@dataclass
class _Stored:
    record: SessionRecord
    events: list[str]
    tokens: deque[str] = field(default_factory=lambda: deque(maxlen=TOKENS_KEPT))
    # What compactions archived, oldest first (see CompactRequest).
    archive: list[str] = field(default_factory=list)


@dataclass
class _Store:
    lock: threading.Lock = field(default_factory=threading.Lock)
    # namespace -> session_id -> stored session
    spaces: dict[str, dict[str, _Stored]] = field(default_factory=dict)


_named_stores: dict[str, _Store] = {}
_named_lock = threading.Lock()


def _live(stored: _Stored | None, now: datetime) -> _Stored | None:
    if stored is None:
        return None
    expires = stored.record.expires_at
    return None if expires is not None and expires <= now else stored


def _position_of(texts: list[str], event_id: str, session_id: str) -> int:
    # Every stored event's JSON starts with its id (encode_event writes it first), so a
    # prefix test finds the cut without decoding the history.
    prefix = '{"id":' + pydantic_core.to_json(event_id).decode() + ","
    for position, text in enumerate(texts):
        if text.startswith(prefix):
            return position
    raise InvalidInputError(f"session {session_id!r} holds no event with id {event_id!r}")


class MemorySessionManager(SessionManager):
    """Sessions in this process's memory; gone when the process ends."""

    capabilities = Capabilities(persistent=False, shared=True, compaction=True, branching=True)
    db_system = "memory"

    def __init__(self, url: str = "memory://", options: ManagerOptions | None = None) -> None:
        super().__init__(url, options)
        parse_server_url(url)  # refuses what would defeat masking, such as a raw '#'
        name = url.partition("://")[2].strip("/")
        if name:
            with _named_lock:
                self._store = _named_stores.setdefault(name, _Store())
        else:
            self._store = _Store()
            # A private store is seen by this manager alone, not by with_options() copies.
            self.capabilities = Capabilities(
                persistent=False, shared=False, compaction=True, branching=True
            )

    @property
    def _space(self) -> dict[str, _Stored]:
        return self._store.spaces.setdefault(self.options.namespace, {})

    async def _open(self) -> None:
        pass

    async def _close(self) -> None:
        pass

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        with self._store.lock:
            space = self._space
            if _live(space.get(record.session_id), now) is not None:
                raise SessionExistsError(record.session_id)
            space[record.session_id] = _Stored(record, [])

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        with self._store.lock:
            space = self._space
            if _live(space.get(record.session_id), now) is not None:
                raise SessionExistsError(record.session_id)
            space[record.session_id] = _Stored(record, [event.data for event in events])

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                return None
            record = stored.record
            if last_events is None:
                texts = list(stored.events)
            else:
                texts = (
                    stored.events[max(0, len(stored.events) - last_events) :] if last_events else []
                )
        return LoadedSession(record, decode_events(texts))

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                return None
            record = stored.record
            texts = stored.events[record.since_position(event_count, lineage) :]
        return LoadedSession(record, decode_events(texts))

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        """The stored session a conditional write may change (call under the lock), or
        None when *request*'s token shows it landed already; raises what the hooks do
        for a session that is not live or not at the expected version and lineage."""
        stored = _live(self._space.get(session_id), now)
        if stored is None:
            raise SessionNotFoundError(session_id)
        if request.token in stored.tokens:
            return None
        if not request.expects(stored.record.version, stored.record.lineage):
            raise SessionConflictError(session_id, request.expected_version)
        return stored

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        session_id = request.record.session_id
        with self._store.lock:
            stored = self._writable(session_id, request, now)
            if stored is None:
                return  # a retry of a write that landed
            # Ownership, creation time and origin never change through a save (the copy is
            # made only when the request differs: dataclasses.replace is not cheap).
            record, kept = request.record, stored.record
            if (
                record.user_id is not kept.user_id
                or record.created_at is not kept.created_at
                or record.forked_from is not kept.forked_from
            ):
                record = replace(
                    record,
                    user_id=kept.user_id,
                    created_at=kept.created_at,
                    forked_from=kept.forked_from,
                )
            stored.record = record
            # In place, under the lock, after every check: O(changed events), and no
            # reader can see a half-applied save.
            del stored.events[request.keep :]
            stored.events.extend(event.data for event in request.new_events)
            stored.tokens.append(request.token)

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        session_id = request.session_id
        with self._store.lock:
            stored = self._writable(session_id, request, now)
            if stored is None:
                return  # a retry of a write that landed
            replaced = request.replaced
            if request.archive:
                stored.archive.extend(stored.events[:replaced])
            stored.events[:replaced] = [event.data for event in request.new_events]
            _stamp(stored, request)

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        with self._store.lock:
            space = self._space
            source = _live(space.get(request.source_id), now)
            if source is None:
                raise SessionNotFoundError(request.source_id)
            kept = source.record
            if request.user_id is not None and kept.user_id != request.user_id:
                raise SessionOwnershipError(request.source_id, request.user_id)
            count = len(source.events)
            if request.through_event_id is not None:
                count = 1 + _position_of(source.events, request.through_event_id, kept.session_id)
            if _live(space.get(request.session_id), now) is not None:
                raise SessionExistsError(request.session_id)
            record = SessionRecord(
                session_id=request.session_id,
                user_id=kept.user_id,
                state=kept.state if request.state is None else request.state,
                version=1,
                created_at=request.created_at,
                updated_at=request.created_at,
                expires_at=request.expires_at,
                event_count=count,
                lineage=request.lineage,
                forked_from=ForkOrigin(
                    session_id=kept.session_id,
                    version=kept.version,
                    event_id=request.through_event_id,
                ),
            )
            # The texts are immutable: the fork shares them, as an engine copies rows.
            space[request.session_id] = _Stored(record, source.events[:count])
        return record

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        session_id = request.session_id
        with self._store.lock:
            stored = self._writable(session_id, request, now)
            if stored is None:
                return  # a retry of a write that landed
            if request.archive:
                stored.archive.extend(stored.events[request.keep :])
            del stored.events[request.keep :]
            _stamp(stored, request)

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            records = [
                stored.record
                for stored in self._space.values()
                if _live(stored, now) is not None
                and stored.record.forked_from is not None
                and stored.record.forked_from.session_id == source_id
                and (user_id is None or stored.record.user_id == user_id)
            ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        if after is not None:
            records = [r for r in records if (r.created_at, r.session_id) < after]
        return [record.summary() for record in records[:limit]]

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            return [] if stored is None else list(stored.archive)

    async def _delete(self, session_id: str, now: datetime) -> bool:
        with self._store.lock:
            stored = self._space.pop(session_id, None)
        return _live(stored, now) is not None

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, stored in space.items() if stored.record.user_id == user_id]
            live = sum(_live(space.pop(sid), now) is not None for sid in doomed)
        return live

    async def _list(
        self,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            records = [
                stored.record
                for stored in self._space.values()
                if _live(stored, now) is not None
                and (user_id is None or stored.record.user_id == user_id)
            ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        if after is not None:
            records = [r for r in records if (r.created_at, r.session_id) < after]
        return [record.summary() for record in records[:limit]]

    async def _purge_expired(self, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, stored in space.items() if _live(stored, now) is None]
            for sid in doomed:
                del space[sid]
        return len(doomed)

    async def _diagnose(self, now: datetime) -> list[Finding]:
        return [
            finding(
                "memory.persistence",
                "warning",
                "memory:// keeps sessions in this process's memory",
                "every session is lost when the process ends; other processes never see them",
                "use a persistent backend: sqlite:////path/sessions.db or a server",
            )
        ]


def _stamp(stored: _Stored, request: CompactRequest | RewindRequest) -> None:
    """Record a compaction or rewind that changed *stored*'s events (under the lock)."""
    stored.record = replace(
        stored.record,
        version=request.version,
        updated_at=request.updated_at,
        expires_at=request.expires_at,
        event_count=len(stored.events),
        lineage=request.lineage,
    )
    stored.tokens.append(request.token)
