"""The raw-driver floor for each engine: minimal hand-written code doing the same work.

Honest floors, not strawmen: each uses the engine's natural fast path (one statement
or one pipelined transaction per write, prepared statements, a single range read) and
decodes events into dicts the fast way (one batched pydantic-core parse, as the core
does). They keep an event count and an ``updated_at`` per session, as any real store
must, but no version, no validation and no state: the floor is what a store could
cost at best, so the gap to it is what our guarantees cost.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from typing import Any

import pydantic_core

from ._store import BULK_BATCH, Store, StoreUnavailable, event_dict

__all__ = ["FLOORS", "floor_for"]


def _encode(event: dict[str, Any]) -> str:
    return pydantic_core.to_json(event).decode()


def _decode(texts: Sequence[str] | Sequence[bytes]) -> list[dict[str, Any]]:
    if not texts:
        return []
    if isinstance(texts[0], bytes):
        blob: str | bytes = b"[" + b",".join(texts) + b"]"  # type: ignore[arg-type]
    else:
        blob = "[" + ",".join(texts) + "]"  # type: ignore[arg-type]
    decoded: list[dict[str, Any]] = pydantic_core.from_json(blob)
    return decoded


def _turn_texts() -> list[str]:
    return [_encode(event_dict("user", 0)), _encode(event_dict("assistant", 1))]


def _history_texts(count: int, start: int = 0) -> list[str]:
    return [
        _encode(event_dict("user" if i % 2 == 0 else "assistant", i))
        for i in range(start, start + count)
    ]


def _now() -> datetime:
    return datetime.now(timezone.utc)


class _Floor(Store):
    kind = "floor"

    async def contended_update(self, session_id: str) -> int:
        # The raw append is atomic on its own (a row lock, RPUSH, $push), so a
        # read-modify-write of one turn never needs a retry.
        await self.turn(session_id, 20)
        return 0


class MemoryFloor(_Floor):
    """A dict of lists of JSON texts: what memory:// could cost with no contract at all."""

    engine = "memory"
    name = "raw dict"

    def __init__(self, where: str = "") -> None:
        self._events: dict[str, list[str]] = {}
        self._updated: dict[str, datetime] = {}

    async def close(self) -> None:
        self._events.clear()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        self._events[session_id] = _history_texts(history)
        self._updated[session_id] = _now()

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        stored = self._events[session_id]
        texts = stored if last is None else stored[len(stored) - last :] if last else []
        _decode(texts)
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        self._events[session_id].extend(_turn_texts())
        self._updated[session_id] = _now()

    async def count(self, session_id: str) -> int:
        return len(self._events[session_id])


