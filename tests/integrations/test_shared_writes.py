"""`finish_despite_cancellation`, which both adapters' writes go through."""

from __future__ import annotations

import asyncio

import pytest
from agentsessions.integrations._shared import finish_despite_cancellation


async def test_the_outcome_is_the_works() -> None:
    async def work() -> int:
        await asyncio.sleep(0)
        return 7

    assert await finish_despite_cancellation(work()) == 7

    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await finish_despite_cancellation(failing())


@pytest.mark.parametrize("fails", [False, True])
async def test_a_cancelled_caller_waits_for_the_work_then_stops(fails: bool) -> None:
    gate = asyncio.Event()
    started = asyncio.Event()
    finished: list[bool] = []

    async def work() -> None:
        started.set()
        await gate.wait()
        finished.append(True)
        if fails:
            raise ValueError("the work failed")

    caller = asyncio.create_task(finish_despite_cancellation(work()))
    await started.wait()
    caller.cancel()
    await asyncio.sleep(0)
    caller.cancel()  # a second cancellation changes nothing either
    for _ in range(3):
        await asyncio.sleep(0)
    assert not caller.done()
    gate.set()
    with pytest.raises(asyncio.CancelledError) as raised:
        await caller
    assert finished == [True]
    assert isinstance(raised.value.__cause__, ValueError) is fails
