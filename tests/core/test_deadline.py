"""The deadline every call runs under, and the translation of declared driver errors."""

from __future__ import annotations

import asyncio
import time
import types
from datetime import datetime

import pytest
from agentsessions import (
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidInputError,
    InvalidOptionError,
    connect,
)
from agentsessions._memory import MemorySessionManager
from agentsessions.backend import ErrorRule, LoadedSession, SaveRequest


class DriverDown(Exception):
    pass


class DriverRefused(Exception):
    """A driver error that is not about availability (a value the engine refuses)."""


def _refused(manager: Slow, exc: DriverRefused) -> InvalidInputError:
    return InvalidInputError(f"{manager.options.namespace or 'default'} refused: {exc}")


class Slow(MemorySessionManager):
    """Memory, with hooks that hang (a silent server) or fail like a driver."""

    driver_errors = (
        ErrorRule((TimeoutError,), BackendTimeoutError),
        ErrorRule((DriverRefused,), build=_refused),
        ErrorRule((DriverDown,)),
        ErrorRule((AttributeError,), raised_in="fakedriver."),
    )
    hang = False
    fail: BaseException | None = None

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        if self.fail is not None:
            raise self.fail
        if self.hang:
            await asyncio.sleep(3600)
        return await super()._load(session_id, last_events, now)

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        if self.hang:
            await asyncio.sleep(3600)
        await super()._save(request, now)


def slow(**options: object) -> Slow:
    return Slow.from_url("memory://", **options)


def test_timeout_is_an_option_with_a_default() -> None:
    assert connect("memory://").options.timeout == 10
    assert connect("memory://?timeout=2.5").options.timeout == 2.5
    with pytest.raises(InvalidOptionError, match="timeout"):
        connect("memory://?timeout=0")
    assert issubclass(BackendTimeoutError, BackendUnavailableError)


async def test_a_hanging_call_raises_at_its_deadline_naming_it() -> None:
    manager = slow(timeout=0.2)
    await manager.create("s")
    manager.hang = True
    start = time.monotonic()
    with pytest.raises(BackendTimeoutError) as caught:
        await manager.get("s")
    assert time.monotonic() - start < 2
    assert caught.value.operation == "get" and caught.value.timeout == 0.2
    assert "get() did not finish within its 0.2 s deadline" in str(caught.value)
    manager.hang = False
    assert await manager.get("s") is not None  # the manager is fine afterwards


async def test_update_is_bounded_as_a_whole() -> None:
    manager = slow(timeout=0.3)
    await manager.create("s")
    manager.hang = True
    with pytest.raises(BackendTimeoutError) as caught:
        await manager.update("s", lambda session: None)
    assert caught.value.operation == "update"


async def test_a_cancellation_by_the_caller_stays_a_cancellation() -> None:
    manager = slow(timeout=30)
    await manager.create("s")
    manager.hang = True
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(manager.get("s"), 0.1)
    task = asyncio.create_task(manager.get("s"))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_declared_driver_errors_are_translated_and_others_are_not() -> None:
    manager = slow()
    await manager.create("s")
    manager.fail = DriverDown("connection reset")
    with pytest.raises(BackendUnavailableError, match="DriverDown: connection reset"):
        await manager.get("s")
    manager.fail = TimeoutError("socket timeout")
    with pytest.raises(BackendTimeoutError, match="the driver gave up first"):
        await manager.get("s")
    manager.fail = KeyError("a bug")
    with pytest.raises(KeyError):
        await manager.get("s")


async def test_a_rule_may_build_its_own_error() -> None:
    manager = slow(namespace="app")
    await manager.create("s")
    manager.fail = DriverRefused("value too deep")
    with pytest.raises(InvalidInputError, match=r"^app refused: value too deep$"):
        await manager.get("s")


async def test_cleanup_swallows_declared_driver_errors_only() -> None:
    manager = slow()
    ran: list[str] = []

    async def cleanup(exc: BaseException) -> None:
        ran.append(type(exc).__name__)
        raise exc

    # Declared, whatever the rule's conditions: a cleanup that lost its connection.
    await manager._quietly(cleanup(DriverDown("connection reset")))
    await manager._quietly(cleanup(DriverRefused("no")))
    with pytest.raises(KeyError):
        await manager._quietly(cleanup(KeyError("a bug")))
    with pytest.raises(AttributeError):  # a raised_in rule: not the driver's
        await manager._quietly(cleanup(AttributeError("ours")))
    with pytest.raises(asyncio.CancelledError):
        await manager._quietly(cleanup(asyncio.CancelledError()))
    assert ran == ["DriverDown", "DriverRefused", "KeyError", "AttributeError", "CancelledError"]


async def test_a_broad_exception_type_is_matched_only_where_the_driver_raised_it() -> None:
    driver = types.ModuleType("fakedriver.connection")
    exec("def reconnect(conn):\n    return conn.writelines", driver.__dict__)
    manager = slow()
    await manager.create("s")
    try:
        driver.reconnect(None)
    except AttributeError as exc:
        manager.fail = exc
    with pytest.raises(BackendUnavailableError, match="writelines"):
        await manager.get("s")
    manager.fail = AttributeError("our own bug")  # raised here, not in the driver
    with pytest.raises(AttributeError):
        await manager.get("s")


async def test_calls_on_one_loop_share_a_timer_and_each_keeps_its_own_deadline() -> None:
    # One loop timer serves every call of the loop: a long call armed first must not
    # delay a shorter one started after it, and calls that finish must not fire.
    patient, hasty = slow(timeout=30), slow(timeout=0.2)
    for manager in (patient, hasty):
        await manager.create("s")
        manager.hang = True
    long_call = asyncio.create_task(patient.get("s"))
    await asyncio.sleep(0.01)
    start = time.monotonic()
    with pytest.raises(BackendTimeoutError):
        await hasty.get("s")
    assert time.monotonic() - start < 2
    assert not long_call.done()  # the shorter deadline expired only its own call
    long_call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await long_call
    hasty.hang = False
    for _ in range(50):  # finished calls leave nothing behind to expire later
        assert await hasty.get("s") is not None
    await asyncio.sleep(0.3)
    assert await hasty.get("s") is not None


async def test_deadlines_hold_on_several_loops_at_once() -> None:
    def run_one() -> str:
        async def hanging() -> str:
            manager = slow(timeout=0.2)
            await manager.create("s")
            manager.hang = True
            try:
                await manager.get("s")
            except BackendTimeoutError as exc:
                return exc.operation
            return "no timeout"

        return asyncio.run(hanging())

    results = await asyncio.gather(*(asyncio.to_thread(run_one) for _ in range(3)))
    assert results == ["get", "get", "get"]