class SqliteFloor(_Floor):
    """aiosqlite on one file: WAL, a clustered (sid, pos) key, one transaction per write."""

    engine = "sqlite"
    name = "raw aiosqlite"

    def __init__(self, path: str) -> None:
        self._path = path
        self._db: Any = None
        self._write_lock = asyncio.Lock()

    async def open(self) -> None:
        try:
            import aiosqlite
        except ImportError as exc:
            raise StoreUnavailable("aiosqlite is not installed") from exc
        self._db = await aiosqlite.connect(self._path)
        await self._db.execute("PRAGMA journal_mode=WAL")
        await self._db.execute("PRAGMA synchronous=NORMAL")
        await self._db.execute(
            "CREATE TABLE IF NOT EXISTS floor_sessions ("
            " sid TEXT PRIMARY KEY, n INTEGER NOT NULL, updated_at TEXT NOT NULL)"
        )
        await self._db.execute(
            "CREATE TABLE IF NOT EXISTS floor_events ("
            " sid TEXT NOT NULL, pos INTEGER NOT NULL, data TEXT NOT NULL,"
            " PRIMARY KEY (sid, pos)) WITHOUT ROWID"
        )
        await self._db.commit()

    async def close(self) -> None:
        if self._db is not None:
            await self._db.close()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        async with self._write_lock:
            await self._db.execute(
                "INSERT INTO floor_sessions VALUES (?, ?, ?)",
                (session_id, history, _now().isoformat()),
            )
            for start in range(0, history, batch):
                texts = _history_texts(min(batch, history - start), start)
                await self._db.executemany(
                    "INSERT INTO floor_events VALUES (?, ?, ?)",
                    [(session_id, start + i, text) for i, text in enumerate(texts)],
                )
            await self._db.commit()

    async def _read(self, session_id: str, last: int | None) -> list[dict[str, Any]]:
        if last is None:
            rows = await self._db.execute_fetchall(
                "SELECT data FROM floor_events WHERE sid = ? ORDER BY pos", (session_id,)
            )
            return _decode([row[0] for row in rows])
        rows = await self._db.execute_fetchall(
            "SELECT data FROM floor_events WHERE sid = ? ORDER BY pos DESC LIMIT ?",
            (session_id, last),
        )
        return _decode([row[0] for row in reversed(list(rows))])

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        await self._read(session_id, last)
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        texts = _turn_texts()
        # One connection serves every task, so the write transaction is serialised
        # here; UPDATE ... RETURNING hands out the positions atomically.
        async with self._write_lock:
            rows = await self._db.execute_fetchall(
                "UPDATE floor_sessions SET n = n + 2, updated_at = ? WHERE sid = ? RETURNING n",
                (_now().isoformat(), session_id),
            )
            end = next(iter(rows))[0]
            await self._db.executemany(
                "INSERT INTO floor_events VALUES (?, ?, ?)",
                [(session_id, end - 2 + i, text) for i, text in enumerate(texts)],
            )
            await self._db.commit()

    async def count(self, session_id: str) -> int:
        rows = await self._db.execute_fetchall(
            "SELECT count(*) FROM floor_events WHERE sid = ?", (session_id,)
        )
        return int(next(iter(rows))[0])


_PG_APPEND = """
WITH s AS (
    UPDATE floor_sessions SET n = n + cardinality($2::text[]), updated_at = $3
    WHERE sid = $1 RETURNING n
)
INSERT INTO floor_events (sid, pos, data)
SELECT $1, s.n - cardinality($2::text[]) + k.i - 1, k.d
FROM s, unnest($2::text[]) WITH ORDINALITY AS k(d, i)
"""


class PostgresFloor(_Floor):
    """asyncpg: a read is one prepared range query, a write one atomic statement."""

    engine = "postgres"
    name = "raw asyncpg"

    def __init__(self, url: str, pool_size: int = 10) -> None:
        self._url = url
        self._pool: Any = None
        self._pool_size = pool_size
        self._schema = f"floor_{uuid.uuid4().hex[:10]}"

    async def open(self) -> None:
        try:
            import asyncpg  # type: ignore[import-untyped,unused-ignore]
        except ImportError as exc:
            raise StoreUnavailable("asyncpg is not installed") from exc
        try:
            admin = await asyncpg.connect(self._url)
        except (OSError, asyncpg.PostgresError) as exc:
            raise StoreUnavailable(f"PostgreSQL unreachable: {exc}") from exc
        try:
            await admin.execute(f"CREATE SCHEMA {self._schema}")
            await admin.execute(
                f"CREATE TABLE {self._schema}.floor_sessions ("
                " sid text PRIMARY KEY, n integer NOT NULL, updated_at timestamptz NOT NULL)"
            )
            await admin.execute(
                f"CREATE TABLE {self._schema}.floor_events ("
                " sid text NOT NULL, pos integer NOT NULL, data text NOT NULL,"
                " PRIMARY KEY (sid, pos))"
            )
        finally:
            await admin.close()
        self._pool = await asyncpg.create_pool(
            self._url,
            min_size=self._pool_size,
            max_size=self._pool_size,
            server_settings={"search_path": self._schema},
        )

    async def close(self) -> None:
        if self._pool is not None:
            async with self._pool.acquire() as conn:
                await conn.execute(f"DROP SCHEMA {self._schema} CASCADE")
            await self._pool.close()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            await conn.execute("INSERT INTO floor_sessions VALUES ($1, 0, $2)", session_id, _now())
            for start in range(0, history, batch):
                texts = _history_texts(min(batch, history - start), start)
                await conn.execute(_PG_APPEND, session_id, texts, _now())

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        if last is None:
            rows = await self._pool.fetch(
                "SELECT data FROM floor_events WHERE sid = $1 ORDER BY pos", session_id
            )
            _decode([row[0] for row in rows])
        else:
            rows = await self._pool.fetch(
                "SELECT data FROM floor_events WHERE sid = $1 ORDER BY pos DESC LIMIT $2",
                session_id,
                last,
            )
            _decode([row[0] for row in reversed(rows)])
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        await self._pool.execute(_PG_APPEND, session_id, _turn_texts(), _now())

    async def count(self, session_id: str) -> int:
        value = await self._pool.fetchval(
            "SELECT count(*) FROM floor_events WHERE sid = $1", session_id
        )
        return int(value)


