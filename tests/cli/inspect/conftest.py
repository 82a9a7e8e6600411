"""Fixtures of the inspector's HTTP and browser tests: stores filled by `inspect_store`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from inspect_store import build_store


@pytest.fixture(scope="session")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("inspect") / "sessions.db"
    url = f"sqlite:///{path}"
    asyncio.run(build_store(url))
    return url


@pytest.fixture
def writable_url(tmp_path: Path) -> str:
    """A store of its own for the tests that write."""
    url = f"sqlite:///{tmp_path / 'sessions.db'}"
    asyncio.run(build_store(url))
    return url
