"""The conformance kit against SQLite: on a file, on ``:memory:``, and on a file encrypted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import agentsessions
import pytest
from agentsessions import SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_sqlite._conformance import sqlite_inventory
from encryption_params import make_keyring


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


class TestSQLiteEncryptedConformance(TestSQLiteFileConformance):
    @pytest.fixture
    async def manager(self, tmp_path: Path) -> AsyncIterator[SessionManager]:
        url = f"sqlite:///{tmp_path / 'kit.db'}"
        async with agentsessions.connect(url, encryption=make_keyring()) as manager:
            yield manager