class RedisFloor(_Floor):
    """redis-py: events in a list (LRANGE reads), RPUSH + HSET in one MULTI/EXEC."""

    name = "raw redis-py"

    def __init__(self, url: str, cluster: bool = False) -> None:
        self._url = url
        self._cluster = cluster
        self.engine = "redis-cluster" if cluster else "redis"
        self._prefix = f"floor_{uuid.uuid4().hex[:10]}"
        self._client: Any = None
        self._sessions: set[str] = set()

    def _keys(self, session_id: str) -> tuple[str, str]:
        # The hash tag keeps both keys of a session in one cluster slot.
        base = f"{self._prefix}:{{{session_id}}}"
        return f"{base}:ev", f"{base}:meta"

    async def open(self) -> None:
        try:
            import redis.asyncio as aioredis
            from redis.asyncio.cluster import RedisCluster
        except ImportError as exc:
            raise StoreUnavailable("redis is not installed") from exc
        # No socket timeout, as ours runs without one unless asked (redis-py 8 would
        # otherwise wrap every send in a task and every read in a timer).
        if self._cluster:
            url = "redis://" + self._url.partition("://")[2]
            self._client = RedisCluster.from_url(url, socket_timeout=None)
        else:
            self._client = aioredis.from_url(self._url, socket_timeout=None)
        try:
            await self._client.ping()
        except Exception as exc:
            raise StoreUnavailable(f"Redis unreachable: {exc}") from exc

    async def close(self) -> None:
        if self._client is None:
            return
        for session_id in self._sessions:
            await self._client.delete(*self._keys(session_id))
        await self._client.aclose()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        self._sessions.add(session_id)
        events, meta = self._keys(session_id)
        await self._client.hset(meta, mapping={"updated_at": _now().isoformat()})
        for start in range(0, history, batch):
            await self._client.rpush(events, *_history_texts(min(batch, history - start), start))

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        events, _ = self._keys(session_id)
        if last == 0:
            texts: list[bytes] = []
        else:
            texts = await self._client.lrange(events, 0 if last is None else -last, -1)
        _decode(texts)
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        events, meta = self._keys(session_id)
        # MULTI/EXEC is one round trip on a single server; redis-py's cluster
        # transactions cost several, so there the two commands are just pipelined
        # (RPUSH alone is atomic; the timestamp is metadata).
        async with self._client.pipeline(transaction=not self._cluster) as pipe:
            pipe.rpush(events, *_turn_texts())
            pipe.hset(meta, "updated_at", _now().isoformat())
            await pipe.execute()

    async def count(self, session_id: str) -> int:
        return int(await self._client.llen(self._keys(session_id)[0]))


