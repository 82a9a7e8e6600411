"""The kit runs green on the reference backend, without and with encryption."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest_asyncio
from agentsessions import MemorySessionManager, SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests, memory_inventory
from encryption_params import assert_no_plaintext, make_keyring, write_secrets


class TestMemoryConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self) -> AsyncIterator[SessionManager]:
        # A named store, so the kit's second and fresh managers see the same data.
        async with MemorySessionManager(f"memory://kit-{uuid.uuid4().hex}") as manager:
            yield manager

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        return memory_inventory(manager, session_id)


class TestMemoryEncryptedConformance(TestMemoryConformance):
    @pytest_asyncio.fixture
    async def manager(self) -> AsyncIterator[SessionManager]:
        manager = MemorySessionManager(f"memory://kit-{uuid.uuid4().hex}")
        manager.encryption = make_keyring()
        async with manager:
            yield manager


async def test_memory_storage_holds_no_plaintext() -> None:
    manager = MemorySessionManager(f"memory://raw-{uuid.uuid4().hex}")
    manager.encryption = make_keyring()
    ids = await write_secrets(manager)
    stored = manager._store.spaces[""]
    raw = repr({sid: (s.record, s.events) for sid, s in stored.items()})
    assert_no_plaintext(raw, ids)
