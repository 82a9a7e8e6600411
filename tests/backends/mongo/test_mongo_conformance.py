"""The conformance kit against MongoDB (SecantusDB here), one fresh namespace per test;
again with encryption on."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from agentsessions import SessionManager
from agentsessions_conformance import Inventory, SessionManagerTests
from agentsessions_mongo import MongoSessionManager
from agentsessions_mongo._buckets import stored_positions
from encryption_params import make_keyring
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo

ManagerFactory = Callable[..., Awaitable[MongoSessionManager]]


class TestMongoConformance(SessionManagerTests):
    @pytest_asyncio.fixture
    async def manager(self, make_manager: ManagerFactory) -> AsyncIterator[SessionManager]:
        yield await make_manager()

    @pytest_asyncio.fixture(autouse=True)
    async def _raw(self, raw_db: AsyncDatabase[dict[str, Any]]) -> None:
        self.raw_db = raw_db

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        # Every document of the session, expired, published or not: the kit checks that
        # saves leave neither orphans nor duplicates behind, and erasure leaves nothing.
        assert isinstance(manager, MongoSessionManager)
        prefix = f"{manager.options.namespace}_" if manager.options.namespace else ""
        records = await self.raw_db[f"{prefix}sessions"].count_documents({"_id": session_id})
        doc = await self.raw_db[f"{prefix}sessions"].find_one(
            {"_id": session_id}, {"first": 1, "tail": 1, "tail_start": 1}
        )
        cursor = self.raw_db[f"{prefix}events"].find({"session": session_id}, {"pos": 1, "data": 1})
        # Every event of every bucket and of the tail, relative to the first position a
        # compaction moved (0 for an erased id).
        events = stored_positions(doc, await cursor.to_list(None))
        archived = await self.raw_db[f"{prefix}archive"].count_documents({"session": session_id})
        return Inventory(records=records, events=events, archived=archived)


class TestMongoEncryptedConformance(TestMongoConformance):
    @pytest_asyncio.fixture
    async def manager(self, make_manager: ManagerFactory) -> AsyncIterator[SessionManager]:
        manager = await make_manager()
        manager.encryption = make_keyring()
        yield manager
