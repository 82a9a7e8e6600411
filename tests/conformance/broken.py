"""Deliberately broken backends: each breaks one promise, and the kit must notice exactly that.

Each is a small subclass of the reference memory backend or of the SQLite backend, so
everything it does not break behaves exactly as the real one does. Each names, in
``caught_by``, the kit clauses that must fail on it; `test_broken_backends` runs each
backend against those clauses only (one pytest process for all of them) and asserts
that every one fails, and that the unbroken backends pass them all.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections import deque
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from agentsessions import (
    BackendConflictError,
    BackendUnavailableError,
    Capabilities,
    MemorySessionManager,
    Session,
    SessionConflictError,
    SessionExistsError,
    SessionManager,
    SessionNotFoundError,
    SessionSummary,
)
from agentsessions._memory import _live, _Stored
from agentsessions.backend import (
    TOKENS_KEPT,
    CompactRequest,
    EventRecord,
    ForkRequest,
    LoadedSession,
    RewindRequest,
    SaveRequest,
    SessionRecord,
    decode_events,
    encode_record,
    fork_fields,
    to_micros,
)
from agentsessions_sqlite import SQLiteSessionManager
from agentsessions_sqlite import _manager as sqlite_impl
from agentsessions_sqlite import _statements as sqlite_sql

__all__ = ["BROKEN", "AliasingManager", "OverwritingCreateManager"]


def _real_now() -> datetime:
    return datetime.now(timezone.utc)


class Broken:
    """Mixin: the kit clauses that must fail on this backend."""

    caught_by: ClassVar[frozenset[str]]


# -- create ------------------------------------------------------------------------------


class OverwritingCreateManager(MemorySessionManager, Broken):
    """create() of an existing id silently replaces it (a blind INSERT OR REPLACE / SET)."""

    caught_by = frozenset(
        {
            "test_create_never_overwrites",
            "test_concurrent_creates_exactly_one_wins",
            "test_concurrent_creates_across_managers",
            "test_loops_in_threads_race_one_create",
        }
    )

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        with self._store.lock:
            self._space[record.session_id] = _Stored(record, [])


class RefusesExpiredIdManager(MemorySessionManager, Broken):
    """create() refuses an id whose session has expired (checks presence, not liveness)."""

    caught_by = frozenset({"test_ttl_expired_id_can_be_created_again"})

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        with self._store.lock:
            if record.session_id in self._space:
                raise SessionExistsError(record.session_id)
            self._space[record.session_id] = _Stored(record, [])


class CreateWallClockManager(MemorySessionManager, Broken):
    """The backend stamps created_at itself, from the machine's clock, not the manager's."""

    caught_by = frozenset({"test_ttl_timestamps_come_from_the_clock", "test_list_ties_page_by_id"})

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        await super()._create(replace(record, created_at=_real_now()), now)


# -- save --------------------------------------------------------------------------------


class LostSaveManager(MemorySessionManager, Broken):
    """save() never checks the stored version: concurrent saves overwrite each other."""

    caught_by = frozenset(
        {
            "test_save_stale_copy_raises_conflict",
            "test_concurrent_saves_exactly_one_lands",
            "test_concurrent_saves_across_managers",
            "test_update_retries_a_lost_race",
            "test_loops_in_threads_update_one_session",
        }
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        session_id = request.record.session_id
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                raise SessionNotFoundError(session_id)
            events = stored.events[: request.keep]
            events.extend(event.data for event in request.new_events)
            record = replace(
                request.record, user_id=stored.record.user_id, created_at=stored.record.created_at
            )
            self._space[session_id] = _Stored(record, events)


class ConflictAsBackendErrorManager(MemorySessionManager, Broken):
    """A lost version race is reported as a generic BackendConflictError, not a conflict."""

    caught_by = frozenset(
        {"test_save_stale_copy_raises_conflict", "test_update_retries_a_lost_race"}
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        try:
            await super()._save(request, now)
        except SessionConflictError as exc:
            raise BackendConflictError(str(exc)) from None


class ConflictAsNotFoundManager(MemorySessionManager, Broken):
    """A lost version race is reported as SessionNotFoundError (one rowcount, two causes)."""

    caught_by = frozenset(
        {"test_save_stale_copy_raises_conflict", "test_update_retries_a_lost_race"}
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        try:
            await super()._save(request, now)
        except SessionConflictError:
            raise SessionNotFoundError(request.record.session_id) from None


class SaveChangesOwnerManager(MemorySessionManager, Broken):
    """save() writes the copy's user_id and created_at instead of keeping the stored ones."""

    caught_by = frozenset({"test_save_never_changes_owner_or_created_at"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        session_id = request.record.session_id
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                raise SessionNotFoundError(session_id)
            if stored.record.version != request.expected_version:
                raise SessionConflictError(session_id, request.expected_version)
            stored.record = request.record
            del stored.events[request.keep :]
            stored.events.extend(event.data for event in request.new_events)


class EarlierLifeSaveManager(MemorySessionManager, Broken):
    """save() checks the version alone: a copy of an earlier life of the id (deleted or
    expired, then created again) lands where its version matches the new life's."""

    # The state machine reaches this too (its `recreate` rule), but only on some of its
    # random runs within the time limit; the dedicated clause catches it every time.
    caught_by = frozenset(
        {
            "test_every_write_of_an_earlier_lifes_copy_is_a_conflict",
            "test_save_copy_of_earlier_life_raises_conflict",
        }
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        # The version check as it was before lineages were compared.
        await super()._save(replace(request, expected_lineage=""), now)


class SaveRevivesExpiredManager(MemorySessionManager, Broken):
    """save() of an expired session lands (the version check forgets the expiry)."""

    caught_by = frozenset({"test_ttl_expired_session_is_absent"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await super()._save(request, datetime(1970, 1, 1, tzinfo=timezone.utc))


class ExpiryNotRefreshedManager(MemorySessionManager, Broken):
    """save() keeps the expiry set at creation: the ttl counts from create, not last save."""

    caught_by = frozenset({"test_ttl_save_refreshes_expiry"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        stored = self._space.get(request.record.session_id)
        if stored is not None:
            request = replace(
                request, record=replace(request.record, expires_at=stored.record.expires_at)
            )
        await super()._save(request, now)


class TornSaveRecordFirstManager(MemorySessionManager, Broken):
    """save() writes the record, then (after a round trip) the events: readers see half."""

    caught_by = frozenset({"test_reader_never_sees_half_a_save"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        session_id = request.record.session_id
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                raise SessionNotFoundError(session_id)
            if stored.record.version != request.expected_version:
                raise SessionConflictError(session_id, request.expected_version)
            stored.record = replace(
                request.record, user_id=stored.record.user_id, created_at=stored.record.created_at
            )
        await asyncio.sleep(0.001)  # the second statement, outside any transaction
        with self._store.lock:
            del stored.events[request.keep :]
            stored.events.extend(event.data for event in request.new_events)


class TornSaveEventsFirstManager(MemorySessionManager, Broken):
    """save() writes the events, then (after a round trip) the record: readers see half."""

    caught_by = frozenset({"test_reader_never_sees_half_a_save"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        session_id = request.record.session_id
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                raise SessionNotFoundError(session_id)
            if stored.record.version != request.expected_version:
                raise SessionConflictError(session_id, request.expected_version)
            del stored.events[request.keep :]
            stored.events.extend(event.data for event in request.new_events)
        await asyncio.sleep(0.001)
        with self._store.lock:
            stored.record = replace(
                request.record, user_id=stored.record.user_id, created_at=stored.record.created_at
            )


class LimitOverstatedManager(MemorySessionManager, Broken):
    """Declares 4096-byte events, but its engine refuses anything past 3000 bytes."""

    caught_by = frozenset({"test_event_size_limit_is_exact"})
    capabilities = Capabilities(persistent=False, shared=True, max_event_bytes=4096)

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        if any(len(event.data) > 3000 for event in request.new_events):
            raise BackendUnavailableError(self.url, "value too large")
        await super()._save(request, now)


# -- get ---------------------------------------------------------------------------------


class AliasingManager(MemorySessionManager, Broken):
    """get() and create() hand out the very objects they cached, not copies."""

    caught_by = frozenset(
        {
            "test_create_state_is_copied",
            "test_get_returns_detached_copy",
            "test_get_twice_gives_independent_objects",
            "test_mutating_after_save_changes_nothing_stored",
            # Every copy is the same object, so a "stale" copy is the fresh one:
            "test_save_stale_copy_raises_conflict",
            "test_concurrent_saves_exactly_one_lands",
            # update()'s fn mutates the cached object, so the previous result changes too.
            "test_update_accepts_sync_and_async_fn",
        }
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._cache: dict[str, Session] = {}

    async def create(
        self, session_id: str, user_id: str | None = None, *, state: dict[str, Any] | None = None
    ) -> Session:
        session = await super().create(session_id, user_id, state=state)
        if state is not None:
            session.state = state  # keeps the caller's dict, as a careless backend would
        self._cache[session_id] = session
        return session

    async def get(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> Session | None:
        fresh = await super().get(session_id, user_id=user_id, last_events=last_events)
        if fresh is None:
            self._cache.pop(session_id, None)
            return None
        if last_events is not None:
            return fresh
        cached = self._cache.get(session_id)
        if cached is not None and cached.version == fresh.version:
            return cached
        self._cache[session_id] = fresh
        return fresh


def _tail(events: list[str], last_events: int | None) -> list[str]:
    if last_events is None:
        return list(events)
    return events[max(0, len(events) - last_events) :] if last_events else []


class _LoadVariant(MemorySessionManager):
    """A load that differs from the reference in how it picks liveness or the tail."""

    def _pick(self, events: list[str], last_events: int | None) -> list[str]:
        return _tail(events, last_events)

    def _alive(self, stored: _Stored | None, now: datetime, last_events: int | None) -> bool:
        return _live(stored, now) is not None

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = self._space.get(session_id)
            if stored is None or not self._alive(stored, now, last_events):
                return None
            texts = self._pick(stored.events, last_events)
            record = stored.record
        return LoadedSession(record, decode_events(texts))


class TailIgnoresExpiryManager(_LoadVariant, Broken):
    """The last_events query forgets the expiry condition the full load has."""

    caught_by = frozenset(
        {
            "test_every_operation_treats_an_expired_session_as_absent",
            "test_ttl_expired_session_is_absent",
        }
    )

    def _alive(self, stored: _Stored | None, now: datetime, last_events: int | None) -> bool:
        return last_events is not None or _live(stored, now) is not None


class ZeroTailIgnoresExpiryManager(_LoadVariant, Broken):
    """The record-only load (last_events=0) forgets the expiry condition."""

    caught_by = frozenset(
        {"test_ttl_expired_session_is_absent", "test_ttl_expired_session_cannot_be_deleted"}
    )

    def _alive(self, stored: _Stored | None, now: datetime, last_events: int | None) -> bool:
        return last_events == 0 or _live(stored, now) is not None


class WallClockExpiryManager(_LoadVariant, Broken):
    """Loads compare the expiry with the machine's clock (SQL ``now()``), not the given now."""

    caught_by = frozenset(
        {
            "test_ttl_expired_session_is_absent",
            "test_ttl_save_refreshes_expiry",
            "test_ttl_read_does_not_extend",
        }
    )

    def _alive(self, stored: _Stored | None, now: datetime, last_events: int | None) -> bool:
        return _live(stored, _real_now()) is not None


class ReadRefreshesExpiryManager(_LoadVariant, Broken):
    """Every load pushes the expiry on (a GETEX / touch on read)."""

    caught_by = frozenset({"test_ttl_read_does_not_extend"})

    def _alive(self, stored: _Stored | None, now: datetime, last_events: int | None) -> bool:
        alive = _live(stored, now) is not None
        ttl = self.options.ttl
        if alive and stored is not None and ttl is not None:
            stored.record = replace(stored.record, expires_at=now + timedelta(seconds=ttl))
        return alive


class ZeroTailReturnsAllManager(_LoadVariant, Broken):
    """last_events=0 returns every event (``events[-0:]``)."""

    caught_by = frozenset({"test_get_last_events_zero"})

    def _pick(self, events: list[str], last_events: int | None) -> list[str]:
        return list(events) if last_events is None else events[-last_events:]


class TailOffByOneManager(_LoadVariant, Broken):
    """last_events=N returns N-1 events."""

    caught_by = frozenset({"test_get_last_events_loads_newest"})

    def _pick(self, events: list[str], last_events: int | None) -> list[str]:
        if last_events is None:
            return list(events)
        return events[len(events) - last_events + 1 :] if last_events else []


class TailIsOldestManager(_LoadVariant, Broken):
    """last_events=N returns the oldest N events (ORDER BY position ASC LIMIT N)."""

    caught_by = frozenset({"test_get_last_events_loads_newest"})

    def _pick(self, events: list[str], last_events: int | None) -> list[str]:
        return list(events) if last_events is None else events[:last_events]


# -- ownership ---------------------------------------------------------------------------


class TailSkipsOwnershipManager(MemorySessionManager, Broken):
    """A fast path for tail reads that forgets the owner check the full read has."""

    caught_by = frozenset(
        {
            "test_every_operation_naming_another_user_is_refused",
            "test_ownership_holds_on_every_read_path",
        }
    )

    async def get(
        self, session_id: str, *, user_id: str | None = None, last_events: int | None = None
    ) -> Session | None:
        if last_events is not None:
            user_id = None
        return await super().get(session_id, user_id=user_id, last_events=last_events)


class DeleteIgnoresOwnerManager(MemorySessionManager, Broken):
    """delete(user_id=...) deletes without checking the owner."""

    caught_by = frozenset(
        {
            "test_every_operation_naming_another_user_is_refused",
            "test_delete_with_other_user_raises_ownership",
            "test_ownership_holds_on_every_read_path",
        }
    )

    async def delete(self, session_id: str, *, user_id: str | None = None) -> bool:
        return await super().delete(session_id)


class GetOrCreateIgnoresOwnerManager(MemorySessionManager, Broken):
    """get_or_create() returns an existing session whoever owns it."""

    caught_by = frozenset(
        {"test_get_or_create_enforces_ownership", "test_ownership_holds_on_every_read_path"}
    )

    async def get_or_create(self, session_id: str, user_id: str | None = None) -> Session:
        existing = await self.get(session_id)
        if existing is not None:
            return existing
        return await super().get_or_create(session_id, user_id)


# -- update ------------------------------------------------------------------------------


class UpdateNoRetryManager(MemorySessionManager, Broken):
    """update() gives up on the first conflict, whatever retries says."""

    caught_by = frozenset({"test_update_retries_a_lost_race"})

    async def update(self, session_id: str, fn: Any, **kwargs: Any) -> Session:
        kwargs["retries"] = 0
        return await super().update(session_id, fn, **kwargs)


class UpdateRetriesStaleCopyManager(MemorySessionManager, Broken):
    """update() retries the save of the same stale copy instead of reloading."""

    caught_by = frozenset({"test_update_retries_a_lost_race"})

    async def update(
        self,
        session_id: str,
        fn: Any,
        *,
        user_id: str | None = None,
        create: bool = False,
        retries: int = 64,
    ) -> Session:
        session = await self.get(session_id, user_id=user_id)
        if session is None:
            if not create:
                raise SessionNotFoundError(session_id)
            session = await self.get_or_create(session_id, user_id)
        result = fn(session)
        if asyncio.iscoroutine(result):
            await result
        for attempt in range(retries + 1):
            try:
                await self.save(session)
                return session
            except SessionConflictError:
                if attempt >= retries:
                    raise
        raise AssertionError("unreachable")


# -- retries that read only what changed (_load_since) -----------------------------------


class SinceIgnoresLineageManager(MemorySessionManager, Broken):
    """_load_since() extends any copy whose count the history has reached, without
    checking the lineage: a rewritten or re-created history is glued onto the old copy."""

    caught_by = frozenset(
        {
            "test_load_since_after_a_rewrite_returns_every_event",
            "test_update_retry_sees_a_rewritten_history",
            "test_update_retry_sees_a_session_deleted_and_created_again",
        }
    )

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = _live(self._space.get(session_id), now)
            if stored is None:
                return None
            record = replace(stored.record, lineage=lineage)
            texts = stored.events[event_count:]
        return LoadedSession(record, decode_events(texts))


class CompactKeepsLineageManager(MemorySessionManager, Broken):
    """compact() leaves the lineage as it was: the replaced prefix is taken for the
    old one by a copy loaded before the compaction."""

    caught_by = frozenset({"test_update_retry_sees_a_compacted_history"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            lineage = "" if stored is None else stored.record.lineage
        await super()._compact(replace(request, lineage=lineage), now)


class SinceOverlapsManager(MemorySessionManager, Broken):
    """_load_since() returns the events from the copy's last one on (one too many)."""

    caught_by = frozenset({"test_load_since_returns_the_events_after_the_copy_or_all"})

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        return await super()._load_since(session_id, max(0, event_count - 1), lineage, now)


# -- delete ------------------------------------------------------------------------------


class DeleteExpiredSaysTrueManager(MemorySessionManager, Broken):
    """delete() of an expired session returns True (it found a row)."""

    caught_by = frozenset(
        {
            "test_every_operation_treats_an_expired_session_as_absent",
            "test_ttl_expired_session_cannot_be_deleted",
        }
    )

    async def _delete(self, session_id: str, now: datetime) -> bool:
        with self._store.lock:
            return self._space.pop(session_id, None) is not None


class DeleteUserCountsExpiredManager(MemorySessionManager, Broken):
    """delete_user() counts the expired sessions it sweeps up."""

    caught_by = frozenset({"test_ttl_expired_session_cannot_be_deleted"})

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, s in space.items() if s.record.user_id == user_id]
            for sid in doomed:
                del space[sid]
        return len(doomed)


class DeleteUserFirstBatchManager(MemorySessionManager, Broken):
    """delete_user() deletes one batch of 100 and forgets to loop."""

    caught_by = frozenset({"test_delete_user_erases_hundreds_of_sessions"})

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, s in space.items() if s.record.user_id == user_id][:100]
            live = sum(_live(space.pop(sid), now) is not None for sid in doomed)
        return live


class DeleteUserTakesAnonymousManager(MemorySessionManager, Broken):
    """delete_user() also deletes sessions with no owner (``user_id = ? OR user_id IS NULL``)."""

    caught_by = frozenset(
        {
            "test_state_machine_agrees_with_the_reference",
            "test_delete_user_removes_exactly_that_users_sessions",
            "test_delete_user_erases_hundreds_of_sessions",
        }
    )

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, s in space.items() if s.record.user_id in (user_id, None)]
            live = sum(_live(space.pop(sid), now) is not None and sid is not None for sid in doomed)
        return live


# -- purge -------------------------------------------------------------------------------


class PurgeDeletesLiveManager(MemorySessionManager, Broken):
    """purge_expired() deletes every session that has an expiry at all, due or not."""

    caught_by = frozenset(
        {
            "test_state_machine_agrees_with_the_reference",
            "test_purge_expired_removes_exactly_the_expired",
        }
    )

    async def _purge_expired(self, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [sid for sid, s in space.items() if s.record.expires_at is not None]
            for sid in doomed:
                del space[sid]
        return len(doomed)


class PurgeMiscountsManager(MemorySessionManager, Broken):
    """purge_expired() removes the right sessions but returns how many it examined."""

    caught_by = frozenset({"test_purge_expired_removes_exactly_the_expired"})

    async def _purge_expired(self, now: datetime) -> int:
        examined = len(self._space)
        await super()._purge_expired(now)
        return examined


class PurgeNothingManager(MemorySessionManager, Broken):
    """purge_expired() is left at the base class's no-op, as if the engine expired data."""

    caught_by = frozenset(
        {
            "test_every_write_leaves_nothing_once_erased",
            "test_purge_expired_removes_exactly_the_expired",
        }
    )

    async def _purge_expired(self, now: datetime) -> int:
        return 0


class PurgeWallClockManager(MemorySessionManager, Broken):
    """purge_expired() judges expiry by the machine's clock, not the manager's."""

    caught_by = frozenset({"test_purge_expired_removes_exactly_the_expired"})

    async def _purge_expired(self, now: datetime) -> int:
        return await super()._purge_expired(_real_now())


# -- listing -----------------------------------------------------------------------------


class _ListVariant(MemorySessionManager):
    """A listing that differs from the reference in one step: select, order, page, summarise."""

    def _spaces(self) -> list[dict[str, _Stored]]:
        return [self._space]

    def _select(self, stored: _Stored, user_id: str | None, now: datetime, paged: bool) -> bool:
        return _live(stored, now) is not None and (
            user_id is None or stored.record.user_id == user_id
        )

    def _key(self, record: SessionRecord) -> tuple[Any, ...]:
        return (record.created_at, record.session_id)

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return (record.created_at, record.session_id) < after

    def _cut(self, records: list[SessionRecord], limit: int) -> list[SessionRecord]:
        return records[:limit]

    def _summary(self, record: SessionRecord) -> SessionSummary:
        return record.summary()

    async def _list(
        self, user_id: str | None, limit: int, after: tuple[datetime, str] | None, now: datetime
    ) -> list[SessionSummary]:
        with self._store.lock:
            records = [
                stored.record
                for space in self._spaces()
                for stored in space.values()
                if self._select(stored, user_id, now, after is not None)
            ]
        records.sort(key=self._key, reverse=True)
        if after is not None:
            records = [r for r in records if self._after(r, after)]
        return [self._summary(record) for record in self._cut(records, limit)]


class LeakyNamespaceManager(_ListVariant, Broken):
    """Listing and delete_user ignore the namespace (a key pattern without the prefix)."""

    caught_by = frozenset(
        {
            "test_every_operation_in_another_namespace_sees_and_touches_nothing",
            "test_namespaces_never_see_each_other",
            "test_default_namespace_lists_only_its_own",
            "test_namespace_and_id_never_collide",
        }
    )

    def _spaces(self) -> list[dict[str, _Stored]]:
        return list(self._store.spaces.values())

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        count = 0
        with self._store.lock:
            for space in self._store.spaces.values():
                doomed = [sid for sid, s in space.items() if s.record.user_id == user_id]
                for sid in doomed:
                    count += _live(space.pop(sid), now) is not None
        return count


class DefaultNamespaceListsAllManager(_ListVariant, Broken):
    """The default namespace's listing pattern (an empty prefix) matches every namespace."""

    caught_by = frozenset({"test_default_namespace_lists_only_its_own"})

    def _spaces(self) -> list[dict[str, _Stored]]:
        if self.options.namespace:
            return [self._space]
        return list(self._store.spaces.values())


class ListShowsExpiredManager(_ListVariant, Broken):
    """Listing forgets the expiry condition."""

    caught_by = frozenset({"test_ttl_expired_session_is_absent"})

    def _select(self, stored: _Stored, user_id: str | None, now: datetime, paged: bool) -> bool:
        return user_id is None or stored.record.user_id == user_id


class UserListShowsExpiredManager(_ListVariant, Broken):
    """The user-filtered listing query forgets the expiry condition; the other has it."""

    caught_by = frozenset({"test_ttl_expired_session_is_absent"})

    def _select(self, stored: _Stored, user_id: str | None, now: datetime, paged: bool) -> bool:
        if user_id is not None:
            return stored.record.user_id == user_id
        return _live(stored, now) is not None


class IgnoresCursorManager(_ListVariant, Broken):
    """Listing ignores the cursor: every page is the first page (it used to hang the kit)."""

    caught_by = frozenset(
        {
            "test_list_paging_visits_each_once",
            "test_list_ties_page_by_id",
            "test_list_many_pages_in_order",
        }
    )

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return True


class CursorDropsTiesManager(_ListVariant, Broken):
    """The cursor compares created_at alone: sessions tied with the page's last are skipped."""

    caught_by = frozenset(
        {
            "test_list_ties_page_by_id",
            "test_list_user_filter_holds_on_every_page",
        }
    )

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return record.created_at < after[0]


class CursorRepeatsLastManager(_ListVariant, Broken):
    """The cursor is inclusive (<=): each page starts with the previous page's last item."""

    caught_by = frozenset({"test_list_paging_visits_each_once", "test_list_many_pages_in_order"})

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return (record.created_at, record.session_id) <= after


class TieBreakAscendingManager(_ListVariant, Broken):
    """Ties on created_at are ordered by session_id ascending (``ORDER BY created_at DESC, id``)."""

    caught_by = frozenset(
        {"test_state_machine_agrees_with_the_reference", "test_list_ties_page_by_id"}
    )

    def _key(self, record: SessionRecord) -> tuple[Any, ...]:
        return (record.created_at, [-ord(c) for c in record.session_id])

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return self._key(record) < (after[0], [-ord(c) for c in after[1]])


class OrderByUpdatedManager(_ListVariant, Broken):
    """Listing orders by updated_at, so a save moves a session to the front."""

    caught_by = frozenset({"test_list_order_ignores_updates"})

    def _key(self, record: SessionRecord) -> tuple[Any, ...]:
        return (record.updated_at, record.session_id)


class OldestFirstManager(_ListVariant, Broken):
    """Listing returns the oldest sessions first."""

    caught_by = frozenset({"test_list_newest_created_first", "test_list_many_pages_in_order"})

    def _key(self, record: SessionRecord) -> tuple[Any, ...]:
        return (-to_micros(record.created_at), record.session_id)

    def _after(self, record: SessionRecord, after: tuple[datetime, str]) -> bool:
        return self._key(record) < (-to_micros(after[0]), after[1])


class UserFilterFirstPageOnlyManager(_ListVariant, Broken):
    """The paged listing query (with a cursor) forgets the user filter."""

    caught_by = frozenset({"test_list_user_filter_holds_on_every_page"})

    def _select(self, stored: _Stored, user_id: str | None, now: datetime, paged: bool) -> bool:
        return super()._select(stored, None if paged else user_id, now, paged)


class ShortPagesManager(_ListVariant, Broken):
    """Listing returns one session fewer than asked for, so paging stops early."""

    caught_by = frozenset({"test_list_paging_visits_each_once", "test_list_many_pages_in_order"})

    def _cut(self, records: list[SessionRecord], limit: int) -> list[SessionRecord]:
        return records[: limit - 1]


class StaleSummaryManager(_ListVariant, Broken):
    """Summaries report the creation's updated_at and version (a stale listing index)."""

    caught_by = frozenset({"test_list_returns_summaries"})

    def _summary(self, record: SessionRecord) -> SessionSummary:
        return replace(record, updated_at=record.created_at, version=1).summary()


# -- ids and namespaces ------------------------------------------------------------------


class _KeyedManager(MemorySessionManager):
    """Stores under a key derived from the id (and namespace); records keep the real id."""

    def _key(self, session_id: str) -> str:
        return session_id

    @property
    def _space(self) -> dict[str, _Stored]:
        return self._store.spaces.setdefault(self.options.namespace, {})

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        with self._store.lock:
            key = self._key(record.session_id)
            if _live(self._space.get(key), now) is not None:
                raise SessionExistsError(record.session_id)
            self._space[key] = _Stored(record, [])

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = _live(self._space.get(self._key(session_id)), now)
            if stored is None:
                return None
            texts = _tail(stored.events, last_events)
            record = replace(stored.record, session_id=session_id)
        return LoadedSession(record, decode_events(texts))

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        key = self._key(request.record.session_id)
        with self._store.lock:
            stored = _live(self._space.get(key), now)
            if stored is None:
                raise SessionNotFoundError(request.record.session_id)
            if stored.record.version != request.expected_version:
                raise SessionConflictError(request.record.session_id, request.expected_version)
            stored.record = replace(
                request.record, user_id=stored.record.user_id, created_at=stored.record.created_at
            )
            del stored.events[request.keep :]
            stored.events.extend(event.data for event in request.new_events)

    async def _delete(self, session_id: str, now: datetime) -> bool:
        with self._store.lock:
            stored = self._space.pop(self._key(session_id), None)
        return _live(stored, now) is not None


class CaseFoldedIdsManager(_KeyedManager, Broken):
    """Ids are keyed case-insensitively (a NOCASE collation, a lower-cased key)."""

    caught_by = frozenset(
        {
            "test_state_machine_agrees_with_the_reference",
            "test_ids_differing_in_case_space_or_metacharacters_are_distinct",
        }
    )

    def _key(self, session_id: str) -> str:
        return session_id.casefold()


class StrippedIdsManager(_KeyedManager, Broken):
    """Ids are keyed with surrounding whitespace stripped (a form-field habit)."""

    caught_by = frozenset(
        {
            "test_state_machine_agrees_with_the_reference",
            "test_ids_differing_in_case_space_or_metacharacters_are_distinct",
        }
    )

    def _key(self, session_id: str) -> str:
        return session_id.strip()


class FlatKeyspaceManager(_KeyedManager, Broken):
    """Every namespace shares one keyspace, keyed by namespace + id with no separator."""

    caught_by = frozenset({"test_namespace_and_id_never_collide"})

    @property
    def _space(self) -> dict[str, _Stored]:
        return self._store.spaces.setdefault("", {})

    def _key(self, session_id: str) -> str:
        return self.options.namespace + session_id

    async def _list(
        self, user_id: str | None, limit: int, after: tuple[datetime, str] | None, now: datetime
    ) -> list[SessionSummary]:
        prefix = self.options.namespace
        with self._store.lock:
            records = [
                stored.record
                for key, stored in self._space.items()
                if key.startswith(prefix)
                and _live(stored, now) is not None
                and (user_id is None or stored.record.user_id == user_id)
            ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        if after is not None:
            records = [r for r in records if (r.created_at, r.session_id) < after]
        return [record.summary() for record in records[:limit]]


class ColonKeyspaceManager(FlatKeyspaceManager):
    """One keyspace keyed ``namespace:id``, and the default namespace's keys are bare ids."""

    caught_by = frozenset({"test_namespace_and_id_never_collide"})

    def _key(self, session_id: str) -> str:
        namespace = self.options.namespace
        return f"{namespace}:{session_id}" if namespace else session_id


# -- SQLite based ------------------------------------------------------------------------


class _SQLiteBroken(SQLiteSessionManager):
    """A SQLite backend whose hooks run one replaced statement function."""

    async def _write(self, fn: Any, *args: Any) -> Any:
        return await self._writer.write(fn, self.options.namespace, *args)


def _delete_row_only(conn: sqlite3.Connection, ns: str, session_id: str, now: int) -> bool:
    row = conn.execute(sqlite_sql.SELECT_EXPIRY, (ns, session_id)).fetchone()
    if row is None:
        return False
    conn.execute(sqlite_sql.DELETE_SESSION, (ns, session_id))
    return row[0] is None or row[0] > now


class SQLiteDeleteLeavesEventsManager(_SQLiteBroken, Broken):
    """delete() removes the session row and forgets the event rows."""

    caught_by = frozenset(
        {"test_every_write_leaves_nothing_once_erased", "test_delete_erases_all_storage"}
    )

    async def _delete(self, session_id: str, now: datetime) -> bool:
        result: bool = await self._write(_delete_row_only, session_id, to_micros(now))
        return result


def _delete_user_rows_only(conn: sqlite3.Connection, ns: str, user_id: str, now: int) -> int:
    (live,) = conn.execute(sqlite_sql.COUNT_LIVE_OF_USER, (ns, user_id, now)).fetchone()
    conn.execute(sqlite_sql.DELETE_SESSIONS_OF_USER, (ns, user_id))
    return int(live)


class SQLiteDeleteUserLeavesEventsManager(_SQLiteBroken, Broken):
    """delete_user() removes the session rows and forgets their event rows."""

    caught_by = frozenset({"test_delete_user_erases_hundreds_of_sessions"})

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        result: int = await self._write(_delete_user_rows_only, user_id, to_micros(now))
        return result


def _delete_user_one_batch(conn: sqlite3.Connection, ns: str, user_id: str, now: int) -> int:
    ids = [
        sid
        for (sid,) in conn.execute(
            "SELECT session_id FROM agentsessions_sessions WHERE namespace = ? AND user_id = ?"
            " LIMIT 100",
            (ns, user_id),
        )
    ]
    for sid in ids:
        sqlite_impl._delete(conn, ns, sid, now)
    return len(ids)


class SQLiteDeleteUserOneBatchManager(_SQLiteBroken, Broken):
    """delete_user() deletes the first 100 sessions of the user and stops."""

    caught_by = frozenset({"test_delete_user_erases_hundreds_of_sessions"})

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        result: int = await self._write(_delete_user_one_batch, user_id, to_micros(now))
        return result


def _purge_rows_only(conn: sqlite3.Connection, ns: str, now: int) -> int:
    return conn.execute(sqlite_sql.DELETE_EXPIRED, (ns, now)).rowcount


class SQLitePurgeLeavesEventsManager(_SQLiteBroken, Broken):
    """purge_expired() deletes expired session rows and forgets their event rows."""

    caught_by = frozenset({"test_purge_expired_removes_exactly_the_expired"})

    async def _purge_expired(self, now: datetime) -> int:
        result: int = await self._write(_purge_rows_only, to_micros(now))
        return result


def _save_without_truncate(
    conn: sqlite3.Connection, ns: str, request: SaveRequest, now: int
) -> None:
    sqlite_impl._save(conn, ns, replace(request, stored_event_count=request.keep), now)


class SQLiteTruncateLeavesRowsManager(_SQLiteBroken, Broken):
    """A save that removes events from the end never deletes their rows."""

    caught_by = frozenset({"test_save_removes_events_from_end", "test_save_clears_events"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        if request.new_events:
            await super()._save(request, now)
        else:
            await self._write(_save_without_truncate, request, to_micros(now))


def _save_positions_from_one(
    conn: sqlite3.Connection, ns: str, request: SaveRequest, now: int
) -> None:
    moved = [replace(event, position=event.position + 1) for event in request.new_events]
    sqlite_impl._save(conn, ns, replace(request, new_events=moved), now)


class SQLiteOffByOnePositionsManager(_SQLiteBroken, Broken):
    """Event rows are numbered from 1 (reads still come back in order)."""

    caught_by = frozenset({"test_save_appends_events", "test_delete_erases_all_storage"})

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await self._write(_save_positions_from_one, request, to_micros(now))


def _create_keeping_events(
    conn: sqlite3.Connection, ns: str, record: SessionRecord, now: int
) -> bool:
    cursor = conn.execute(
        sqlite_sql.CREATE,
        (ns, *encode_record(record, micros=True), *fork_fields(record), now),
    )
    return cursor.rowcount > 0


class SQLiteCreateKeepsOldEventsManager(_SQLiteBroken, Broken):
    """create() over an expired session reuses its row and keeps its old event rows."""

    caught_by = frozenset({"test_ttl_expired_id_can_be_created_again"})

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        if not await self._write(_create_keeping_events, record, to_micros(now)):
            raise SessionExistsError(record.session_id)


class SQLiteWallClockManager(_SQLiteBroken, Broken):
    """Reads compare expiry with the machine's clock, not the manager's."""

    caught_by = frozenset({"test_ttl_expired_session_is_absent", "test_ttl_save_refreshes_expiry"})

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        return await super()._load(session_id, last_events, _real_now())


class SQLiteNoVersionCheckManager(_SQLiteBroken, Broken):
    """The save's UPDATE has no version condition: the last writer wins."""

    caught_by = frozenset(
        {"test_save_stale_copy_raises_conflict", "test_update_retries_a_lost_race"}
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        loaded = await self._load(request.record.session_id, 0, now)
        if loaded is not None:
            request = replace(request, expected_version=loaded.record.version)
        await super()._save(request, now)


class SQLiteSaveKeepsLineageManager(_SQLiteBroken, Broken):
    """A save never writes the lineage column (the UPDATE leaves it as created), so a
    history rewritten by a save still looks like an extension of older copies."""

    caught_by = frozenset(
        {
            "test_load_since_after_a_rewrite_returns_every_event",
            "test_update_retry_sees_a_rewritten_history",
        }
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        stored = await self._load(request.record.session_id, 0, now)
        if stored is not None:
            record = replace(request.record, lineage=stored.record.lineage)
            request = replace(request, record=record)
        await super()._save(request, now)


# -- compaction ---------------------------------------------------------------------------


class CompactIgnoresVersionManager(MemorySessionManager, Broken):
    """compact() replaces the prefix whatever version is stored: a stale copy compacts
    over a save that landed since its load."""

    caught_by = frozenset({"test_compact_is_version_checked"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            current = request.expected_version if stored is None else stored.record.version
        await super()._compact(replace(request, expected_version=current), now)


class CompactEarlierLifeManager(MemorySessionManager, Broken):
    """compact() checks the version alone: a copy of an earlier life of the id compacts
    the new life where the versions match."""

    caught_by = frozenset(
        {
            "test_every_write_of_an_earlier_lifes_copy_is_a_conflict",
            "test_compact_copy_of_earlier_life_raises_conflict",
        }
    )

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await super()._compact(replace(request, expected_lineage=""), now)


class CompactAlwaysArchivesManager(MemorySessionManager, Broken):
    """compact() archives the replaced events even when not asked to (keeps what the
    application compacted away)."""

    caught_by = frozenset({"test_compact_archives_only_when_asked"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await super()._compact(replace(request, archive=True), now)


class SQLiteCompactForgetsArchiveManager(_SQLiteBroken, Broken):
    """compact(archive=True) deletes the replaced rows without archiving them."""

    caught_by = frozenset({"test_compact_archives_only_when_asked"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await super()._compact(replace(request, archive=False), now)


def _compact_keeping_rows(
    conn: sqlite3.Connection, ns: str, request: CompactRequest, now: int
) -> None:
    # The replaced rows stay below the new first position: invisible to tail reads only.
    shifted = replace(request, replaced=len(request.new_events), archive=False)
    sqlite_impl._compact(
        conn, ns, replace(shifted, stored_event_count=request.stored_event_count), now
    )
    conn.execute(
        "UPDATE agentsessions_sessions SET event_count = ? WHERE namespace = ? AND session_id = ?",
        (request.event_count, ns, request.session_id),
    )


class SQLiteCompactLeavesRowsManager(_SQLiteBroken, Broken):
    """compact() overwrites the head's first rows and leaves the other replaced rows
    stored (a full read returns them)."""

    caught_by = frozenset(
        {
            "test_compact_replaces_the_prefix",
            "test_compact_twice_and_rewrite",
            "test_compact_archives_only_when_asked",
        }
    )

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await self._write(_compact_keeping_rows, request, to_micros(now))


# -- branching ----------------------------------------------------------------------------


class ForkIgnoresCutManager(MemorySessionManager, Broken):
    """fork() copies the whole history whatever event the cut names."""

    caught_by = frozenset({"test_fork_holds_the_cut_prefix_and_the_state"})

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        record = await super()._fork(replace(request, through_event_id=None), now)
        assert record.forked_from is not None
        origin = record.forked_from.model_copy(update={"event_id": request.through_event_id})
        record = replace(record, forked_from=origin)
        with self._store.lock:
            self._space[request.session_id].record = record
        return record


class ForkOverwritesManager(MemorySessionManager, Broken):
    """fork() onto a live id replaces it (a blind SET of the new keys)."""

    caught_by = frozenset({"test_fork_never_overwrites_and_fails_whole"})

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        with self._store.lock:
            self._space.pop(request.session_id, None)
        return await super()._fork(request, now)


class ForkMixesVersionsManager(MemorySessionManager, Broken):
    """fork() reads the events, then (after a round trip) the record: a save landing in
    between gives the fork one version's events and the next one's state."""

    caught_by = frozenset({"test_fork_during_saves_is_one_version"})

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        with self._store.lock:
            source = _live(self._space.get(request.source_id), now)
            texts = [] if source is None else list(source.events)
        await asyncio.sleep(0.005)
        record = await super()._fork(request, now)
        with self._store.lock:
            self._space[request.session_id].events = texts
        return replace(record, event_count=len(texts))


class RewindIgnoresVersionManager(MemorySessionManager, Broken):
    """rewind() cuts whatever version is stored: a stale copy drops a save that landed."""

    caught_by = frozenset({"test_rewind_is_version_checked"})

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            current = request.expected_version if stored is None else stored.record.version
            lineage = "" if stored is None else stored.record.lineage
        await super()._rewind(
            replace(request, expected_version=current, expected_lineage=lineage), now
        )


class RewindKeepsRowsManager(MemorySessionManager, Broken):
    """rewind() moves the event count and leaves the dropped events stored."""

    caught_by = frozenset({"test_rewind_drops_the_tail"})

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            texts = [] if stored is None else list(stored.events)
        await super()._rewind(request, now)
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            if stored is not None:
                stored.events = texts


class ForksSurviveDeleteUserManager(MemorySessionManager, Broken):
    """delete_user() spares forks (it walks the user's own sessions, not their copies)."""

    caught_by = frozenset(
        {"test_every_write_leaves_nothing_once_erased", "test_forks_are_erased_like_any_session"}
    )

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            space = self._space
            doomed = [
                sid
                for sid, stored in space.items()
                if stored.record.user_id == user_id and stored.record.forked_from is None
            ]
            return sum(_live(space.pop(sid), now) is not None for sid in doomed)


class ListForksTakesDescendantsManager(MemorySessionManager, Broken):
    """list_sessions(forked_from=ID) lists every fork, not only ID's."""

    caught_by = frozenset({"test_list_forks_pages_through_one_sources_forks"})

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        listed = await self._list(user_id, 10_000, after, now)
        return [s for s in listed if s.forked_from is not None][:limit]


# -- the newer operations held to the older ones' standard (issue 31, item 8) -----------

_REFUSES_EXPIRED = "test_ttl_expired_session_refuses_compaction_and_hides_its_archive"
_RECREATED = "test_recreated_id_keeps_nothing_of_its_expired_life"


class CompactRevivesExpiredManager(MemorySessionManager, Broken):
    """compact() forgets the expiry condition: an expired session's compaction lands."""

    caught_by = frozenset({_REFUSES_EXPIRED})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        await super()._compact(request, datetime(1970, 1, 1, tzinfo=timezone.utc))


class ArchiveIgnoresExpiryManager(MemorySessionManager, Broken):
    """archived_events() reads the archive of an expired session (no liveness check)."""

    caught_by = frozenset(
        {"test_every_operation_treats_an_expired_session_as_absent", _REFUSES_EXPIRED}
    )

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        with self._store.lock:
            stored = self._space.get(session_id)
            return [] if stored is None else list(stored.archive)


class SinceIgnoresExpiryManager(MemorySessionManager, Broken):
    """_load_since() (the refresh of a copy that lost a race) forgets the expiry."""

    caught_by = frozenset({_REFUSES_EXPIRED})

    async def _load_since(
        self, session_id: str, event_count: int, lineage: str, now: datetime
    ) -> LoadedSession | None:
        with self._store.lock:
            stored = self._space.get(session_id)
            if stored is None:
                return None
            record = stored.record
            texts = stored.events[record.since_position(event_count, lineage) :]
        return LoadedSession(record, decode_events(texts))


class CompactKeepsExpiryManager(MemorySessionManager, Broken):
    """compact() keeps the stored expiry: the ttl counts from the last save only."""

    caught_by = frozenset({"test_ttl_compaction_refreshes_expiry"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        stored = self._space.get(request.session_id)
        if stored is not None:
            request = replace(request, expires_at=stored.record.expires_at)
        await super()._compact(request, now)


def _archived_of_any_age(conn: sqlite3.Connection, ns: str, session_id: str) -> list[str]:
    rows = conn.execute(sqlite_sql.SELECT_ARCHIVE, (ns, session_id)).fetchall()
    return [row[0] for row in rows]


class SQLiteArchiveIgnoresExpiryManager(_SQLiteBroken, Broken):
    """SQLite's archive query has no liveness condition: an expired session's archive reads."""

    caught_by = frozenset({_REFUSES_EXPIRED})

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        texts: list[str] = await self._write(_archived_of_any_age, session_id)
        return texts


class ArchiveAcrossNamespacesManager(MemorySessionManager, Broken):
    """archived_events() reads the id's archive in every namespace (a key without the
    namespace prefix)."""

    caught_by = frozenset(
        {
            "test_every_operation_in_another_namespace_sees_and_touches_nothing",
            "test_namespaces_scope_compaction_and_its_archive",
        }
    )

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        with self._store.lock:
            texts: list[str] = []
            for space in self._store.spaces.values():
                stored = _live(space.get(session_id), now)
                if stored is not None:
                    texts.extend(stored.archive)
            return texts


class RestoreChecksEveryNamespaceManager(MemorySessionManager, Broken):
    """restore() refuses an id that is live in any namespace (an existence check without
    the namespace)."""

    caught_by = frozenset(
        {
            "test_every_operation_in_another_namespace_sees_and_touches_nothing",
            "test_namespaces_scope_restore_load_since_and_tokens",
        }
    )

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        with self._store.lock:
            for space in self._store.spaces.values():
                if _live(space.get(record.session_id), now) is not None:
                    raise SessionExistsError(record.session_id)
        await super()._restore(record, events, now)


class TokensAcrossNamespacesManager(MemorySessionManager, Broken):
    """A write's token is looked up under the id in every namespace (a token key without
    the namespace prefix): a save of another namespace's session passes for a retry."""

    caught_by = frozenset({"test_namespaces_scope_restore_load_since_and_tokens"})

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        if any(
            request.token in stored.tokens
            for space in self._store.spaces.values()
            if (stored := space.get(session_id)) is not None
        ):
            return None
        return super()._writable(session_id, request, now)


class TornCompactionManager(MemorySessionManager, Broken):
    """compact() deletes the replaced events, then (after a round trip) inserts the
    replacement and writes the record: a reader sees the history without either."""

    caught_by = frozenset({"test_reader_never_sees_half_a_compaction"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        with self._store.lock:
            stored = self._writable(request.session_id, request, now)
            if stored is None:
                return
            if request.archive:
                stored.archive.extend(stored.events[: request.replaced])
            del stored.events[: request.replaced]
        await asyncio.sleep(0.001)  # the second statement, outside any transaction
        with self._store.lock:
            stored.events[:0] = [event.data for event in request.new_events]
            stored.record = replace(
                stored.record,
                version=request.version,
                updated_at=request.updated_at,
                expires_at=request.expires_at,
                event_count=len(stored.events),
                lineage=request.lineage,
            )
            stored.tokens.append(request.token)


class TornRestoreManager(MemorySessionManager, Broken):
    """restore() inserts the record, then its events in batches, each its own statement."""

    caught_by = frozenset({"test_reader_never_sees_half_a_restore"})

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        with self._store.lock:
            if _live(self._space.get(record.session_id), now) is not None:
                raise SessionExistsError(record.session_id)
            stored = _Stored(record, [])
            self._space[record.session_id] = stored
        for first in range(0, len(events), 10):
            await asyncio.sleep(0.001)
            with self._store.lock:
                stored.events.extend(event.data for event in events[first : first + 10])


class CompactCheckThenWriteManager(MemorySessionManager, Broken):
    """compact() checks the version, then writes in a later statement without holding
    anything: compactions racing from one version all land."""

    caught_by = frozenset({"test_concurrent_compactions_exactly_one_lands"})

    async def _compact(self, request: CompactRequest, now: datetime) -> None:
        with self._store.lock:
            self._writable(request.session_id, request, now)
        await asyncio.sleep(0.002)
        with self._store.lock:
            stored = self._space[request.session_id]
            if request.archive:
                stored.archive.extend(stored.events[: request.replaced])
            stored.events[: request.replaced] = [event.data for event in request.new_events]
            stored.record = replace(
                stored.record,
                version=request.version,
                updated_at=request.updated_at,
                expires_at=request.expires_at,
                event_count=len(stored.events),
                lineage=request.lineage,
            )


class RestoreCheckThenInsertManager(MemorySessionManager, Broken):
    """restore() checks the id is free, then inserts in a later statement: restores racing
    for one id all succeed, the last one's data stored."""

    caught_by = frozenset(
        {
            "test_concurrent_restores_one_wins",
            "test_concurrent_restores_across_managers",
            "test_concurrent_restores_over_an_expired_id_one_wins",
        }
    )

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        with self._store.lock:
            if _live(self._space.get(record.session_id), now) is not None:
                raise SessionExistsError(record.session_id)
        await asyncio.sleep(0.002)
        with self._store.lock:
            self._space[record.session_id] = _Stored(record, [event.data for event in events])


def _replacing(manager: MemorySessionManager, session_id: str, now: datetime) -> _Stored | None:
    """The expired session a create, restore or fork of *session_id* replaces, if any."""
    stored = manager._space.get(session_id)
    return stored if stored is not None and _live(stored, now) is None else None


class _RecreateVariant(MemorySessionManager):
    """A create, restore and fork that carry something of the expired life they replace."""

    def _carry(self, old: _Stored, new: _Stored) -> None:
        raise NotImplementedError

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        old = _replacing(self, record.session_id, now)
        await super()._create(record, now)
        self._carried(old, record.session_id)

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        old = _replacing(self, record.session_id, now)
        await super()._restore(record, events, now)
        self._carried(old, record.session_id)

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        old = _replacing(self, request.session_id, now)
        record = await super()._fork(request, now)
        self._carried(old, request.session_id)
        return record

    def _carried(self, old: _Stored | None, session_id: str) -> None:
        if old is not None:
            with self._store.lock:
                self._carry(old, self._space[session_id])


class RecreateKeepsArchiveManager(_RecreateVariant, Broken):
    """A create, restore or fork over an expired id keeps the old life's archive."""

    caught_by = frozenset({_RECREATED})

    def _carry(self, old: _Stored, new: _Stored) -> None:
        new.archive = list(old.archive)


class RecreateKeepsTokensManager(_RecreateVariant, Broken):
    """A create, restore or fork over an expired id keeps the old life's save tokens: a
    retried save of the old life passes for one that landed in the new."""

    caught_by = frozenset({_RECREATED})

    def _carry(self, old: _Stored, new: _Stored) -> None:
        new.tokens.extend(old.tokens)


class RecreateKeepsExpiryManager(_RecreateVariant, Broken):
    """A create, restore or fork without a ttl over an expired id keeps the old expiry
    (``COALESCE(new.expires_at, old.expires_at)``)."""

    caught_by = frozenset({_RECREATED})

    def _carry(self, old: _Stored, new: _Stored) -> None:
        if new.record.expires_at is None:
            new.record = replace(new.record, expires_at=old.record.expires_at)


class UserIndexKeepsOldOwnerManager(MemorySessionManager, Broken):
    """Owners are kept in a user index (as Redis keeps a set per user) that a create,
    restore or fork over an expired id adds to without removing the old owner: the old
    owner still lists, and delete_user() still deletes, the new life."""

    caught_by = frozenset({_RECREATED})

    @property
    def _owners(self) -> dict[tuple[str, str], set[str | None]]:
        owners: dict[tuple[str, str], set[str | None]] = self._store.__dict__.setdefault(
            "owners", {}
        )
        return owners

    def _own(self, record: SessionRecord) -> None:
        key = (self.options.namespace, record.session_id)
        self._owners.setdefault(key, set()).add(record.user_id)

    def _owned_by(self, user_id: str) -> set[str]:
        namespace = self.options.namespace
        owners = self._owners.items()
        return {sid for (ns, sid), users in owners if ns == namespace and user_id in users}

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        await super()._create(record, now)
        self._own(record)

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        await super()._restore(record, events, now)
        self._own(record)

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        record = await super()._fork(request, now)
        self._own(record)
        return record

    async def _delete(self, session_id: str, now: datetime) -> bool:
        self._owners.pop((self.options.namespace, session_id), None)
        return await super()._delete(session_id, now)

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        deleted = 0
        for session_id in self._owned_by(user_id):
            deleted += await self._delete(session_id, now)
        return deleted

    async def _list(
        self, user_id: str | None, limit: int, after: tuple[datetime, str] | None, now: datetime
    ) -> list[SessionSummary]:
        if user_id is None:
            return await super()._list(user_id, limit, after, now)
        owned = self._owned_by(user_id)
        with self._store.lock:
            records = [
                stored.record
                for sid, stored in self._space.items()
                if sid in owned and _live(stored, now) is not None
            ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        if after is not None:
            records = [r for r in records if (r.created_at, r.session_id) < after]
        return [record.summary() for record in records[:limit]]


def _create_keeping_first_position(
    conn: sqlite3.Connection, ns: str, record: SessionRecord, now: int
) -> bool:
    statement = sqlite_sql.CREATE.replace("first_position = 0, ", "")
    assert statement != sqlite_sql.CREATE, "SQLite's CREATE no longer resets first_position"
    cursor = conn.execute(
        statement, (ns, *encode_record(record, micros=True), *fork_fields(record), now)
    )
    if cursor.rowcount == 0:
        return False
    conn.execute(sqlite_sql.DELETE_EVENTS, (ns, record.session_id))
    conn.execute(sqlite_sql.DELETE_ARCHIVE, (ns, record.session_id))
    return True


def _restore_keeping_first_position(
    conn: sqlite3.Connection, ns: str, record: SessionRecord, events: list[EventRecord], now: int
) -> bool:
    if not _create_keeping_first_position(conn, ns, record, now):
        return False
    conn.executemany(
        sqlite_sql.INSERT_EVENT,
        [(ns, record.session_id, event.position, event.data) for event in events],
    )
    return True


class SQLiteRecreateKeepsFirstPositionManager(_SQLiteBroken, Broken):
    """create() and restore() over an expired, compacted session keep its first position
    (moved by the compaction), while restore() writes its events from position 0."""

    caught_by = frozenset({_RECREATED})

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        if not await self._write(_create_keeping_first_position, record, to_micros(now)):
            raise SessionExistsError(record.session_id)

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        written = await self._write(_restore_keeping_first_position, record, events, to_micros(now))
        if not written:
            raise SessionExistsError(record.session_id)


class ShortTokenWindowManager(MemorySessionManager, Broken):
    """Only the latest 16 write tokens of a session are recognised, not TOKENS_KEPT."""

    caught_by = frozenset({"test_save_token_window_is_the_sessions_last_writes"})

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        stored = _live(self._space.get(session_id), now)
        if stored is not None and request.token not in list(stored.tokens)[-16:]:
            request = replace(request, token="")  # a token that is never found
        return super()._writable(session_id, request, now)


class StoreWideTokenWindowManager(MemorySessionManager, Broken):
    """The latest TOKENS_KEPT tokens are kept for the whole store, not per session: writes
    to other sessions push a session's own tokens out."""

    caught_by = frozenset({"test_save_token_window_is_the_sessions_last_writes"})

    def _window(self) -> deque[str]:
        window: deque[str] = self._store.__dict__.setdefault("tokens", deque(maxlen=TOKENS_KEPT))
        return window

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        if _live(self._space.get(session_id), now) is not None and request.token in self._window():
            return None
        stored = super()._writable(session_id, replace(request, token=""), now)
        if stored is not None:
            self._window().append(request.token)
        return stored


# -- lost replies ------------------------------------------------------------------------

_TOKEN_CLAUSES = frozenset(
    {
        "test_lost_reply_save_retry_lands_exactly_once",
        "test_lost_reply_update_applies_fn_once",
        "test_lost_replies_one_after_another_each_land_once",
        "test_list_append_history_has_no_anomaly",
        # Its lost-reply rule: a save whose reply is lost, saved again unchanged.
        "test_state_machine_agrees_with_the_reference",
    }
)


class TokenIgnoringSaveManager(MemorySessionManager, Broken):
    """save() never recognises its own token: each request is stored under a token of its
    own making, so the retry of a save whose reply was lost looks like a stranger's."""

    caught_by = _TOKEN_CLAUSES

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await super()._save(replace(request, token=os.urandom(16).hex()), now)


class SQLiteTokenIgnoringSaveManager(_SQLiteBroken, Broken):
    """SQLite's save stores a fresh token instead of the request's (the check after a
    failed version check then never finds the save that landed)."""

    caught_by = _TOKEN_CLAUSES

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await super()._save(replace(request, token=os.urandom(16).hex()), now)


# -- erasure racing writes ----------------------------------------------------------------


class DeleteUserSkipsBusyManager(MemorySessionManager, Broken):
    """delete_user() lists the user's sessions, then deletes each one only if no save moved
    its version meanwhile (the analogue of skipping rows a concurrent save holds locked)."""

    caught_by = frozenset({"test_delete_user_racing_saves_erases_every_session"})

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        with self._store.lock:
            listed = [
                (sid, stored.record.version)
                for sid, stored in self._space.items()
                if stored.record.user_id == user_id
            ]
        deleted = 0
        for sid, version in listed:
            await asyncio.sleep(0.002)  # one statement per session, as a batched delete does
            with self._store.lock:
                stored = _live(self._space.get(sid), now)
                if stored is not None and stored.record.version == version:
                    del self._space[sid]
                    deleted += 1
        return deleted


def _broken_classes() -> dict[str, type[SessionManager]]:
    # The rules' backends live in a module of their own (it imports `Broken` from here).
    from conformance import broken_machine, broken_rules

    found: dict[str, type[SessionManager]] = {}
    for name, value in [
        *globals().items(),
        *vars(broken_rules).items(),
        *vars(broken_machine).items(),
    ]:
        if (
            isinstance(value, type)
            and issubclass(value, Broken)
            and issubclass(value, SessionManager)
            and "caught_by" in vars(value)
        ):
            found[name.removesuffix("Manager")] = value
    return found


#: Name -> broken backend class (its ``caught_by`` names the clauses that catch it).
BROKEN: dict[str, type[SessionManager]] = _broken_classes()
#: The real backends the broken ones derive from: they pass every clause used here.
REFERENCES: dict[str, type[SessionManager]] = {
    "Memory": MemorySessionManager,
    "SQLite": SQLiteSessionManager,
}
