"""What every failover drill measures and prints: the same figures for each engine.

A drill runs a bounded concurrent load of ``update()`` appends, kills the primary,
lets the deployment fail over, and then reads every session back from the new
primary. `DrillReport` holds what it saw; tests/ha/conftest.py prints every report at
the end of the run (the ``ha`` nox session's output).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agentsessions import BackendUnavailableError, Session, SessionManager

#: The only errors a caller may see while the primary is gone: the documented
#: "cannot be reached / did not finish in time" family (BackendTimeoutError is one).
FAILOVER_ERRORS: tuple[type[BaseException], ...] = (BackendUnavailableError,)
#: Pause after a failed call, so that a worker does not spin against a dead server.
_BACKOFF = 0.05


@dataclass
class DrillReport:
    """One drill's figures. ``lost`` counts acknowledged appends missing afterwards."""

    name: str
    settings: str
    attempted: int = 0
    acknowledged: int = 0
    lost: int = 0
    #: Appends that raised yet are stored (the outcome of a failed call is unknown).
    unacknowledged_stored: int = 0
    #: Seconds from the kill to the first acknowledged append begun after it.
    recovery: float | None = None
    #: Seconds from the kill until the deployment named a new primary.
    failover: float | None = None
    errors: Counter[str] = field(default_factory=Counter)
    unexpected: list[str] = field(default_factory=list)
    wall: float = 0.0

    def line(self) -> str:
        errors = ", ".join(f"{name} x{count}" for name, count in sorted(self.errors.items()))
        recovery = "never" if self.recovery is None else f"{self.recovery:.2f} s"
        failover = "never" if self.failover is None else f"{self.failover:.2f} s"
        return (
            f"{self.name} [{self.settings}]: attempted={self.attempted} "
            f"acknowledged={self.acknowledged} lost={self.lost} "
            f"unacknowledged-but-stored={self.unacknowledged_stored} "
            f"new-primary-after={failover} writes-succeed-again-after={recovery} "
            f"errors: {errors or 'none'}; wall {self.wall:.1f} s"
        )


#: Every report of this run, printed by the conftest's terminal summary.
REPORTS: list[DrillReport] = []


class AppendLoad:
    """*workers* tasks, each appending numbered events to its own session with
    ``update(..., last_events=0)`` until stopped or *max_calls* each (bounded).

    ``acknowledged[session_id]`` holds the numbers whose call returned; after the drill,
    `count_lost` compares them with what the store holds.
    """

    def __init__(
        self,
        manager: SessionManager,
        report: DrillReport,
        *,
        workers: int = 8,
        max_calls: int = 5000,
        prefix: str = "drill",
    ) -> None:
        self.manager = manager
        self.report = report
        self.session_ids = [f"{prefix}-{i}" for i in range(workers)]
        self.acknowledged: dict[str, list[int]] = {sid: [] for sid in self.session_ids}
        self.attempted: dict[str, list[int]] = {sid: [] for sid in self.session_ids}
        self.max_calls = max_calls
        self.killed_at: float | None = None
        self._numbers = itertools.count()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for session_id in self.session_ids:
            await self.manager.create(session_id)
        self._tasks = [asyncio.create_task(self._work(sid)) for sid in self.session_ids]

    def mark_kill(self) -> None:
        self.killed_at = time.monotonic()

    async def _work(self, session_id: str) -> None:
        for _ in range(self.max_calls):
            if self._stop.is_set():
                return
            number = next(self._numbers)
            began = time.monotonic()
            self.report.attempted += 1
            self.attempted[session_id].append(number)

            def append(session: Session, number: int = number) -> None:
                session.add_event("load", {"n": number})

            try:
                await self.manager.update(session_id, append, last_events=0)
            except FAILOVER_ERRORS as exc:
                self.report.errors[type(exc).__name__] += 1
                await asyncio.sleep(_BACKOFF)
                continue
            except Exception as exc:  # any other type fails the drill's assertion
                self.report.errors[type(exc).__name__] += 1
                self.report.unexpected.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(_BACKOFF)
                continue
            self.report.acknowledged += 1
            self.acknowledged[session_id].append(number)
            killed = self.killed_at
            if killed is not None and began >= killed and self.report.recovery is None:
                self.report.recovery = time.monotonic() - killed

    async def run_until(self, condition: Callable[[], bool], timeout: float) -> bool:
        """Let the load run until *condition()* holds (polled) or *timeout* passes."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            if all(task.done() for task in self._tasks):
                return condition()
            await asyncio.sleep(0.05)
        return condition()

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def count_lost(self, reader: SessionManager) -> None:
        """Read every session back through *reader*: fill in lost and unacknowledged-stored."""
        for session_id in self.session_ids:
            session = await _bounded_retry(lambda sid=session_id: reader.get(sid))
            stored = set()
            if session is not None:
                stored = {event.content["n"] for event in session.events}  # type: ignore[index]
            acknowledged = set(self.acknowledged[session_id])
            self.report.lost += len(acknowledged - stored)
            self.report.unacknowledged_stored += len(
                (set(self.attempted[session_id]) - acknowledged) & stored
            )


async def _bounded_retry(call: Callable[[], Awaitable[Session | None]]) -> Session | None:
    """*call*, retried on the failover errors for at most 20 s: the read-back comes after
    the failover, but a client may still be finding the new primary."""
    deadline = time.monotonic() + 20
    while True:
        try:
            return await call()
        except FAILOVER_ERRORS:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)
