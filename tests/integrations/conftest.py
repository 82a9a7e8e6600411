"""`manager`: every backend in turn, so each framework adapter is tested on all of them.

Memory uses a named store and SQLite a file, so ``manager.with_options()`` (a second,
fresh manager on the same URL) reads what the first one wrote, as with the servers.
Server backends get a random namespace, emptied after the test: nothing is left on a
shared server. A backend whose distribution does not serve its scheme yet is skipped
with that reason.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from agentsessions import SessionManager, connect, installed_backends
from backend_params import BACKENDS, with_option

SERVER_SCHEMES = {
    "postgres": "postgresql",
    "redis": "redis",
    "redis_cluster": "redis+cluster",
    "mongo": "mongodb",
    "mysql": "mysql",
}


async def drop_everything(manager: SessionManager) -> None:
    """Delete every session the manager sees (its namespace only)."""
    while True:
        page = await manager.list_sessions(limit=1000)
        if not page.items:
            return
        for summary in page.items:
            await manager.delete(summary.session_id)


@pytest.fixture(params=BACKENDS)
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL of each backend in turn (a fresh namespace on servers, emptied after)."""
    kind: str = request.param
    namespace = f"it_{uuid.uuid4().hex[:16]}"
    if kind == "memory":
        yield f"memory://integrations-{namespace}"
        return
    if kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'sessions.db'}"
        return
    scheme = SERVER_SCHEMES[kind]
    if scheme not in installed_backends():
        pytest.skip(f"the {kind} backend does not serve {scheme}:// yet")
    url = with_option(request.getfixturevalue(f"{kind}_url"), "namespace", namespace)
    yield url

    async def cleanup() -> None:
        async with connect(url) as manager:
            await drop_everything(manager)

    asyncio.run(cleanup())


@pytest.fixture
async def manager(backend_url: str) -> AsyncIterator[SessionManager]:
    async with connect(backend_url) as opened:
        yield opened