class MongoFloor(_Floor):
    """pymongo async: a counter document per session and one document per event.

    The position counter is bumped with ``$inc`` (atomic, hands out positions), then
    the two events go in with one ``insert_many``; reads are one indexed range query
    on (sid, pos). Events stay BSON sub-documents, so decoding already yields dicts.
    One array per session (``$push`` / ``$slice``) was tried first: on the test
    server its cost grows with the array (329 ms per append at 5,000 events), so it
    would be a strawman floor.
    """

    engine = "mongo"
    name = "raw pymongo"

    def __init__(self, url: str) -> None:
        self._url = url
        self._client: Any = None
        self._sessions: Any = None
        self._events: Any = None
        self._prefix = f"floor_{uuid.uuid4().hex[:10]}"

    async def open(self) -> None:
        try:
            from pymongo import AsyncMongoClient
        except ImportError as exc:
            raise StoreUnavailable("pymongo is not installed") from exc
        self._client = AsyncMongoClient(self._url, serverSelectionTimeoutMS=5000)
        try:
            await self._client.admin.command("ping")
        except Exception as exc:
            raise StoreUnavailable(f"MongoDB unreachable: {exc}") from exc
        database = self._client.get_default_database("agentsessions_bench")
        self._sessions = database[f"{self._prefix}_sessions"]
        self._events = database[f"{self._prefix}_events"]
        await self._events.create_index([("sid", 1), ("pos", 1)], unique=True)

    async def close(self) -> None:
        if self._client is None:
            return
        await self._sessions.drop()
        await self._events.drop()
        await self._client.close()

    async def _write(self, session_id: str, events: list[dict[str, Any]]) -> None:
        from pymongo import ReturnDocument

        doc = await self._sessions.find_one_and_update(
            {"_id": session_id},
            {"$inc": {"n": len(events)}, "$set": {"updated_at": _now()}},
            projection={"n": 1},
            return_document=ReturnDocument.AFTER,
        )
        start = doc["n"] - len(events)
        await self._events.insert_many(
            [{"sid": session_id, "pos": start + i, "e": e} for i, e in enumerate(events)],
            ordered=True,
        )

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        await self._sessions.insert_one({"_id": session_id, "n": 0, "updated_at": _now()})
        for start in range(0, history, batch):
            await self._write(
                session_id,
                [
                    event_dict("user" if i % 2 == 0 else "assistant", i)
                    for i in range(start, min(history, start + batch))
                ],
            )

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        if last is None:
            cursor = self._events.find({"sid": session_id}, {"_id": 0, "e": 1}).sort("pos", 1)
            [doc["e"] async for doc in cursor]
        elif last:
            # Sort-and-limit is not served from the index by the test server (190 ms
            # at 5,000 events); reading the counter first makes it a range query.
            session = await self._sessions.find_one({"_id": session_id}, {"n": 1})
            cursor = self._events.find(
                {"sid": session_id, "pos": {"$gte": session["n"] - last}}, {"_id": 0, "e": 1}
            ).sort("pos", 1)
            [doc["e"] async for doc in cursor]
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        await self._write(session_id, [event_dict("user", 0), event_dict("assistant", 1)])

    async def count(self, session_id: str) -> int:
        return int(await self._events.count_documents({"sid": session_id}))


