"""Deliberately broken server backends (and a file engine) that the kit must catch.

Each subclasses a real manager and breaks the narrowest thing: one Lua script's text,
one re-send, one filter, one error rule. ``caught_by`` names the clauses that must fail
on it; test_broken_server_backends.py runs exactly those on each, against the private
servers, and the real manager the same clauses, which must pass.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from agentsessions import SessionError, SessionSummary
from agentsessions.backend import ErrorRule, SaveRequest
from agentsessions_mongo import MongoSessionManager
from agentsessions_postgres import PostgresSessionManager
from agentsessions_postgres._manager import _CONNECTION_LOST
from agentsessions_redis import RedisSessionManager, _scripts
from agentsessions_sqlite import SQLiteSessionManager
from agentsessions_sqlite._connection import is_busy

__all__ = ["BROKEN_SERVERS", "REFERENCE_OF"]

_T = TypeVar("_T")

# The save script's token check: on a version mismatch, a save whose token is stored
# already landed (the retry of a save whose reply was lost).
_TOKEN_CHECK = "  if landed(cur[1], ARGV[3]) then return 1 end\n"
assert _TOKEN_CHECK in _scripts.SAVE, "the SAVE script changed: update _TOKEN_CHECK"


class RedisSaveWithoutTokenCheck(RedisSessionManager):
    """The save script lacks its token check: a re-sent save (redis-py's own retry after
    a dropped connection, or the caller's after an ambiguous failure) is a conflict."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {
            "test_lost_reply_save_retry_lands_exactly_once",
            "test_lost_reply_update_applies_fn_once",
            "test_lost_replies_one_after_another_each_land_once",
            "test_wire_lost_reply_save_retry_lands_exactly_once",
            "test_wire_one_lost_reply_save_lands_once",
            "test_wire_one_lost_reply_update_applies_fn_once",
        }
    )

    async def _new_link(self) -> Any:
        link = await super()._new_link()
        script = _scripts.SAVE.replace(_TOKEN_CHECK, "")
        return dataclasses.replace(link, save=link.client.register_script(script))


class PostgresSaveResentOnItsOwn(PostgresSessionManager):
    """A save whose connection died is sent again by the backend itself, as a new save
    (a fresh token): after a lost reply its own landed write makes it a conflict."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {
            "test_wire_one_lost_reply_save_lands_once",
            "test_wire_one_lost_reply_update_applies_fn_once",
        }
    )

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        try:
            await super()._save(request, now)
        except (*_CONNECTION_LOST, OSError):
            # The bug: sent again on its own, as a save of its own (a new token).
            await super()._save(dataclasses.replace(request, token=uuid.uuid4().hex), now)


class _NoVersionFilter:
    """A collection whose ``update_one`` drops the version out of its filter."""

    def __init__(self, collection: Any) -> None:
        self._collection = collection

    def __getattr__(self, name: str) -> Any:
        return getattr(self._collection, name)

    async def update_one(self, query: dict[str, Any], update: Any, **kwargs: Any) -> Any:
        # The lineage stamp carries the version too ("<lineage>:<version>").
        query = {key: value for key, value in query.items() if key not in ("version", "lineage")}
        return await self._collection.update_one(query, update, **kwargs)


class MongoPublishWithoutVersionFilter(MongoSessionManager):
    """The save's publish (one conditional update of the session document) matches the
    session by id and incarnation only: two saves racing at one version both land."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {
            "test_concurrent_saves_exactly_one_lands",
            "test_concurrent_saves_across_managers",
        }
    )

    @property
    def _sessions(self) -> Any:
        return _NoVersionFilter(super()._sessions)


def _lock_as_deadline(manager: SQLiteSessionManager, exc: Any) -> SessionError:
    return manager._timed_out(f"the database stayed locked: {exc}")


class SQLiteLockAsDeadline(SQLiteSessionManager):
    """A lock held past busy_timeout is reported as a plain timeout, so update() takes
    its outcome for unknown and re-sends until its whole deadline has passed."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_file_lock_held_by_another_process_fails_writes_within_the_wait"}
    )
    driver_errors = (
        ErrorRule((Exception,), when=is_busy, build=_lock_as_deadline),
        *SQLiteSessionManager.driver_errors[1:],
    )


#: How often a locked erasure is tried again (each try waits busy_timeout): more than
#: the clause's whole deadline holds, so only the deadline ends the waiting.
_LOCKED_TRIES = 100


class SQLiteDeleteUserWaitsOutTheLock(SQLiteSessionManager):
    """delete_user() tries the erasure again while the database stays locked ("an
    erasure must land"), so against a write lock another process holds it waits the
    call's whole deadline instead of giving up after busy_timeout."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_file_lock_held_by_another_process_fails_writes_within_the_wait"}
    )

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        for attempt in range(_LOCKED_TRIES):
            try:
                return await super()._delete_user(user_id, now)
            except sqlite3.Error as exc:
                if not is_busy(exc) or attempt == _LOCKED_TRIES - 1:
                    raise
        raise AssertionError("unreachable: the last try raises")


