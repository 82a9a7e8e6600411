"""With encryption on, no MongoDB document holds the plaintext of content, metadata or state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agentsessions_mongo import MongoSessionManager
from encryption_params import assert_no_plaintext, make_keyring, write_secrets
from pymongo.asynchronous.database import AsyncDatabase

pytestmark = pytest.mark.mongo


async def test_mongo_documents_hold_no_plaintext(
    make_manager: Callable[..., Awaitable[MongoSessionManager]],
    raw_db: AsyncDatabase[dict[str, Any]],
    namespace: str,
) -> None:
    manager = await make_manager()
    manager.encryption = make_keyring()
    ids = await write_secrets(manager)
    dump: list[str] = []
    names = [n for n in await raw_db.list_collection_names() if n.startswith(f"{namespace}_")]
    for name in names:
        dump += [repr(document) async for document in raw_db[name].find({})]
    assert len(names) >= 2
    assert_no_plaintext("\n".join(dump), ids)
