"""The MongoDB doctor on the test server (TTL index, journaling), and on recorded ``hello``
replies for replica sets that cannot be started here (SecantusDB is one member)."""

from __future__ import annotations

import uuid
from typing import Any

from agentsessions import Diagnosis, Finding, connect
from agentsessions_mongo._diagnosis import replica_set, write_concern
from pymongo import AsyncMongoClient

THREE = {"setName": "rs0", "isWritablePrimary": True, "hosts": ["a:1", "b:1", "c:1"]}


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


async def test_the_ttl_index_missing_and_present(mongo_url: str) -> None:
    namespace = f"d{uuid.uuid4().hex[:10]}"
    found = by_check(await diagnose(mongo_url, namespace=namespace))
    assert found["mongo.ttl_index"].severity == "ok"
    assert found["mongo.journal"].severity == "ok"
    assert found["common.clock_skew"].severity == "ok"
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_url)
    try:
        database = client.get_default_database()
        async with connect(mongo_url, namespace=namespace) as manager:
            from agentsessions_mongo._diagnosis import diagnose as run

            # The hook alone: a new manager's open() would create the index again.
            await manager.open()
            await database[f"{namespace}_sessions"].drop_index("expires_at_1")
            checks = {f.check: f for f in await run(manager._links.current())}  # type: ignore[attr-defined]
        assert checks["mongo.ttl_index"].severity == "warning"
    finally:
        for suffix in ("sessions", "events", "archive"):
            await client.get_default_database().drop_collection(f"{namespace}_{suffix}")
        await client.close()


async def test_journaling_turned_off_is_a_warning(mongo_url: str) -> None:
    sep = "&" if "?" in mongo_url else "?"
    found = by_check(await diagnose(f"{mongo_url}{sep}journal=false"))
    assert found["mongo.journal"].severity == "warning"


def test_write_concern_on_recorded_replica_sets() -> None:
    assert write_concern({"w": 1}, THREE).severity == "error"
    assert write_concern({"w": "majority"}, THREE).severity == "ok"
    assert write_concern({"w": 2}, THREE).severity == "ok"
    assert write_concern({}, THREE).severity == "info"
    assert write_concern({"w": 1}, {"isWritablePrimary": True}).severity == "ok"  # standalone
    assert replica_set(THREE).severity == "ok"
    assert replica_set({**THREE, "isWritablePrimary": False}).severity == "error"
    assert replica_set({**THREE, "hosts": ["a:1", "b:1"]}).severity == "warning"
    assert replica_set({"isWritablePrimary": True}).severity == "info"