#: Tries of a statement that timed out, and the pause between them.
_TIMED_OUT_TRIES = 4
_PAUSE = 0.5


async def _retried_on_timeout(run: Callable[[], Awaitable[_T]]) -> _T:
    """*run* tried again when it times out, the call's own deadline taken for a
    statement timeout (its cancellation caught with asyncpg's TimeoutError)."""
    for attempt in range(_TIMED_OUT_TRIES):
        try:
            return await run()
        except (asyncio.TimeoutError, asyncio.CancelledError):
            if attempt == _TIMED_OUT_TRIES - 1:
                raise
            await asyncio.sleep(_PAUSE)
    raise AssertionError("unreachable: the last try raises")


class PostgresDeleteUserPastItsDeadline(PostgresSessionManager):
    """delete_user() tries its transaction again when it times out (a lock wait, it
    assumes) and takes the cancellation of the call's deadline for such a timeout:
    against a frozen server it keeps trying, seconds past its deadline."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_wire_frozen_server_every_operation_ends_at_its_deadline"}
    )

    async def _delete_user(self, user_id: str, now: datetime) -> int:
        def erase() -> Awaitable[int]:
            return PostgresSessionManager._delete_user(self, user_id, now)

        return await _retried_on_timeout(erase)


class PostgresForkListingPastItsDeadline(PostgresSessionManager):
    """list_sessions(forked_from=) reads again when its read times out, and takes the
    cancellation of the call's deadline for such a timeout: against a frozen server it
    keeps reading, seconds past its deadline."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_wire_frozen_server_every_operation_ends_at_its_deadline"}
    )

    async def _list_forks(
        self,
        source_id: str,
        user_id: str | None,
        limit: int,
        after: tuple[datetime, str] | None,
        now: datetime,
    ) -> list[SessionSummary]:
        def read() -> Awaitable[list[SessionSummary]]:
            return PostgresSessionManager._list_forks(self, source_id, user_id, limit, after, now)

        return await _retried_on_timeout(read)


class PostgresForkWithoutLock(PostgresSessionManager):
    """fork() reads the source's row without FOR SHARE: at READ COMMITTED a save that
    commits between that read and the copy of the events mixes two versions. (The read
    also naps 20 ms inside its statement, as a slow server would: the window shows.)"""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_a_fork_racing_saves_is_one_version_of_its_source"}
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        locked = self._sql.fork_source
        assert "FOR SHARE" in locked, "the fork's source read changed: update this backend"
        unlocked = locked.replace("FOR SHARE", "").replace(
            f"FROM {self._sql_schema()}.agentsessions_sessions",
            f"FROM {self._sql_schema()}.agentsessions_sessions, (SELECT pg_sleep(0.02)) AS nap",
        )
        assert unlocked != locked.replace("FOR SHARE", ""), "the nap was not added"
        self._sql = dataclasses.replace(self._sql, fork_source=unlocked)

    def _sql_schema(self) -> str:
        from agentsessions_postgres._schema import quote_ident

        return quote_ident(self.options.schema)


class PostgresArchiveEmptyInOutage(PostgresSessionManager):
    """archived_events() treats a lost connection as "nothing archived" and returns an
    empty list instead of raising: an outage read as an answer."""

    caught_by: ClassVar[frozenset[str]] = frozenset(
        {"test_wire_outage_every_operation_raises_backend_unavailable"}
    )

    async def _archived(self, session_id: str, now: datetime) -> list[str]:
        try:
            return await super()._archived(session_id, now)
        except (*_CONNECTION_LOST, OSError):
            return []


#: Name -> broken manager class; name -> the real class it breaks.
BROKEN_SERVERS: dict[str, type[Any]] = {
    cls.__name__: cls
    for cls in (
        RedisSaveWithoutTokenCheck,
        PostgresSaveResentOnItsOwn,
        PostgresForkWithoutLock,
        PostgresArchiveEmptyInOutage,
        PostgresDeleteUserPastItsDeadline,
        PostgresForkListingPastItsDeadline,
        MongoPublishWithoutVersionFilter,
        SQLiteLockAsDeadline,
        SQLiteDeleteUserWaitsOutTheLock,
    )
}
REFERENCE_OF: dict[str, type[Any]] = {
    name: next(base for base in cls.__mro__[1:] if base.__module__.startswith("agentsessions_"))
    for name, cls in BROKEN_SERVERS.items()
}