class MySQLFloor(_Floor):
    """asyncmy: a read is one range query, a write one transaction (count, two rows)."""

    engine = "mysql"
    name = "raw asyncmy"

    def __init__(self, url: str, pool_size: int = 10) -> None:
        from urllib.parse import unquote, urlsplit

        parts = urlsplit(url)
        self._args: dict[str, Any] = {
            "host": parts.hostname or "127.0.0.1",
            "port": parts.port or 3306,
            "user": unquote(parts.username or "root"),
            "password": unquote(parts.password or ""),
            "db": parts.path.lstrip("/"),
            "autocommit": True,
        }
        self._pool_size = pool_size
        # At most pool_size connections, as our store's pool: throughput compares the
        # code, not how many connections each may open.
        self._slots = asyncio.Semaphore(pool_size)
        self._idle: list[Any] = []

    async def _conn(self) -> Any:
        import asyncmy  # type: ignore[import-untyped,unused-ignore]

        await self._slots.acquire()
        try:
            return self._idle.pop() if self._idle else await asyncmy.connect(**self._args)
        except BaseException:
            self._slots.release()
            raise

    def _put(self, connection: Any, *, broken: bool = False) -> None:
        self._slots.release()
        if broken:
            connection.close()
        else:
            self._idle.append(connection)

    async def _run(self, sql: str, args: Sequence[Any] = (), *, fetch: bool = False) -> Any:
        connection = await self._conn()
        try:
            async with connection.cursor() as cursor:
                await cursor.execute(sql, args or None)
                rows = await cursor.fetchall() if fetch else None
        except BaseException:
            self._put(connection, broken=True)
            raise
        self._put(connection)
        return rows

    async def open(self) -> None:
        try:
            import asyncmy  # noqa: F401
        except ImportError as exc:
            raise StoreUnavailable("asyncmy is not installed") from exc
        try:
            await self._run(
                "CREATE TABLE IF NOT EXISTS floor_sessions (sid VARBINARY(255) PRIMARY KEY,"
                " n INT NOT NULL, updated_at BIGINT NOT NULL) ENGINE=InnoDB"
            )
            await self._run(
                "CREATE TABLE IF NOT EXISTS floor_events ("
                " sid VARBINARY(255) NOT NULL, pos INT NOT NULL,"
                " data LONGBLOB NOT NULL, PRIMARY KEY (sid, pos)) ENGINE=InnoDB"
            )
            held = [await self._conn() for _ in range(self._pool_size)]  # opened up front
            for connection in held:
                self._put(connection)
        except OSError as exc:
            raise StoreUnavailable(f"MySQL unreachable: {exc}") from exc

    async def close(self) -> None:
        await self._run("DROP TABLE IF EXISTS floor_sessions, floor_events")
        for connection in self._idle:
            connection.close()
        self._idle.clear()

    async def _append(self, session_id: str, texts: list[str]) -> None:
        connection = await self._conn()
        try:
            async with connection.cursor() as cursor:
                # Two round trips, as multi-statement packets: the lock with the
                # START, then the writes with the COMMIT (asyncmy quotes the values).
                await cursor.execute(
                    "START TRANSACTION; SELECT n FROM floor_sessions WHERE sid = %s FOR UPDATE",
                    (session_id,),
                )
                await cursor.nextset()
                first = int((await cursor.fetchall())[0][0])
                rows = ", ".join(["(%s, %s, %s)"] * len(texts))
                args: list[Any] = []
                for offset, text in enumerate(texts):
                    args += (session_id, first + offset, text)
                insert = cursor.mogrify(
                    "INSERT INTO floor_events VALUES {rows}".replace("{rows}", rows), args
                )
                update = cursor.mogrify(
                    "UPDATE floor_sessions SET n = %s, updated_at = %s WHERE sid = %s",
                    (first + len(texts), int(_now().timestamp() * 1e6), session_id),
                )
                await cursor.execute("; ".join([insert, update, "COMMIT"]))
                for _ in range(2):  # the update's and the commit's results
                    await cursor.nextset()
        except BaseException:
            self._put(connection, broken=True)
            raise
        self._put(connection)

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        await self._run("INSERT INTO floor_sessions VALUES (%s, 0, 0)", (session_id,))
        for start in range(0, history, batch):
            await self._append(session_id, _history_texts(min(batch, history - start), start))

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        if last is None:
            rows = await self._run(
                "SELECT data FROM floor_events WHERE sid = %s ORDER BY pos",
                (session_id,),
                fetch=True,
            )
            _decode([row[0] for row in rows])
        else:
            rows = await self._run(
                "SELECT data FROM floor_events WHERE sid = %s ORDER BY pos DESC LIMIT %s",
                (session_id, last),
                fetch=True,
            )
            _decode([row[0] for row in reversed(rows)])
        read = time.perf_counter() - started
        await self.append(session_id)
        return read

    async def append(self, session_id: str) -> None:
        await self._append(session_id, _turn_texts())

    async def count(self, session_id: str) -> int:
        rows = await self._run(
            "SELECT count(*) FROM floor_events WHERE sid = %s", (session_id,), fetch=True
        )
        return int(rows[0][0])


FLOORS: dict[str, Callable[[str], Store]] = {
    "memory": MemoryFloor,
    "sqlite": SqliteFloor,
    "postgres": PostgresFloor,
    "redis": RedisFloor,
    "mongo": MongoFloor,
    "mysql": MySQLFloor,
}


def floor_for(engine: str, where: str) -> Store:
    """The floor for *engine*: *where* is the server URL, or the file for SQLite."""
    if engine == "redis-cluster":
        return RedisFloor(where, cluster=True)
    return FLOORS[engine](where)
