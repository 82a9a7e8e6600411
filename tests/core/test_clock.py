"""The manager's clock: the one source of "now" for timestamps and expiry."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import Clock, InvalidOptionError, SystemClock, connect

T0 = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=timezone.utc)


class Stepped:
    def __init__(self, when: datetime) -> None:
        self.when = when

    def now(self) -> datetime:
        return self.when


def test_default_clock_is_system_utc() -> None:
    manager = connect("memory://")
    assert isinstance(manager.clock, SystemClock)
    assert isinstance(manager.clock, Clock)
    now = manager.clock.now()
    assert now.tzinfo is not None and now.utcoffset() == timedelta(0)


def test_connect_refuses_a_clock_without_now() -> None:
    with pytest.raises(InvalidOptionError, match="clock"):
        connect("memory://", clock=object())  # type: ignore[arg-type]


async def test_timestamps_and_expiry_follow_the_clock() -> None:
    clock = Stepped(T0)
    async with connect("memory://", clock=clock, ttl=10) as manager:
        session = await manager.create("a")
        assert session.created_at == session.updated_at == T0
        clock.when = T0 + timedelta(seconds=5)
        session.add_event("user", "x")
        await manager.save(session)
        assert session.updated_at == clock.when
        clock.when = T0 + timedelta(seconds=14.999)
        assert await manager.get("a") is not None
        clock.when = T0 + timedelta(seconds=15)
        assert await manager.get("a") is None
        assert await manager.purge_expired() == 1
        assert await manager.delete("a") is False


def test_with_options_keeps_the_clock() -> None:
    clock = Stepped(T0)
    manager = connect("memory://x", clock=clock)
    assert manager.with_options(ttl=5).clock is clock
