"""The conformance kit against SQLite: once on a file, once on ``:memory:``."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import agentsessions
import pytest
from agentsessions import SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_sqlite import SQLiteSessionManager


def _inventory(conn: sqlite3.Connection, namespace: str, session_id: str) -> Inventory:
    key = (namespace, session_id)
    (records,) = conn.execute(
        "SELECT count(*) FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?", key
    ).fetchone()
    rows = conn.execute(
        "SELECT position FROM agentsessions_events WHERE namespace = ? AND session_id = ?", key
    ).fetchall()
    return Inventory(records=records, events=[position for (position,) in rows])


async def sqlite_inventory(manager: SessionManager, session_id: str) -> Inventory:
    """What the SQLite file (or :memory: database) holds for *session_id*."""
    assert isinstance(manager, SQLiteSessionManager)
    await manager.open()
    # Through the manager's own connection: a :memory: database exists nowhere else.
    writer = manager._writer
    assert writer is not None
    return await writer.call(_inventory, manager.options.namespace, session_id)


class TestSQLiteFileConformance(SessionManagerTests):
    @pytest.fixture
    async def manager(self, tmp_path: Path) -> AsyncIterator[SessionManager]:
        async with agentsessions.connect(f"sqlite:///{tmp_path / 'kit.db'}") as manager:
            yield manager

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await sqlite_inventory(manager, session_id)


class TestSQLiteMemoryConformance(SessionManagerTests):
    @pytest.fixture
    async def manager(self) -> AsyncIterator[SessionManager]:
        async with agentsessions.connect("sqlite:///:memory:") as manager:
            yield manager

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return await sqlite_inventory(manager, session_id)
