"""The stores users would pick instead: OpenAI Agents SDK sessions and Google ADK services.

Each gets the closest equivalent of our workload through its public API. The SDK
sessions are append-only item logs: a turn is ``get_items()`` (or ``limit=20``) then
``add_items([user, assistant])``. ADK's ``DatabaseSessionService`` is a session with
events and state: a turn is ``get_session()`` (or ``num_recent_events=20``) then two
``append_event`` calls, which is how an ADK runner records a user message and a reply.

Histories are pre-populated in bulk: ``add_items`` takes a list; ADK has no bulk
append, so its rows are written through ADK's own ORM classes in one transaction.
Nothing here imports a peer at module import: they load slowly and may be absent.
"""

from __future__ import annotations

import inspect
import time
import uuid
from typing import Any, ClassVar

from ._store import (
    BULK_BATCH,
    LAST_EVENTS,
    MESSAGE_TEXT,
    Kind,
    StaleWrite,
    Store,
    StoreUnavailable,
)

__all__ = [
    "AdkDatabaseStore",
    "AdkInMemoryStore",
    "SdkMongoStore",
    "SdkRedisStore",
    "SdkSqlAlchemyStore",
    "SdkSqliteStore",
]

# The SDK stores bare items ({"role", "content"}), smaller than our events with their
# id/timestamp envelope; padding the text makes each item about 300 bytes of JSON too.
_SDK_TEXT = MESSAGE_TEXT + " " + "x" * 60


def _item(role: str, index: int) -> dict[str, Any]:
    return {"type": "message", "role": role, "content": f"{_SDK_TEXT} #{index}"}


def _history(count: int, start: int = 0) -> list[dict[str, Any]]:
    return [_item("user" if i % 2 == 0 else "assistant", i) for i in range(start, start + count)]


