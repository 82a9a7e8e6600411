"""`FaultProxy`: a TCP proxy on loopback that passes, freezes, resets or loses replies.

The kit puts it between a manager and its server to prove what the contract says about
faults on the wire: a frozen or black-holed server costs a call no more than its
``timeout``, a reset surfaces as `BackendUnavailableError`, a reply lost after the
request reached the server leaves a save that its retry lands exactly once, and the
same manager works again once traffic flows. Every wait in it ends when the mode
changes or the proxy stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from types import TracebackType

__all__ = ["FaultProxy", "ProxyMode"]

_CHUNK = 65536


class ProxyMode(enum.Enum):
    """What the proxy does with traffic (see `FaultProxy.mode`)."""

    #: Forward both ways.
    PASS = "pass"
    #: Nothing moves: bytes are held, new connections accepted and never answered (a
    #: frozen server, or a black hole once no connection is open yet).
    FREEZE = "freeze"
    #: Requests reach the server; the first reply byte resets the client's connection.
    DROP_REPLIES = "drop_replies"
    #: Every connection, open or new, is reset at once.
    RESET = "reset"
    #: Like DROP_REPLIES for the first reply only: its connection is reset, and the
    #: proxy passes everything again (one lost reply, as in a brief network fault).
    LOSE_NEXT_REPLY = "lose_next_reply"


class FaultProxy:
    """``async with FaultProxy(host, port) as proxy:`` listens on ``127.0.0.1:proxy.port``
    and forwards to *host*:*port*; set ``proxy.mode`` at any time. ``refuse()`` closes
    the listening socket (connections are then refused); ``stop()`` ends everything."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.target_port = host, port
        self.port = 0
        self._mode = ProxyMode.PASS
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._stopped = False
        #: Connections accepted, and replies dropped, since the start.
        self.accepted = 0
        self.dropped_replies = 0

    @property
    def mode(self) -> ProxyMode:
        return self._mode

    @mode.setter
    def mode(self, mode: ProxyMode) -> None:
        self._mode = ProxyMode(mode)
        self._changed.set()
        self._changed = asyncio.Event()
        if self._mode is ProxyMode.RESET:
            self.reset_all()

    async def start(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def reset_all(self) -> None:
        """Reset every open connection (both sides)."""
        for writer in list(self._writers):
            _abort(writer)

    async def refuse(self) -> None:
        """Stop listening: new connections are refused; open ones are reset."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        self.reset_all()

    async def stop(self) -> None:
        self._stopped = True
        self._changed.set()
        await self.refuse()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    async def __aenter__(self) -> FaultProxy:
        return await self.start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _flowing(self) -> None:
        """Return once the mode lets bytes move (or the proxy stopped)."""
        while self._mode is ProxyMode.FREEZE and not self._stopped:
            await self._changed.wait()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        task = asyncio.current_task()
        assert task is not None, "a connection handler runs in a task: asyncio started it"
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            await self._flowing()
            if self._mode is ProxyMode.RESET or self._stopped:
                return
            up_reader, upstream = await asyncio.open_connection(self.host, self.target_port)
            self._writers.add(upstream)
            await asyncio.gather(
                self._pump(reader, upstream, reply=False, peer=writer),
                self._pump(up_reader, writer, reply=True, peer=upstream),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for side in (writer, upstream):
                if side is not None:
                    self._writers.discard(side)
                    _abort(side)
            self._tasks.discard(task)

    async def _pump(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        reply: bool,
        peer: asyncio.StreamWriter,
    ) -> None:
        try:
            while not self._stopped:
                data = await reader.read(_CHUNK)
                if not data:
                    break
                await self._flowing()
                if self._mode is ProxyMode.RESET or self._stopped:
                    break
                if reply and self._mode in (ProxyMode.DROP_REPLIES, ProxyMode.LOSE_NEXT_REPLY):
                    if self._mode is ProxyMode.LOSE_NEXT_REPLY:
                        self._mode = ProxyMode.PASS
                    self.dropped_replies += 1
                    break
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            _abort(writer)
            _abort(peer)


def _abort(writer: asyncio.StreamWriter) -> None:
    # abort(), not close(): the peer sees a reset, never a polite end of stream.
    with contextlib.suppress(Exception):
        writer.transport.abort()
