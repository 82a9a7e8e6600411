"""A small asyncio connection pool for asyncmy that can abandon a connection at once.

Not asyncmy's own pool: a connection whose statement was cancelled must be closed
without a goodbye (a frozen server never answers one), and the statement it left
running on the server must be killed (MySQL keeps running a statement whose client
went away until it next writes to the socket, holding its row locks meanwhile). Here
`abandon` closes the socket and sends ``KILL <thread id>`` from a side connection,
in the background, so that the cancelled call returns at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import suppress

from asyncmy import Connection

__all__ = ["Pool"]


class Pool:
    """At most *max_size* connections from *connect*, *min_size* kept open."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Connection]],
        *,
        min_size: int,
        max_size: int,
        kill_timeout: float,
    ) -> None:
        self._connect = connect
        self._min_size = min_size
        self._slots = asyncio.Semaphore(max_size)
        self._idle: deque[tuple[int, Connection]] = deque()
        self._generation = 0
        self._kill_timeout = kill_timeout
        self._kills: set[asyncio.Task[None]] = set()
        self._closed = False

    async def fill(self) -> None:
        """Open connections until *min_size* are idle."""
        while len(self._idle) < self._min_size:
            self._idle.append((self._generation, await self._connect()))

    async def acquire(self) -> tuple[int, Connection]:
        """A connection and the generation it belongs to (give both to `release`)."""
        await self._slots.acquire()
        try:
            while self._idle:
                generation, connection = self._idle.pop()
                if generation == self._generation and connection.connected:
                    return generation, connection
                connection.close()
            return self._generation, await self._connect()
        except BaseException:
            self._slots.release()
            raise

    def release(self, generation: int, connection: Connection) -> None:
        """Give back a connection that has no statement in flight."""
        self._slots.release()
        if self._closed or generation != self._generation or not connection.connected:
            connection.close()
        else:
            self._idle.append((generation, connection))

    def abandon(self, connection: Connection) -> None:
        """Close a connection that may have a statement in flight, and kill that statement."""
        self._slots.release()
        thread_id = connection.thread_id() if connection.connected else None
        connection.close()
        if thread_id is not None and not self._closed:
            task = asyncio.get_running_loop().create_task(self._kill(thread_id))
            self._kills.add(task)
            task.add_done_callback(self._kills.discard)

    async def _kill(self, thread_id: int) -> None:
        # Best effort: a server that cannot be reached has dropped the statement with
        # the connection, or will once it notices the closed socket.
        with suppress(Exception):
            await asyncio.wait_for(self._send_kill(thread_id), self._kill_timeout)

    async def _send_kill(self, thread_id: int) -> None:
        side = await self._connect()
        try:
            async with side.cursor() as cursor:
                await cursor.execute("KILL %s", (thread_id,))
        finally:
            side.close()

    def expire(self) -> None:
        """Presume every pooled connection dead: each is replaced on its next use."""
        self._generation += 1
        while self._idle:
            self._idle.pop()[1].close()

    async def close(self) -> None:
        """Say goodbye on every idle connection; wait for pending kills."""
        self._closed = True
        while self._idle:
            with suppress(Exception):
                await self._idle.pop()[1].ensure_closed()
        if self._kills:
            await asyncio.wait(set(self._kills))

    def terminate(self) -> None:
        """Close every idle connection's socket at once."""
        self._closed = True
        while self._idle:
            self._idle.pop()[1].close()
        for task in self._kills:
            task.cancel()