def _need(module: str, what: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise StoreUnavailable(f"{what} is not installed ({exc})") from exc


class _SdkStore(Store):
    """An OpenAI Agents SDK `Session` per session id, sharing one client/engine."""

    kind: ClassVar[Kind] = "peer"
    family = "openai"

    def __init__(self) -> None:
        self._sessions: dict[str, Any] = {}
        self._extra: list[Any] = []

    def _make(self, session_id: str) -> Any:
        raise NotImplementedError

    def _session(self, session_id: str) -> Any:
        session = self._sessions.get(session_id)
        if session is None:
            session = self._sessions[session_id] = self._make(session_id)
        return session

    #: Whether closing deletes the stored items (needed on shared servers only).
    _clear_on_close = False

    async def _close_sessions(self) -> None:
        for session in [*self._sessions.values(), *self._extra]:
            if self._clear_on_close:
                await session.clear_session()
            closing = getattr(session, "close", None)
            if closing is not None:
                result = closing()
                if inspect.isawaitable(result):
                    await result
        self._sessions.clear()
        self._extra.clear()

    async def close(self) -> None:
        await self._close_sessions()

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        session = self._session(session_id)
        for start in range(0, history, batch):
            await session.add_items(_history(min(batch, history - start), start))

    async def turn(self, session_id: str, last: int | None) -> float:
        session = self._session(session_id)
        started = time.perf_counter()
        await session.get_items(limit=last)
        read = time.perf_counter() - started
        await session.add_items([_item("user", 0), _item("assistant", 1)])
        return read

    async def append(self, session_id: str) -> None:
        await self._session(session_id).add_items([_item("user", 0), _item("assistant", 1)])

    async def contended_update(self, session_id: str) -> int:
        # add_items appends blindly: nothing to retry, and nothing detects that the
        # history this writer read is already out of date.
        session = self._session(session_id)
        await session.get_items(limit=LAST_EVENTS)
        await session.add_items([_item("user", 0), _item("assistant", 1)])
        return 0

    async def count(self, session_id: str) -> int:
        return len(await self._session(session_id).get_items())

    async def stale_write(self) -> StaleWrite:
        session_id = f"stale-{uuid.uuid4().hex[:12]}"
        first = self._session(session_id)
        second = self._make(session_id)  # a second copy, as another worker would hold
        self._extra.append(second)
        await first.get_items()
        await second.get_items()
        await first.add_items([_item("user", 0)])
        try:
            await second.add_items([_item("user", 1)])
        except Exception:
            return "raises"
        stored = await first.get_items()
        return "both kept" if len(stored) == 2 else "lost"


class SdkSqliteStore(_SdkStore):
    """`agents.SQLiteSession` on a file (sync sqlite3 run in worker threads)."""

    engine = "sqlite"
    name = "OpenAI SQLiteSession"

    def __init__(self, path: str) -> None:
        super().__init__()
        self._path = path

    async def open(self) -> None:
        _need("agents", "openai-agents")

    def _make(self, session_id: str) -> Any:
        from agents import SQLiteSession

        return SQLiteSession(session_id, self._path)


class SdkSqlAlchemyStore(_SdkStore):
    """`SQLAlchemySession` with one shared async engine (SQLite file or PostgreSQL)."""

    name = "OpenAI SQLAlchemySession"

    def __init__(self, engine: str, where: str) -> None:
        super().__init__()
        self.engine = engine
        self._where = where
        self._schema = f"sdk_{uuid.uuid4().hex[:10]}"
        self._engine: Any = None

    async def open(self) -> None:
        _need("agents.extensions.memory.sqlalchemy_session", "openai-agents + sqlalchemy")
        from sqlalchemy.ext.asyncio import create_async_engine

        if self.engine == "sqlite":
            _need("aiosqlite", "aiosqlite")
            self._engine = create_async_engine(f"sqlite+aiosqlite:///{self._where}")
        elif self.engine == "mysql":
            _need("asyncmy", "asyncmy")
            self._engine = create_async_engine(
                await _create_mysql_database(self._where, self._schema)
            )
            await self._probe_mysql()
        else:
            _need("asyncpg", "asyncpg")
            await _create_pg_schema(self._where, self._schema)
            self._engine = create_async_engine(
                _sqlalchemy_pg_url(self._where),
                connect_args={"server_settings": {"search_path": self._schema}},
            )

    async def _probe_mysql(self) -> None:
        """Create the SDK's tables now: its models declare ``VARCHAR`` without a length,
        which MySQL refuses (``CompileError``), and a store that cannot run is reported
        unavailable with the SDK's own message rather than failing every turn."""
        from sqlalchemy.exc import CompileError

        try:
            await self._make("probe").get_items()
        except CompileError as exc:
            await self._engine.dispose()
            self._engine = None
            await _drop_mysql_database(self._where, self._schema)
            raise StoreUnavailable(f"SQLAlchemySession cannot create its tables: {exc}") from exc

    def _make(self, session_id: str) -> Any:
        from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

        return SQLAlchemySession(session_id, engine=self._engine, create_tables=True)

    async def close(self) -> None:
        await self._close_sessions()
        if self._engine is not None:
            await self._engine.dispose()
        if self.engine == "postgres":
            await _drop_pg_schema(self._where, self._schema)
        elif self.engine == "mysql":
            await _drop_mysql_database(self._where, self._schema)


class SdkRedisStore(_SdkStore):
    """`RedisSession` with one shared client and a random key prefix."""

    engine = "redis"
    name = "OpenAI RedisSession"

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self._prefix = f"sdk_{uuid.uuid4().hex[:10]}"
        self._client: Any = None
        self._clear_on_close = True

    async def open(self) -> None:
        _need("agents.extensions.memory.redis_session", "openai-agents[redis]")
        import redis.asyncio as aioredis

        # The client the floor uses (no socket timeout): the store is what is compared.
        self._client = aioredis.from_url(self._url, socket_timeout=None)

    def _make(self, session_id: str) -> Any:
        from agents.extensions.memory.redis_session import RedisSession

        return RedisSession(session_id, redis_client=self._client, key_prefix=self._prefix)

    async def close(self) -> None:
        if self._client is None:
            return
        try:
            await self._close_sessions()
        finally:
            await self._client.aclose()


class SdkMongoStore(_SdkStore):
    """`MongoDBSession` with one shared client and collections named for this run."""

    engine = "mongo"
    name = "OpenAI MongoDBSession"

    def __init__(self, url: str) -> None:
        super().__init__()
        self._url = url
        self._prefix = f"sdk_{uuid.uuid4().hex[:10]}"
        self._client: Any = None

    async def open(self) -> None:
        _need("agents.extensions.memory.mongodb_session", "openai-agents + pymongo")
        from pymongo import AsyncMongoClient

        self._client = AsyncMongoClient(self._url, serverSelectionTimeoutMS=5000)
        self._database = self._client.get_default_database("agentsessions_bench").name

    def _make(self, session_id: str) -> Any:
        from agents.extensions.memory.mongodb_session import MongoDBSession

        return MongoDBSession(
            session_id,
            client=self._client,
            database=self._database,
            sessions_collection=f"{self._prefix}_sessions",
            messages_collection=f"{self._prefix}_messages",
        )

    async def close(self) -> None:
        if self._client is None:
            return
        await self._close_sessions()
        database = self._client[self._database]
        for suffix in ("_sessions", "_messages"):
            await database.drop_collection(self._prefix + suffix)
        await self._client.close()


# -- Google ADK -----------------------------------------------------------------------

_APP = "bench"
_USER = "user-1"


def _adk_event(author: str, index: int, timestamp: float | None = None) -> Any:
    from google.adk.events import Event
    from google.genai import types

    role = "user" if author == "user" else "model"
    fields: dict[str, Any] = {
        "author": author,
        "invocation_id": "inv",
        "content": types.Content(role=role, parts=[types.Part(text=f"{MESSAGE_TEXT} #{index}")]),
    }
    if timestamp is not None:
        fields["timestamp"] = timestamp
    return Event(**fields)


class _AdkStore(Store):
    kind: ClassVar[Kind] = "peer"
    family = "adk"

    def __init__(self) -> None:
        self._service: Any = None
        self._held: dict[str, Any] = {}

    async def _get(self, session_id: str, last: int | None) -> Any:
        from google.adk.sessions.base_session_service import GetSessionConfig

        config = None if last is None else GetSessionConfig(num_recent_events=last)
        return await self._service.get_session(
            app_name=_APP, user_id=_USER, session_id=session_id, config=config
        )

    async def _append_turn(self, session: Any) -> None:
        await self._service.append_event(session, _adk_event("user", 0))
        await self._service.append_event(session, _adk_event("assistant", 1))

    def forget(self, session_id: str) -> None:
        self._held.pop(session_id, None)

    async def turn(self, session_id: str, last: int | None) -> float:
        started = time.perf_counter()
        session = await self._get(session_id, last)
        read = time.perf_counter() - started
        await self._append_turn(session)
        self._held[session_id] = session
        return read

    async def append(self, session_id: str) -> None:
        await self._append_turn(self._held[session_id])

    async def contended_update(self, session_id: str) -> int:
        from google.adk.errors._stale_session_error import StaleSessionError

        pending = [_adk_event("user", 0), _adk_event("assistant", 1)]
        retries = 0
        while pending:
            session = await self._get(session_id, LAST_EVENTS)
            try:
                while pending:
                    await self._service.append_event(session, pending[0])
                    pending.pop(0)
            except StaleSessionError:
                # The turn is two appends, each its own transaction: a conflict on
                # the second leaves the first stored, so only the rest is retried.
                retries += 1
        return retries

    async def count(self, session_id: str) -> int:
        session = await self._get(session_id, None)
        return len(session.events)

    async def stale_write(self) -> StaleWrite:
        session_id = f"stale-{uuid.uuid4().hex[:12]}"
        await self.create(session_id, 0)
        first = await self._get(session_id, None)
        second = await self._get(session_id, None)
        await self._service.append_event(first, _adk_event("user", 0))
        try:
            await self._service.append_event(second, _adk_event("user", 1))
        except Exception:
            return "raises"
        stored = await self._get(session_id, None)
        return "both kept" if len(stored.events) == 2 else "lost"

    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        session = await self._service.create_session(
            app_name=_APP, user_id=_USER, session_id=session_id
        )
        if history:
            await self._populate(session, history, batch)

    async def _populate(self, session: Any, history: int, batch: int) -> None:
        # One append_event per event, the service's own write path, whatever the batch.
        for index in range(history):
            author = "user" if index % 2 == 0 else "assistant"
            await self._service.append_event(session, _adk_event(author, index))


class AdkDatabaseStore(_AdkStore):
    """`google.adk.sessions.DatabaseSessionService` (SQLAlchemy async) on SQLite or PostgreSQL."""

    name = "ADK DatabaseSessionService"

    def __init__(self, engine: str, where: str) -> None:
        super().__init__()
        self.engine = engine
        self._where = where
        self._schema = f"adk_{uuid.uuid4().hex[:10]}"

    async def open(self) -> None:
        _need("google.adk.sessions.database_session_service", "google-adk + sqlalchemy")
        from google.adk.sessions import DatabaseSessionService

        if self.engine == "sqlite":
            _need("aiosqlite", "aiosqlite")
            self._service = DatabaseSessionService(f"sqlite+aiosqlite:///{self._where}")
        elif self.engine == "mysql":
            _need("asyncmy", "asyncmy")
            url = await _create_mysql_database(self._where, self._schema)
            self._service = DatabaseSessionService(url)
        else:
            _need("asyncpg", "asyncpg")
            await _create_pg_schema(self._where, self._schema)
            self._service = DatabaseSessionService(
                _sqlalchemy_pg_url(self._where),
                connect_args={"server_settings": {"search_path": self._schema}},
            )

    async def _populate(self, session: Any, history: int, batch: int) -> None:
        # No bulk append in ADK: insert the rows through ADK's own ORM classes, in
        # batches, exactly as append_event would store them (one row per event, so
        # the batch changes only how long building takes).
        schema = self._service._get_schema_classes()
        base = time.time() - history * 1e-3
        for start in range(0, history, batch):
            async with self._service.database_session_factory() as sql:
                for index in range(start, min(history, start + batch)):
                    author = "user" if index % 2 == 0 else "assistant"
                    event = _adk_event(author, index, timestamp=base + index * 1e-3)
                    sql.add(schema.StorageEvent.from_event(session, event))
                await sql.commit()

    async def close(self) -> None:
        self._held.clear()
        if self._service is not None:
            await self._service.close()
        if self.engine == "postgres":
            await _drop_pg_schema(self._where, self._schema)
        elif self.engine == "mysql":
            await _drop_mysql_database(self._where, self._schema)


class AdkInMemoryStore(_AdkStore):
    """`google.adk.sessions.InMemorySessionService`, for the memory engine."""

    engine = "memory"
    name = "ADK InMemorySessionService"

    async def open(self) -> None:
        _need("google.adk.sessions", "google-adk")
        from google.adk.sessions import InMemorySessionService

        self._service = InMemorySessionService()

    async def close(self) -> None:
        self._held.clear()


# -- PostgreSQL helpers -----------------------------------------------------------------


def _sqlalchemy_pg_url(url: str) -> str:
    return "postgresql+asyncpg://" + url.partition("://")[2]


async def _create_pg_schema(url: str, schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    try:
        conn = await asyncpg.connect(url)
    except (OSError, asyncpg.PostgresError) as exc:
        raise StoreUnavailable(f"PostgreSQL unreachable: {exc}") from exc
    try:
        await conn.execute(f"CREATE SCHEMA {schema}")
    finally:
        await conn.close()


async def _drop_pg_schema(url: str, schema: str) -> None:
    import asyncpg  # type: ignore[import-untyped,unused-ignore]

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await conn.close()


# -- MySQL helpers ----------------------------------------------------------------------


def _mysql_parts(url: str, suffix: str) -> tuple[dict[str, Any], str]:
    """asyncmy's arguments for the server of *url*, and the peer's own database name."""
    from urllib.parse import unquote, urlsplit

    parts = urlsplit(url)
    args: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or "root"),
        "password": unquote(parts.password or ""),
        "autocommit": True,
    }
    return args, f"{parts.path.lstrip('/')}_{suffix}"


async def _mysql_execute(args: dict[str, Any], sql: str) -> None:
    import asyncmy  # type: ignore[import-untyped,unused-ignore]

    try:
        conn = await asyncmy.connect(**args)
    except OSError as exc:
        raise StoreUnavailable(f"MySQL unreachable: {exc}") from exc
    try:
        async with conn.cursor() as cursor:
            await cursor.execute(sql)
    finally:
        conn.close()


async def _create_mysql_database(url: str, suffix: str) -> str:
    """A fresh database beside *url*'s for one peer store; its SQLAlchemy URL."""
    from urllib.parse import urlsplit

    args, name = _mysql_parts(url, suffix)
    await _mysql_execute(args, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    netloc = urlsplit(url).netloc
    return f"mysql+asyncmy://{netloc}/{name}?charset=utf8mb4"


async def _drop_mysql_database(url: str, suffix: str) -> None:
    args, name = _mysql_parts(url, suffix)
    await _mysql_execute(args, f"DROP DATABASE IF EXISTS `{name}`")
