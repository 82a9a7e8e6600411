"""Where a manager's "now" comes from: one small protocol, the system clock by default.

Every timestamp the manager writes (``created_at``, ``updated_at``, ``expires_at``) and
every liveness check a backend makes is taken from ``manager.clock``, so a test can
freeze time, create sessions with identical timestamps and step past a ttl without
sleeping (the conformance kit does). Event timestamps are the caller's, not the clock's.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Protocol, runtime_checkable

__all__ = ["SYSTEM_CLOCK", "Clock", "SystemClock"]


@runtime_checkable
class Clock(Protocol):
    """Anything with ``now()`` returning a timezone-aware UTC `datetime`."""

    def now(self) -> datetime: ...


class SystemClock:
    """The machine's wall clock, in UTC: every manager's default."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
