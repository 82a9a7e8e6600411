"""Fixtures for the SQLite backend's tests: database files and raw views into them."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import agentsessions
import pytest
from agentsessions_sqlite import SQLiteSessionManager


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def db_url(db_path: Path) -> str:
    return f"sqlite:///{db_path}"  # db_path is absolute, so this is sqlite:////...


@pytest.fixture
async def file_manager(db_url: str) -> AsyncIterator[SQLiteSessionManager]:
    manager = agentsessions.connect(db_url)
    assert isinstance(manager, SQLiteSessionManager)
    async with manager:
        yield manager


@pytest.fixture
def raw(db_path: Path) -> Iterator[sqlite3.Connection]:
    """A plain sqlite3 connection to the same file: what is really stored."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        yield conn
    finally:
        conn.close()
