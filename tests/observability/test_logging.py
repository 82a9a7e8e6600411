"""The operator's log: connection opened / failed / lost / recovered, migrations applied,
retries exhausted; standard `logging` records with structured fields."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from pathlib import Path

import pytest
from agentsessions import (
    BackendTimeoutError,
    BackendUnavailableError,
    ManagerOptions,
    MemorySessionManager,
    Session,
    SessionConflictError,
    connect,
)
from agentsessions.backend import LoadedSession
from agentsessions.instrumentation import OPERATIONS

from .conftest import closed_loopback_port, lose_the_race


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


class Flaky(MemorySessionManager):
    """Memory, with a switch that makes reads fail as a dropped connection would."""

    down = False

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        if self.down:
            raise self._unavailable(ConnectionResetError("connection reset by peer"))
        return await super()._load(session_id, last_events, now)


async def test_opened_and_migrated_are_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="agentsessions")
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    async with connect(url) as manager:
        await manager.create("s")
    async with connect(url) as manager:  # already migrated: no second record
        await manager.get("s")
    (migrated,) = _events(caplog, "migrations_applied")
    assert migrated.levelno == logging.INFO
    assert migrated.from_version == 0  # type: ignore[attr-defined]
    assert migrated.to_version >= 1  # type: ignore[attr-defined]
    assert migrated.backend == "sqlite"  # type: ignore[attr-defined]
    opened = _events(caplog, "connection_opened")
    assert len(opened) == 2
    assert all(r.url == url for r in opened)  # type: ignore[attr-defined]


async def test_lost_and_recovered_are_logged_once_each_with_the_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="agentsessions")
    manager = Flaky("memory://")
    async with manager:
        await manager.create("s")
        manager.down = True
        for _ in range(3):
            with pytest.raises(BackendUnavailableError):
                await manager.get("s")
        # While the outage lasts the manager is watched for its first success...
        assert set(OPERATIONS) <= set(vars(manager))
        manager.down = False
        assert await manager.get("s") is not None
        await manager.get("s")
    # ...and costs nothing again once it recovered.
    assert not set(OPERATIONS) & set(vars(manager))
    lost = _events(caplog, "connection_lost")
    assert [r.levelno for r in lost] == [logging.WARNING, logging.DEBUG, logging.DEBUG]
    assert "ConnectionResetError: connection reset by peer" in lost[0].getMessage()
    (recovered,) = _events(caplog, "connection_recovered")
    assert recovered.levelno == logging.INFO
    assert recovered.failures == 3  # type: ignore[attr-defined]
    assert recovered.downtime_s >= 0  # type: ignore[attr-defined]


async def test_a_server_that_cannot_be_reached_is_logged_once_not_per_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pytest.importorskip("agentsessions_postgres")
    port = closed_loopback_port()
    caplog.set_level(logging.INFO, logger="agentsessions")
    manager = connect(f"postgresql://app@127.0.0.1:{port}/db?connect_timeout=2")
    try:
        for _ in range(3):
            with pytest.raises(BackendUnavailableError):
                await manager.get("s")
    finally:
        await manager.close()
    (failed,) = _events(caplog, "connection_failed")
    assert failed.levelno == logging.WARNING
    assert failed.backend == "postgresql"  # type: ignore[attr-defined]
    assert f"127.0.0.1:{port}" in failed.getMessage()


async def test_an_update_that_runs_out_of_retries_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="agentsessions")
    rival = connect("memory://log-retries")
    async with connect("memory://log-retries") as manager:
        await manager.create("hot")

        async def always_lose(session: Session) -> None:
            await lose_the_race(rival, "hot")

        with pytest.raises(SessionConflictError):
            await manager.update("hot", always_lose, retries=2)
    (exhausted,) = _events(caplog, "retries_exhausted")
    assert exhausted.levelno == logging.WARNING
    assert exhausted.retries == 2  # type: ignore[attr-defined]
    assert "hot" not in exhausted.getMessage()  # no session ids in the log


class Frozen(MemorySessionManager):
    """Memory, with a switch that makes reads hang as a frozen server would."""

    frozen = False

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        if self.frozen:
            await asyncio.sleep(30)  # the call's deadline (0.2 s) ends it long before
        return await super()._load(session_id, last_events, now)


async def test_a_call_that_runs_out_of_time_is_an_outage_until_one_succeeds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="agentsessions")
    manager = Frozen("memory://", ManagerOptions(timeout=0.2))
    async with manager:
        await manager.create("s")
        manager.frozen = True
        for _ in range(2):
            with pytest.raises(BackendTimeoutError):
                await asyncio.wait_for(manager.get("s"), 10)
        manager.frozen = False
        assert await manager.get("s") is not None
    (lost,) = _events(caplog, "connection_lost")
    assert "BackendTimeoutError" in lost.getMessage()
    (recovered,) = _events(caplog, "connection_recovered")
    assert recovered.failures == 2  # type: ignore[attr-defined]
