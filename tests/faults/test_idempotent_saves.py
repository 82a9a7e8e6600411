"""A save that failed ambiguously is never applied twice, on every backend.

The ambiguity is injected exactly: the backend's ``_save`` hook runs for real (the save
lands) and then raises `BackendUnavailableError`, as a connection dropped before the
reply would. Retrying the save, or `update()`'s own retry, must then find its token
and write nothing more.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from agentsessions import (
    BackendUnavailableError,
    Session,
    SessionConflictError,
    SessionManager,
    connect,
)
from agentsessions.backend import TOKENS_KEPT, SaveRequest

BACKENDS = ["memory", "sqlite", "postgres", "redis", "redis-cluster", "mongo", "mysql"]


@pytest_asyncio.fixture(params=BACKENDS)
async def manager(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionManager]:
    kind = request.param
    namespace = f"t_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        url = f"memory://{namespace}"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'faults.db'}"
    else:
        fixture = {"redis-cluster": "redis_cluster_url"}.get(kind, f"{kind}_url")
        url = request.getfixturevalue(fixture)
    created = connect(url, namespace=namespace, timeout=10)
    async with created:
        yield created
        for summary in (await created.list_sessions(limit=1000)).items:
            await created.delete(summary.session_id)


class Ambiguous:
    """Wraps a manager's ``_save``: the first *times* calls land, then raise anyway."""

    def __init__(self, manager: SessionManager, times: int = 1) -> None:
        self.real = manager._save
        self.left = times
        self.requests: list[SaveRequest] = []
        manager._save = self  # type: ignore[method-assign]

    async def __call__(self, request: SaveRequest, now: datetime) -> None:
        self.requests.append(request)
        await self.real(request, now)
        if self.left:
            self.left -= 1
            raise BackendUnavailableError("test://", "connection dropped after the save landed")


def _contents(session: Session | None) -> list[Any]:
    assert session is not None
    return [event.content for event in session.events]


async def test_retrying_an_ambiguous_save_writes_nothing_twice(manager: SessionManager) -> None:
    session = await manager.create("retried")
    session.add_event("user", "once")
    session.state["count"] = 1
    ambiguous = Ambiguous(manager)
    with pytest.raises(BackendUnavailableError):
        await manager.save(session)
    await manager.save(session)  # the same save again: its token is found
    first, second = ambiguous.requests
    assert second.token == first.token
    stored = await manager.get("retried")
    assert _contents(stored) == ["once"]
    assert stored is not None and stored.version == 2 and stored.state == {"count": 1}
    assert session.version == 2
    # The session carries on normally afterwards.
    session.add_event("user", "twice")
    await manager.save(session)
    assert _contents(await manager.get("retried")) == ["once", "twice"]


async def test_update_applies_its_change_once_after_an_ambiguous_save(
    manager: SessionManager,
) -> None:
    await manager.create("updated")
    calls = 0

    def change(session: Session) -> None:
        nonlocal calls
        calls += 1
        session.add_event("agent", "applied")

    ambiguous = Ambiguous(manager, times=2)
    result = await manager.update("updated", change)
    assert calls == 1, "update() reloaded and applied its change again"
    assert len(ambiguous.requests) == 3 and len({r.token for r in ambiguous.requests}) == 1
    assert _contents(await manager.get("updated")) == ["applied"]
    assert result.version == 2


async def test_a_retry_is_recognised_after_later_saves_by_others(
    manager: SessionManager,
) -> None:
    mine = await manager.create("busy")
    mine.add_event("user", "mine")
    Ambiguous(manager)
    with pytest.raises(BackendUnavailableError):
        await manager.save(mine)
    # Others save in between, fewer times than the tokens kept.
    for index in range(3):
        other = await manager.get("busy")
        assert other is not None
        other.add_event("user", f"other-{index}")
        await manager.save(other)
    await manager.save(mine)  # recognised: done, nothing written
    assert _contents(await manager.get("busy")) == ["mine", "other-0", "other-1", "other-2"]
    assert TOKENS_KEPT > 3


async def test_a_changed_session_is_a_new_save(manager: SessionManager) -> None:
    session = await manager.create("changed")
    session.add_event("user", "first")
    Ambiguous(manager)
    with pytest.raises(BackendUnavailableError):
        await manager.save(session)
    session.add_event("user", "second")  # not the same save any more
    with pytest.raises(SessionConflictError):
        await manager.save(session)  # the first one landed: this copy is stale
    assert _contents(await manager.get("changed")) == ["first"]


async def test_an_ambiguous_save_that_did_not_land_proceeds(manager: SessionManager) -> None:
    session = await manager.create("lost")
    session.add_event("user", "hello")
    real = manager._save

    async def dropped(request: SaveRequest, now: datetime) -> None:
        manager._save = real  # type: ignore[method-assign]
        raise BackendUnavailableError("test://", "connection dropped before the save")

    manager._save = dropped  # type: ignore[method-assign]
    with pytest.raises(BackendUnavailableError):
        await manager.save(session)
    await manager.save(session)
    assert _contents(await manager.get("lost")) == ["hello"]
