"""What the fault tests share: a silent server, freezing a server, timing a call.

Everything here talks to loopback only, and signals only processes the tests started
(a private server's own PIDs and their children, read from /proc).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Awaitable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: What a call may take beyond its deadline: the deadline is exact, but the event loop
#: shares two cores with other test runs.
MARGIN = 1.5
#: (what, deadline, slowest call, calls) of each deadline check, printed at the end.
DEADLINES: list[tuple[str, float, float, int]] = []


class SilentServer:
    """A TCP server on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self) -> None:
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self._listener.settimeout(0.2)
        self.port: int = self._listener.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)  # held open, never read nor written

    @property
    def accepted(self) -> int:
        return len(self._held)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for conn in self._held:
            conn.close()

    def __enter__(self) -> SilentServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _children(pid: int) -> list[int]:
    """PIDs whose parent is *pid* (PostgreSQL's backends are children of the postmaster)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def server_pids(pids: list[int]) -> list[int]:
    """The given server PIDs and their children."""
    every = list(pids)
    for pid in pids:
        every.extend(_children(pid))
    return every


@contextlib.contextmanager
def frozen(pids: list[int]) -> Iterator[None]:
    """SIGSTOP the server processes (and their children) for the block, then SIGCONT."""
    stopped = server_pids(pids)
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in server_pids(pids) + stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


async def timed(call: Awaitable[T]) -> tuple[float, BaseException | None]:
    """How long *call* took, and what it raised (None if it returned)."""
    start = time.monotonic()
    try:
        await call
    except Exception as exc:
        return time.monotonic() - start, exc
    return time.monotonic() - start, None
