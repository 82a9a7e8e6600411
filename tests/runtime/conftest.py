"""Fixtures of the runtime tests: managers on the reference store and on a real file."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agentsessions import SessionManager, connect


@pytest.fixture
async def memory_manager() -> AsyncIterator[SessionManager]:
    async with connect("memory://") as manager:
        yield manager


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sessions.db'}"


@pytest.fixture(params=["memory", "sqlite"])
async def manager_pair(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[SessionManager, SessionManager]]:
    """Two managers on one store, as two processes of one application would have."""
    if request.param == "memory":
        url = f"memory://runtime-{uuid.uuid4().hex}"
    else:
        url = f"sqlite:///{tmp_path / 'pair.db'}"
    async with connect(url) as first, connect(url) as second:
        yield first, second
