"""`manager`: every backend in turn, so each framework adapter is tested on all of them.

Memory uses a named store and SQLite a file, so ``manager.with_options()`` (a second,
fresh manager on the same URL) reads what the first one wrote, as with the servers.
Server backends get a random namespace, emptied after the test: nothing is left on a
shared server. A backend whose distribution does not serve its scheme yet is skipped
with that reason.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agentsessions import SessionManager, connect, installed_backends

SERVER_SCHEMES = {"postgres": "postgresql", "redis": "redis", "mongo": "mongodb"}

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("mongo", id="mongo", marks=pytest.mark.mongo),
]


def _with_option(url: str, name: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


async def drop_everything(manager: SessionManager) -> None:
    """Delete every session the manager sees (its namespace only)."""
    while True:
        page = await manager.list_sessions(limit=1000)
        if not page.items:
            return
        for summary in page.items:
            await manager.delete(summary.session_id)


@pytest.fixture(params=BACKENDS)
async def manager(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[SessionManager]:
    kind: str = request.param
    namespace = f"it_{uuid.uuid4().hex[:16]}"
    if kind == "memory":
        url = f"memory://integrations-{namespace}"
    elif kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'sessions.db'}"
    else:
        scheme = SERVER_SCHEMES[kind]
        if scheme not in installed_backends():
            pytest.skip(f"the {kind} backend does not serve {scheme}:// yet")
        url = _with_option(request.getfixturevalue(f"{kind}_url"), "namespace", namespace)
    opened = connect(url)
    async with opened:
        try:
            yield opened
        finally:
            if kind in SERVER_SCHEMES:
                await drop_everything(opened)
