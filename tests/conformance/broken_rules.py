"""Broken backends for the cross-cutting rules on branching and save tokens, and for the
layout boundaries (issue 43).

Each is one realistic bug that passed the whole kit before `_tests_newops_rules`; its
``caught_by`` names the clauses that must now fail on it. They join `broken.BROKEN`.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from dataclasses import replace
from datetime import datetime
from typing import Any

from agentsessions import (
    MemorySessionManager,
    SessionNotFoundError,
    SessionSummary,
)
from agentsessions._memory import _live, _Stored
from agentsessions.backend import (
    TOKENS_KEPT,
    CompactRequest,
    EventRecord,
    ForkRequest,
    RewindRequest,
    SaveRequest,
    SessionRecord,
    decode_events,
    to_micros,
)
from agentsessions_sqlite import SQLiteSessionManager
from agentsessions_sqlite import _statements as sqlite_sql

from conformance.broken import Broken

__all__ = [
    "ArchiveSlicesOverlapManager",
    "DeleteUserErasesEveryArchiveManager",
    "DeleteUserLeavesArchiveManager",
    "ErasedForkStaysIndexedManager",
    "ForkCursorTiesManager",
    "ForkOfExpiredSourceManager",
    "ForksOfEveryNamespaceManager",
    "ListsExpiredForksManager",
    "RewindArchivesAllButTheLastManager",
    "RewindIgnoresLineageManager",
    "RewindResetsTokensManager",
    "TailBucketOffByOneManager",
    "TokenOfAnySessionManager",
    "TokensKeepOldestManager",
]


def _forks_of(stored: list[_Stored], source_id: str, now: datetime | None) -> list[SessionRecord]:
    """The records of *source_id*'s forks among *stored*, live at *now* (any when None),
    newest first: the reference listing, but for what each broken backend changes."""
    records = [
        item.record
        for item in stored
        if (now is None or _live(item, now) is not None)
        and item.record.forked_from is not None
        and item.record.forked_from.session_id == source_id
    ]
    records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
    return records


def _page(
    records: list[SessionRecord], limit: int, after: tuple[datetime, str] | None
) -> list[SessionSummary]:
    if after is not None:
        records = [r for r in records if (r.created_at, r.session_id) < after]
    return [record.summary() for record in records[:limit]]


class ForksOfEveryNamespaceManager(MemorySessionManager, Broken):
    """list_sessions(forked_from=) looks for forks in every namespace."""

    caught_by = frozenset(
        {
            "test_every_operation_in_another_namespace_sees_and_touches_nothing",
            "test_fork_listing_never_shows_another_namespaces_forks",
        }
    )

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            every = [item for space in self._store.spaces.values() for item in space.values()]
        return _page(_forks_of(every, source_id, now), limit, after)


class ListsExpiredForksManager(MemorySessionManager, Broken):
    """list_sessions(forked_from=) lists forks past their ttl."""

    caught_by = frozenset(
        {
            "test_every_operation_treats_an_expired_session_as_absent",
            "test_fork_listing_skips_expired_forks",
        }
    )

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            mine = list(self._space.values())
        return _page(_forks_of(mine, source_id, None), limit, after)


class ErasedForkStaysIndexedManager(MemorySessionManager, Broken):
    """Forks are listed from an index of fork ids per source, which fork() adds to and
    delete() and delete_user() never clean; the listing takes each indexed id that is
    live, without checking that the session now under it is still a fork of that source:
    an erased fork's id, used again, lists under its old source."""

    caught_by = frozenset({"test_an_erased_forks_id_used_again_is_listed_under_its_new_source"})

    def _fork_index(self) -> dict[str, set[str]]:
        """Source id -> the ids of its forks, in this manager's namespace (under the lock)."""
        spaces: dict[str, dict[str, set[str]]] = self._store.__dict__.setdefault("forks", {})
        return spaces.setdefault(self.options.namespace, {})

    def _index(self, record: SessionRecord) -> None:
        if record.forked_from is not None:
            with self._store.lock:
                forks = self._fork_index().setdefault(record.forked_from.session_id, set())
                forks.add(record.session_id)

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        record = await super()._fork(request, now)
        self._index(record)
        return record

    async def _restore(
        self, record: SessionRecord, events: list[EventRecord], now: datetime
    ) -> None:
        await super()._restore(record, events, now)
        self._index(record)

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            space = self._space
            found = [
                _live(space.get(fork_id), now) for fork_id in self._fork_index().get(source_id, ())
            ]
        records = [
            stored.record
            for stored in found
            if stored is not None and (user_id is None or stored.record.user_id == user_id)
        ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        return _page(records, limit, after)


class ForkCursorTiesManager(MemorySessionManager, Broken):
    """The fork listing's cursor compares timestamps only: forks made in the same
    microsecond as a page's last one are skipped."""

    caught_by = frozenset({"test_listings_page_through_ties_exactly_once"})

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        with self._store.lock:
            records = _forks_of(list(self._space.values()), source_id, now)
        if after is not None:
            records = [r for r in records if r.created_at < after[0]]
        return [record.summary() for record in records[:limit]]


class ForkOfExpiredSourceManager(MemorySessionManager, Broken):
    """fork() copies a source that expired but was not purged yet."""

    caught_by = frozenset(
        {
            "test_every_operation_treats_an_expired_session_as_absent",
            "test_fork_of_an_expired_source_is_not_found",
        }
    )

    async def _fork(self, request: ForkRequest, now: datetime) -> SessionRecord:
        with self._store.lock:
            source = self._space.get(request.source_id)
            if source is None:
                raise SessionNotFoundError(request.source_id)
            expires = source.record.expires_at
            source.record = replace(source.record, expires_at=None)
        try:
            return await super()._fork(request, now)
        finally:
            with self._store.lock:
                source.record = replace(source.record, expires_at=expires)


class RewindIgnoresLineageManager(MemorySessionManager, Broken):
    """rewind() checks the version but not the lineage."""

    caught_by = frozenset(
        {
            "test_every_write_of_an_earlier_lifes_copy_is_a_conflict",
            "test_rewind_of_an_earlier_lifes_copy_is_a_conflict",
        }
    )

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        with self._store.lock:
            stored = _live(self._space.get(request.session_id), now)
            if stored is not None and stored.record.version == request.expected_version:
                lineage = request.expected_lineage or stored.record.lineage
                stored.record = replace(stored.record, lineage=lineage)
        await super()._rewind(request, now)


class RewindArchivesAllButTheLastManager(MemorySessionManager, Broken):
    """rewind(archive=True) archives the events it drops but the last one (a slice that
    stops one short): the newest dropped event is lost rather than archived."""

    caught_by = frozenset(
        {
            "test_rewind_drops_the_tail",
            "test_rewinds_cut_at_every_boundary_drop_exactly_the_tail",
        }
    )

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        with self._store.lock:
            stored = self._space.get(request.session_id)
            archived = -1 if stored is None else len(stored.archive)
        await super()._rewind(request, now)
        with self._store.lock:
            if stored is not None and request.archive and len(stored.archive) > archived:
                stored.archive.pop()


class RewindResetsTokensManager(MemorySessionManager, Broken):
    """rewind() starts the session's token list afresh."""

    caught_by = frozenset({"test_rewind_keeps_the_save_token_window"})

    async def _rewind(self, request: RewindRequest, now: datetime) -> None:
        await super()._rewind(request, now)
        with self._store.lock:
            stored = self._space.get(request.session_id)
            if stored is not None:
                stored.tokens = deque([request.token], maxlen=TOKENS_KEPT)


class TokenOfAnySessionManager(MemorySessionManager, Broken):
    """A save's token is looked up among the tokens of every session of the namespace."""

    caught_by = frozenset({"test_a_save_token_is_recognised_only_for_its_own_session"})

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        if any(request.token in stored.tokens for stored in self._space.values()):
            if _live(self._space.get(session_id), now) is None:
                raise SessionNotFoundError(session_id)
            return None
        return super()._writable(session_id, request, now)


class _OldestFirst(deque[str]):
    """A token list that stops taking tokens once full, keeping the oldest."""

    def append(self, token: str) -> None:
        if len(self) < TOKENS_KEPT:
            super().append(token)


class TokensKeepOldestManager(MemorySessionManager, Broken):
    """The session's token list keeps its first TOKENS_KEPT tokens, not its last."""

    caught_by = frozenset({"test_the_token_window_holds_the_newest_writes_of_a_long_lived_session"})

    def _writable(
        self, session_id: str, request: SaveRequest | CompactRequest | RewindRequest, now: datetime
    ) -> _Stored | None:
        stored = _live(self._space.get(session_id), now)
        if stored is not None and not isinstance(stored.tokens, _OldestFirst):
            stored.tokens = _OldestFirst(stored.tokens)
        return super()._writable(session_id, request, now)


# The archive statement each broken delete_user runs instead of ours: none at all, or
# one that forgot the archive's own namespace (the same ids in every namespace go).
_EVERY_NAMESPACE = (
    "DELETE FROM agentsessions_archive WHERE session_id IN ("
    "SELECT session_id FROM agentsessions_sessions WHERE namespace = ? AND user_id = ?)"
)


def _delete_user_with(archive_sql: str | None) -> Any:
    def delete_user(conn: sqlite3.Connection, namespace: str, user_id: str, now: int) -> int:
        count = sqlite_sql.COUNT_LIVE_OF_USER
        (live,) = conn.execute(count, (namespace, user_id, now)).fetchone()
        conn.execute(sqlite_sql.DELETE_EVENTS_OF_USER, (namespace, namespace, user_id))
        if archive_sql is not None:
            conn.execute(archive_sql, (namespace, user_id))
        conn.execute(sqlite_sql.DELETE_SESSIONS_OF_USER, (namespace, user_id))
        return int(live)

    return delete_user


class _SQLiteDeleteUser(SQLiteSessionManager):
    archive_sql: str | None = None

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        run = _delete_user_with(self.archive_sql)
        result: Any = await self._writer.write(run, self.options.namespace, user_id, to_micros(now))
        return int(result)


class DeleteUserLeavesArchiveManager(_SQLiteDeleteUser, Broken):
    """delete_user() deletes the sessions and their events, not their archives."""

    caught_by = frozenset(
        {
            "test_every_write_leaves_nothing_once_erased",
            "test_delete_user_erases_archives_in_its_namespace_only",
        }
    )


class DeleteUserErasesEveryArchiveManager(_SQLiteDeleteUser, Broken):
    """delete_user() erases the archives of the user's session ids in every namespace."""

    caught_by = frozenset({"test_delete_user_erases_archives_in_its_namespace_only"})
    archive_sql = _EVERY_NAMESPACE


# -- layout boundaries ---------------------------------------------------------------------

#: The events of one bucket of the staged bucket layout.
_BUCKET = 64


class TailBucketOffByOneManager(MemorySessionManager, Broken):
    """Buckets of 64 events, located one event too far: a tail read that starts at a
    bucket's last event starts at the next bucket instead, and misses that event."""

    caught_by = frozenset({"test_reads_of_every_boundary_size_return_exactly_those_events"})

    async def _load(self, session_id: str, last_events: int | None, now: datetime) -> Any:
        loaded = await super()._load(session_id, last_events, now)
        if loaded is None or not last_events:
            return loaded
        with self._store.lock:
            stored = self._space[session_id]
            start = max(0, len(stored.events) - last_events)
            if start % _BUCKET == _BUCKET - 1:
                start += 1
            texts = stored.events[start:]
        return replace(loaded, events=decode_events(texts))


class ArchiveSlicesOverlapManager(MemorySessionManager, Broken):
    """archived_events reads the archive in slices of 1,000 whose bounds overlap by one:
    past 1,000 archived events, an event comes back twice."""

    caught_by = frozenset(
        {
            "test_compactions_cut_at_every_boundary_keep_and_archive_exactly",
            "test_rewinds_cut_at_every_boundary_drop_exactly_the_tail",
        }
    )

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        whole = await super()._archived(session_id, now)
        texts: list[str] = []
        start = 0
        while start < len(whole):
            texts += whole[start : start + 1000]
            start += 999  # the next slice starts at this one's last event
        return texts
