"""Deliberately broken backends: each breaks one promise, and the kit must notice exactly that.

Each is a small subclass of the reference memory backend, so everything it does not
break behaves exactly as the reference does.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from agentsessions import (
    MemorySessionManager,
    Session,
    SessionManager,
    SessionNotFoundError,
    SessionSummary,
)
from agentsessions._memory import _live, _Stored
from agentsessions.backend import SaveRequest, SessionRecord

__all__ = [
    "AliasingManager",
    "LeakyNamespaceManager",
    "LostSaveManager",
    "OverwritingCreateManager",
]


class OverwritingCreateManager(MemorySessionManager):
    """create() of an existing id silently replaces it (a blind INSERT OR REPLACE / SET)."""

    async def _create(self, record: SessionRecord, now: datetime) -> None:
        with self._store.lock:
            self._space[record.session_id] = _Stored(record, [])


class LostSaveManager(MemorySessionManager):
    """save() never checks the stored version: concurrent saves overwrite each other."""

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


class AliasingManager(MemorySessionManager):
    """get() and create() hand out the very objects they cached, not copies."""

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


class LeakyNamespaceManager(MemorySessionManager):
    """Listing and delete_user ignore the namespace (a key pattern without the prefix)."""

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        count = 0
        with self._store.lock:
            for space in self._store.spaces.values():
                doomed = [sid for sid, s in space.items() if s.record.user_id == user_id]
                for sid in doomed:
                    del space[sid]
                count += len(doomed)
        return count

    async def _list(
        self, user_id: str | None, limit: int, after: tuple[datetime, str] | None, now: datetime
    ) -> list[SessionSummary]:
        with self._store.lock:
            records = [
                stored.record
                for space in self._store.spaces.values()
                for stored in space.values()
                if _live(stored, now) is not None
                and (user_id is None or stored.record.user_id == user_id)
            ]
        records.sort(key=lambda r: (r.created_at, r.session_id), reverse=True)
        if after is not None:
            records = [r for r in records if (r.created_at, r.session_id) < after]
        return [record.summary() for record in records[:limit]]


BROKEN: dict[str, type[SessionManager]] = {
    "OverwritingCreate": OverwritingCreateManager,
    "LostSave": LostSaveManager,
    "Aliasing": AliasingManager,
    "LeakyNamespace": LeakyNamespaceManager,
}
