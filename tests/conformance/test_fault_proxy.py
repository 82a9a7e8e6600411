"""The kit's FaultProxy on its own: each mode does to an echo server what it says."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from agentsessions_conformance import FaultProxy, ProxyMode

pytestmark = pytest.mark.asyncio


@pytest_asyncio.fixture
async def echo() -> AsyncIterator[tuple[int, list[bytes]]]:
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1024):
                received.append(data)
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1], received
    server.close()
    await server.wait_closed()


async def _roundtrip(port: int, payload: bytes, wait: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.read(1024), wait)
    finally:
        writer.transport.abort()


async def test_pass_forwards(echo: tuple[int, list[bytes]]) -> None:
    async with FaultProxy("127.0.0.1", echo[0]) as proxy:
        assert await _roundtrip(proxy.port, b"ping") == b"ping"


async def test_freeze_holds_bytes_until_pass(echo: tuple[int, list[bytes]]) -> None:
    async with FaultProxy("127.0.0.1", echo[0]) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        proxy.mode = ProxyMode.FREEZE
        writer.write(b"held")
        await writer.drain()
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(reader.read(1024), 0.3)
        assert echo[1] == []  # nothing reached the server
        proxy.mode = ProxyMode.PASS
        assert await asyncio.wait_for(reader.read(1024), 2) == b"held"
        writer.transport.abort()


async def test_drop_replies_lets_the_request_reach_the_server(
    echo: tuple[int, list[bytes]],
) -> None:
    async with FaultProxy("127.0.0.1", echo[0]) as proxy:
        proxy.mode = ProxyMode.DROP_REPLIES
        try:
            reply = await _roundtrip(proxy.port, b"request")
        except (ConnectionError, OSError):
            reply = b""
        assert reply == b""  # the reply never arrived
        assert echo[1] == [b"request"]  # but the request was served
        assert proxy.dropped_replies == 1


async def test_lose_next_reply_loses_one_reply_then_passes(
    echo: tuple[int, list[bytes]],
) -> None:
    async with FaultProxy("127.0.0.1", echo[0]) as proxy:
        proxy.mode = ProxyMode.LOSE_NEXT_REPLY
        try:
            reply = await _roundtrip(proxy.port, b"first")
        except (ConnectionError, OSError):
            reply = b""
        assert reply == b""  # its reply was lost
        assert echo[1] == [b"first"]  # after the request was served
        assert proxy.mode is ProxyMode.PASS and proxy.dropped_replies == 1
        assert await _roundtrip(proxy.port, b"second") == b"second"  # then it passes


async def test_reset_and_refuse(echo: tuple[int, list[bytes]]) -> None:
    async with FaultProxy("127.0.0.1", echo[0]) as proxy:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"a")
        assert await asyncio.wait_for(reader.read(1024), 2) == b"a"
        proxy.mode = ProxyMode.RESET
        # A reset or an end of stream: either way the connection is gone.
        with contextlib.suppress(ConnectionError, OSError):
            assert await asyncio.wait_for(reader.read(1024), 2) == b""
        proxy.mode = ProxyMode.PASS
        assert await _roundtrip(proxy.port, b"b") == b"b"
        await proxy.refuse()
        with pytest.raises(OSError):
            await _roundtrip(proxy.port, b"c")
