"""The kit's clock: frozen until a test moves it, so timestamps tie and ttls pass at will."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone

__all__ = ["FrozenClock"]


class FrozenClock:
    """An `agentsessions.Clock` that stands still until `advance` or `set` moves it.

    It starts at the real time (whole milliseconds), so an engine that also expires
    data by its own wall clock (Redis key expiry, a MongoDB TTL index) holds a
    session at least as long as the kit's clock says it lives.
    """

    def __init__(self, start: datetime | None = None) -> None:
        if start is None:
            start = datetime.now(timezone.utc)
            start = start.replace(microsecond=start.microsecond // 1000 * 1000)
        if start.tzinfo is None or start.utcoffset() != timedelta(0):
            raise ValueError(f"FrozenClock needs an aware UTC datetime, not {start!r}")
        self._now = start
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        """Move forward by *seconds* (no sleeping); returns the new time."""
        if seconds < 0:
            raise ValueError("a FrozenClock never goes back")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def tick(self) -> datetime:
        """Move forward by one microsecond: the next timestamp differs, barely."""
        return self.advance(1e-6)

    def __repr__(self) -> str:
        return f"FrozenClock({self._now.isoformat()})"
