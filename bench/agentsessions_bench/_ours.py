"""agentsessions itself, on any URL, through the public API only."""

from __future__ import annotations

import time
import uuid
from typing import Any

from ._store import BULK_BATCH, MESSAGE_TEXT, StaleWrite, Store, StoreUnavailable

__all__ = ["OurStore", "engine_of_url"]

_ENGINES = {
    "memory": "memory",
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
    "redis": "redis",
    "rediss": "redis",
    "redis+unix": "redis",
    "unix": "redis",
    "redis+cluster": "redis-cluster",
    "mongodb": "mongo",
    "mongodb+srv": "mongo",
    "mysql": "mysql",
    "mariadb": "mysql",
}


def engine_of_url(url: str) -> str:
    """The engine a URL's scheme names ("postgres" for postgresql://, ...)."""
    scheme = url.partition("://")[0].lower()
    return _ENGINES.get(scheme, scheme)


def _content(author: str, index: int) -> dict[str, Any]:
    return {"role": author, "text": MESSAGE_TEXT, "n": index}


class OurStore(Store):
    """`agentsessions.connect(url)` with a random namespace, so a shared server is safe."""

    kind = "ours"

    def __init__(self, url: str, name: str = "agentsessions", **options: Any) -> None:
        self.url = url
        self.engine = engine_of_url(url)
        self.name = name
        self._options = options
        self._created: set[str] = set()
        self._held: dict[str, Any] = {}
        self._manager: Any = None

    async def open(self) -> None:
        import agentsessions

        options = dict(self._options)
        if self.engine != "memory" or "namespace" not in options:
            options.setdefault("namespace", f"bench_{uuid.uuid4().hex[:10]}")
        try:
            self._manager = agentsessions.connect(self.url, **options)
            await self._manager.open()
        except agentsessions.UnknownBackendError as exc:
            raise StoreUnavailable(str(exc)) from exc
        except agentsessions.BackendUnavailableError as exc:
            raise StoreUnavailable(str(exc)) from exc

    async def close(self) -> None:
        if self._manager is None:
            return
        try:
            for session_id in sorted(self._created):
                await self._manager.delete(session_id)
        finally:
            self._created.clear()
            self._held.clear()
            await self._manager.close()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        session = await self._manager.create(session_id)
        self._created.add(session_id)
        index = 0
        while index < history:
            for _ in range(min(batch, history - index)):
                author = "user" if index % 2 == 0 else "assistant"
                session.add_event(author, _content(author, index))
                index += 1
            await self._manager.save(session)

    def forget(self, session_id: str) -> None:
        self._held.pop(session_id, None)

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        session = await self._manager.get(session_id, last_events=last)
        read = time.perf_counter() - started
        session.add_event("user", _content("user", 0))
        session.add_event("assistant", _content("assistant", 1))
        await self._manager.save(session)
        self._held[session_id] = session
        return read

    async def append(self, session_id: str) -> None:
        session = self._held[session_id]
        session.add_event("user", _content("user", 0))
        session.add_event("assistant", _content("assistant", 1))
        await self._manager.save(session)

    async def contended_update(self, session_id: str) -> int:
        calls = 0

        def add_turn(session: Any) -> None:
            nonlocal calls
            calls += 1
            session.add_event("user", _content("user", 0))
            session.add_event("assistant", _content("assistant", 1))

        await self._manager.update(session_id, add_turn, retries=10_000)
        return calls - 1

    async def count(self, session_id: str) -> int:
        session = await self._manager.get(session_id)
        return len(session.events)

    async def stale_write(self) -> StaleWrite:
        from agentsessions import SessionConflictError

        session_id = f"stale-{uuid.uuid4().hex[:12]}"
        await self.create(session_id, 0)
        first = await self._manager.get(session_id)
        second = await self._manager.get(session_id)
        first.add_event("user", _content("user", 0))
        await self._manager.save(first)
        second.add_event("user", _content("user", 1))
        try:
            await self._manager.save(second)
        except SessionConflictError:
            return "raises"
        stored = await self._manager.get(session_id)
        return "both kept" if len(stored.events) == 2 else "lost"
