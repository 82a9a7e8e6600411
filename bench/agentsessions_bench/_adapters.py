"""Our own adapters, measured next to the stores they replace.

A user who switches from the OpenAI Agents SDK's ``SQLiteSession`` or ADK's
``DatabaseSessionService`` keeps the framework's API and goes through our adapter
(`agentsessions.integrations.openai_agents`, `agentsessions.integrations.adk`), so
that path must be fast too, not only the core API. Each store here runs the peers'
own turn (``get_items`` + ``add_items``; ``get_session`` + two ``append_event``) on an
`agentsessions.connect(url)` manager, and is compared with the peers of its engine.
"""

from __future__ import annotations

import contextvars
from typing import Any

from ._ours import OurStore
from ._peers import _AdkStore, _history, _item, _need, _SdkStore
from ._store import BULK_BATCH, LAST_EVENTS

__all__ = ["AdkAdapterStore", "SdkAdapterStore"]

# The contended writer's attempt counter; a context variable, because 20 writers run
# at once and the adapter's save runs in a task of its own (which copies the context).
_ATTEMPTS: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "bench_attempts", default=None
)


class _Manager:
    """One `agentsessions.connect` manager with a random namespace (as `OurStore`)."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._ours = OurStore(url, **options)

    async def open(self) -> Any:
        await self._ours.open()
        return self._ours._manager

    async def close(self) -> None:
        await self._ours.close()


class SdkAdapterStore(_SdkStore):
    """`AgentSessionsSession` (the OpenAI Agents SDK adapter) over one of our managers."""

    kind = "adapter"
    name = "agentsessions OpenAI adapter"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__()
        self._link = _Manager(url, options)
        self.engine = self._link._ours.engine
        self._manager: Any = None

    async def open(self) -> None:
        _need("agents", "openai-agents")
        self._manager = await self._link.open()
        _count_attempts(self._manager)

    async def close(self) -> None:
        try:
            await self._close_sessions()
        finally:
            await self._link.close()

    def _make(self, session_id: str) -> Any:
        from agentsessions.integrations.openai_agents import AgentSessionsSession

        self._link._ours._created.add(session_id)  # deleted when the store closes
        return AgentSessionsSession(session_id, self._manager)

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        session = self._session(session_id)
        if not history:
            # The adapter creates its session on the first add_items; a turn on a
            # session that does not exist yet would measure the creation.
            await self._manager.create(session_id)
            return
        for start in range(0, history, batch):
            await session.add_items(_history(min(batch, history - start), start))

    async def contended_update(self, session_id: str) -> int:
        session = self._session(session_id)
        await session.get_items(limit=LAST_EVENTS)
        attempts = [0]
        token = _ATTEMPTS.set(attempts)
        try:
            await session.add_items([_item("user", 0), _item("assistant", 1)])
        finally:
            _ATTEMPTS.reset(token)
        return max(0, attempts[0] - 1)


def _count_attempts(manager: Any) -> None:
    """Count, per task, how often *manager*'s update applied its change: add_items
    retries a lost race inside ``manager.update``, out of the caller's sight."""
    original = manager.update

    async def update(session_id: str, change: Any, *args: Any, **kwargs: Any) -> Any:
        counter = _ATTEMPTS.get()
        if counter is None:
            return await original(session_id, change, *args, **kwargs)

        def counted(stored: Any) -> Any:
            counter[0] += 1
            return change(stored)

        return await original(session_id, counted, *args, **kwargs)

    manager.update = update


class AdkAdapterStore(_AdkStore):
    """`AgentSessionsSessionService` (the ADK adapter) over one of our managers."""

    kind = "adapter"
    name = "agentsessions ADK adapter"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__()
        self._link = _Manager(url, options)
        self.engine = self._link._ours.engine

    async def open(self) -> None:
        _need("google.adk.sessions", "google-adk")
        from agentsessions.integrations.adk import AgentSessionsSessionService

        self._service = AgentSessionsSessionService(await self._link.open())

    async def close(self) -> None:
        self._held.clear()
        # The namespace is this store's own: every session it wrote goes with it.
        manager = self._link._ours._manager
        if manager is not None:
            page = await manager.list_sessions(limit=1000)
            while True:
                for summary in page.items:
                    await manager.delete(summary.session_id)
                if page.next_cursor is None:
                    break
                page = await manager.list_sessions(limit=1000, cursor=page.next_cursor)
        await self._link.close()
