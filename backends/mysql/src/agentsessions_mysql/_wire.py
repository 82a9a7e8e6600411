"""The wire helpers: single statements, multi-statement packets and batched transactions.

asyncmy sends one statement per round trip unless told otherwise; these put several
statements in one packet (the server runs them in order and returns every result), which
is how a load and a save stay one and two round trips.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from asyncmy import Connection
from asyncmy.errors import Error as DriverError
from asyncmy.errors import InterfaceError

from ._quoting import quote

__all__ = [
    "INSERT_BUDGET",
    "LOST",
    "Batch",
    "code",
    "execute",
    "fetch",
    "lost",
    "multi",
    "snapshot_sets",
]

#: Events are inserted in statements of about this many bytes of JSON at most, and a
#: `Batch` sends what it holds once it passes this many.
INSERT_BUDGET = 1024 * 1024
#: Server and client error codes of a connection that is gone: gone away, lost, out of
#: sync, idle timeout.
LOST = frozenset({2006, 2013, 2014, 2055, 4031})


def code(exc: BaseException) -> int | None:
    """The MySQL error code a driver error carries, or None."""
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def lost(exc: BaseException) -> bool:
    """Whether *exc* says the connection is gone (or unusable)."""
    return isinstance(exc, (OSError, InterfaceError)) or code(exc) in LOST


async def execute(connection: Connection, sql: str, args: Sequence[Any] = ()) -> int:
    async with connection.cursor() as cursor:
        return await cursor.execute(quote(connection, sql, args) if args else sql)


class Batch:
    """A write transaction that sends its statements in as few packets as it can.

    ``START TRANSACTION`` rides with the first read (the row lock), and the writes are
    held back and sent with ``COMMIT`` (or sooner, past `INSERT_BUDGET` bytes), each
    packet a multi-statement query: a save is two round trips, not five. The values
    are quoted by `quote` exactly as for a single statement.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._pending: list[str] = ["START TRANSACTION"]
        self._size = 0

    def _text(self, sql: str, args: Sequence[Any]) -> str:
        return quote(self.connection, sql, args)

    async def fetch(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Send what is pending and *sql*; the rows *sql* returned."""
        statements = [*self._pending, self._text(sql, args)]
        self._pending, self._size = [], 0
        return (await multi(self.connection, statements))[-1]

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        """Hold *sql* back until the commit, unless what is held grows too large."""
        text = self._text(sql, args)
        if self._pending and self._size + len(text) > INSERT_BUDGET:
            await self._flush()  # so that no packet holds more than one large value
        self._pending.append(text)
        self._size += len(text)
        if self._size > INSERT_BUDGET:
            await self._flush()

    async def _flush(self) -> None:
        statements, self._pending, self._size = self._pending, [], 0
        await multi(self.connection, statements)

    async def commit(self) -> None:
        await multi(self.connection, [*self._pending, "COMMIT"])
        self._pending = []


async def multi(connection: Connection, statements: list[str]) -> list[list[tuple[Any, ...]]]:
    """Run *statements* as one multi-statement packet; every statement's rows."""
    sets: list[list[tuple[Any, ...]]] = []
    async with connection.cursor() as cursor:
        await cursor.execute("; ".join(statements))
        sets.append(list(await cursor.fetchall()))
        for _ in range(len(statements) - 1):
            if not await cursor.nextset():
                break
            sets.append(list(await cursor.fetchall()))
    if len(sets) != len(statements):
        raise InterfaceError(f"{len(statements)} statements returned {len(sets)} results")
    return sets


async def snapshot_sets(
    connection: Connection, sql: str, args: Sequence[Any]
) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Run a `snapshot_read` of two selects; their rows. A failure inside it leaves the
    transaction open, so it is rolled back before the connection goes back to the pool."""
    sets: list[list[tuple[Any, ...]]] = []
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(quote(connection, sql, args))
            sets.append(list(await cursor.fetchall()))
            for _ in range(3):  # START, the two selects, COMMIT: four results in all
                if not await cursor.nextset():
                    break
                sets.append(list(await cursor.fetchall()))
    except DriverError as exc:
        if not lost(exc):
            with suppress(DriverError):
                await execute(connection, "ROLLBACK")
        raise
    if len(sets) != 4:
        raise InterfaceError(f"a load returned {len(sets)} results, not 4")
    return sets[1], sets[2]


async def fetch(connection: Connection, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    async with connection.cursor() as cursor:
        await cursor.execute(quote(connection, sql, args) if args else sql)
        rows: list[tuple[Any, ...]] = await cursor.fetchall()
        return rows
