"""Fixtures for the MongoDB backend tests: a fresh namespace per test, dropped after.

Every test gets its own random namespace (so its own pair of collections) in the
database of ``mongo_url``; afterwards every collection the test created (its own, and
those of the ``kit_*`` namespaces the conformance kit makes) is dropped.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import pytest_asyncio
from agentsessions import connect
from agentsessions_mongo import MongoSessionManager
from pymongo import AsyncMongoClient
from pymongo.asynchronous.database import AsyncDatabase

ManagerFactory = Callable[..., Awaitable[MongoSessionManager]]


@pytest_asyncio.fixture
async def raw_db(mongo_url: str) -> AsyncIterator[AsyncDatabase[dict[str, Any]]]:
    """The test database through a plain pymongo client; collections the test made are dropped."""
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
        mongo_url, serverSelectionTimeoutMS=10_000, tz_aware=True
    )
    database = client.get_default_database("agentsessions_test")
    before = set(await database.list_collection_names())
    try:
        yield database
    finally:
        for name in set(await database.list_collection_names()) - before:
            await database.drop_collection(name)
        await client.close()


@pytest.fixture
def namespace() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest_asyncio.fixture
async def make_manager(
    mongo_url: str, namespace: str, raw_db: AsyncDatabase[dict[str, Any]]
) -> AsyncIterator[ManagerFactory]:
    """Opened managers on the test's namespace (options may be overridden), closed after."""
    opened: list[MongoSessionManager] = []

    async def make(**options: Any) -> MongoSessionManager:
        options.setdefault("namespace", namespace)
        # SecantusDB is a single Python process: on a busy CI machine a 2,500-event
        # restore can outlast the 10 s default. The deadline is tested in tests/faults.
        options.setdefault("timeout", 60)
        manager = connect(mongo_url, **options)
        assert isinstance(manager, MongoSessionManager)
        await manager.open()
        opened.append(manager)
        return manager

    yield make
    for manager in opened:
        await manager.close()


@pytest_asyncio.fixture
async def mongo(make_manager: ManagerFactory) -> MongoSessionManager:
    return await make_manager()
