"""A bounded concurrent load on one manager, and what it saw.

Each worker owns one session and appends uniquely named events with ``update()``; an
event whose ``update()`` returned is *acknowledged*. Afterwards every acknowledged
event must be stored (none lost) and no event may be stored twice (no save applied
twice), whatever the faults did in between. Every call is timed against the deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field

from agentsessions import BackendUnavailableError, Session, SessionManager

from faults._tools import MARGIN

#: Errors a call may raise under faults: the documented ones, nothing raw.
DOCUMENTED = (BackendUnavailableError,)
#: Each scenario's figures, printed at the end of the run (see conftest.py).
REPORT: list[Report] = []
_MAX_ROUNDS = 100_000  # a worker's loop is bounded even if the stop never comes


@dataclass
class Report:
    scenario: str
    calls: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    undocumented: list[str] = field(default_factory=list)
    overruns: list[float] = field(default_factory=list)
    slowest: float = 0.0
    acknowledged: int = 0
    lost: int = 0
    applied_twice: int = 0
    recoveries: list[float] = field(default_factory=list)

    def line(self) -> str:
        errors = ", ".join(f"{name} {count}" for name, count in sorted(self.errors.items()))
        recoveries = ", ".join(f"{seconds:.2f}" for seconds in self.recoveries) or "-"
        return (
            f"{self.scenario}: calls {self.calls}, acknowledged {self.acknowledged}, "
            f"errors [{errors or 'none'}], lost {self.lost}, applied-twice "
            f"{self.applied_twice}, slowest call {self.slowest:.2f} s, recovery [{recoveries}] s"
        )


class Load:
    """*workers* tasks calling *manager* until `stop`; bounded and timed."""

    def __init__(self, manager: SessionManager, scenario: str, workers: int = 4) -> None:
        self.manager = manager
        self.report = Report(scenario)
        self.limit = manager.options.timeout + MARGIN
        self._stop = asyncio.Event()
        self._acked: dict[str, set[str]] = {}
        self._tasks = [
            asyncio.create_task(self._worker(f"{scenario}-w{index}")) for index in range(workers)
        ]

    async def _timed(self, call: object) -> bool:
        assert asyncio.iscoroutine(call)
        start = time.monotonic()
        try:
            await call
            return True
        except DOCUMENTED as exc:
            self.report.errors[type(exc).__name__] += 1
            return False
        except Exception as exc:  # recorded, and the test fails on it
            self.report.undocumented.append(f"{type(exc).__name__}: {exc}")
            return False
        finally:
            took = time.monotonic() - start
            self.report.calls += 1
            self.report.slowest = max(self.report.slowest, took)
            if took > self.limit:
                self.report.overruns.append(round(took, 2))

    async def _worker(self, session_id: str) -> None:
        acked = self._acked.setdefault(session_id, set())
        for round_ in range(_MAX_ROUNDS):
            if self._stop.is_set():
                return
            content = f"{session_id}:{round_}"

            def add(session: Session, content: str = content) -> None:
                session.add_event("user", content)

            if await self._timed(self.manager.update(session_id, add, create=True)):
                acked.add(content)
            if round_ % 4 == 0:
                await self._timed(self.manager.get(session_id, last_events=3))
            if round_ % 8 == 0:
                await self._timed(self.manager.list_sessions(limit=5))
            await asyncio.sleep(0.005)

    async def recovered(self, within: float = 20.0) -> float:
        """Seconds until the manager answers again (bounded by *within*); recorded."""
        start = time.monotonic()
        while True:
            try:
                await self.manager.list_sessions(limit=1)
                break
            except BackendUnavailableError:
                pass
            took = time.monotonic() - start
            assert took < within, f"{self.report.scenario}: no recovery within {within} s"
            await asyncio.sleep(0.05)
        took = time.monotonic() - start
        self.report.recoveries.append(took)
        return took

    async def stop(self) -> Report:
        """Stop the workers, then check every session against what was acknowledged."""
        self._stop.set()
        await asyncio.wait_for(asyncio.gather(*self._tasks), self.limit * 3)
        report = self.report
        for session_id, acked in self._acked.items():
            stored = None
            for _ in range(100):  # bounded: the server is back, a read must work soon
                try:
                    stored = await self.manager.get(session_id)
                    break
                except BackendUnavailableError:
                    await asyncio.sleep(0.1)
            contents = [] if stored is None else [event.content for event in stored.events]
            report.acknowledged += len(acked)
            report.lost += len(acked - set(contents))
            report.applied_twice += len(contents) - len(set(contents))
            if stored is not None:
                assert stored.version == 1 + len(contents), "a save landed without its events"
        REPORT.append(report)
        return report

    def check(self) -> None:
        report = self.report
        assert not report.undocumented, f"raw errors: {report.undocumented[:5]}"
        assert not report.overruns, f"calls past deadline + {MARGIN} s: {report.overruns}"
        assert report.lost == 0, report.line()
        assert report.applied_twice == 0, report.line()
        assert report.acknowledged > 0, report.line()
