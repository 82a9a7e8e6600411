"""Moving a store between engines is lossless: 2,000 sessions through every backend.

postgres -> export -> import into redis -> copy to sqlite -> copy to mongo -> copy to
mysql, then every
field of every session (timestamps, owner, version, state, event ids, timestamps and
order) and the listing order are compared with the original.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from agentsessions import Session, SessionManager, connect
from agentsessions_cli._transfer import iter_sessions

Run = Callable[..., subprocess.CompletedProcess[str]]

SESSIONS = 2000
USERS = 7
_CHUNK = 50


def _with_namespace(url: str, namespace: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}namespace={namespace}"


async def _make(manager: SessionManager, index: int) -> None:
    """One session as an application leaves it: created, then saved 0 to 3 times."""
    owner = None if index % 10 == 9 else f"user{index % USERS}"
    session = await manager.create(f"s{index:05d}", owner, state={"n": index, "ü": ["😀", None]})
    for save in range(index % 4):
        session.add_event("user", f"hello {index}.{save}", channel="web")
        session.add_event("assistant", {"text": f"hi {index}", "score": index / 3})
        session.state["saves"] = save + 1
        await manager.save(session)


async def _populate(url: str) -> None:
    async with connect(url) as manager:
        for start in range(0, SESSIONS, _CHUNK):
            # Created one chunk at a time, in order: created_at grows with the index
            # (ties within a chunk are broken by id, as listing does).
            await asyncio.gather(
                *(_make(manager, i) for i in range(start, min(start + _CHUNK, SESSIONS)))
            )


async def _everything(url: str) -> list[dict[str, Any]]:
    """Every session in listing order, every field."""
    async with connect(url) as manager:
        return [session.model_dump() async for session in iter_sessions(manager)]


async def _erase(url: str) -> None:
    async with connect(url) as manager:
        ids = [session.session_id async for session in iter_sessions(manager)]
        for start in range(0, len(ids), _CHUNK):
            await asyncio.gather(*(manager.delete(i) for i in ids[start : start + _CHUNK]))


async def _drop_mongo_namespace(url: str, namespace: str) -> None:
    # Dropping the namespace's two collections is one command each; deleting 2,000
    # sessions one by one would be most of this test's time on a slow server.
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        database = client.get_default_database("agentsessions")
        for suffix in ("sessions", "events"):
            await database.drop_collection(f"{namespace}_{suffix}")
    finally:
        await client.close()


@pytest.mark.slow
def test_two_thousand_sessions_through_every_backend_arrive_exactly(
    cli: Run,
    tmp_path: Path,
    namespace: str,
    postgres_url: str,
    redis_url: str,
    mongo_url: str,
    mysql_url: str,
) -> None:
    pg = _with_namespace(postgres_url, namespace)
    redis = _with_namespace(redis_url, namespace)
    sqlite = f"sqlite:///{tmp_path / 'hop.db'}"
    # SecantusDB is one Python process: on a busy machine, 100 concurrent restores can
    # outlast the 10 s default deadline (tests/faults tests the deadline itself).
    mongo = _with_namespace(mongo_url, namespace) + "&timeout=60"
    mysql = _with_namespace(mysql_url, namespace)
    try:
        asyncio.run(_populate(pg))
        original = asyncio.run(_everything(pg))
        assert len(original) == SESSIONS
        assert {row["version"] for row in original} == {1, 2, 3, 4}
        # Newest first, and the oldest session really is the oldest.
        assert original[-1]["session_id"] == "s00000"
        assert all(a["created_at"] >= b["created_at"] for a, b in itertools.pairwise(original))
        assert all(
            row["updated_at"] - row["created_at"] < timedelta(minutes=10) for row in original
        )

        export_file = tmp_path / "all.jsonl"
        exported = cli("export", pg, "-o", str(export_file))
        assert exported.returncode == 0, exported.stderr
        assert f"exported {SESSIONS} sessions" in exported.stderr

        imported = cli("import", redis, str(export_file))
        assert imported.returncode == 0, imported.stderr
        assert f"{SESSIONS} created" in imported.stderr
        for source, target in ((redis, sqlite), (sqlite, mongo), (mongo, mysql)):
            copied = cli("copy", source, target)
            assert copied.returncode == 0, copied.stderr
            assert f"{SESSIONS} created" in copied.stderr and "verified" in copied.stderr

        for url in (redis, sqlite, mysql):
            assert asyncio.run(_everything(url)) == original, f"{url} differs from the original"
        # The last hop is read through its export: the first export, byte for byte, and
        # every line the original session (fields, events, listing order).
        final = cli("export", mongo)
        assert final.returncode == 0, final.stderr
        assert final.stdout == export_file.read_text(encoding="utf-8")
        assert [
            Session.model_validate_json(line).model_dump() for line in final.stdout.splitlines()
        ] == original
    finally:
        for url in (pg, redis, mysql):
            asyncio.run(_erase(url))
        asyncio.run(_drop_mongo_namespace(mongo_url, namespace))
