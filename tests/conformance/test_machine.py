"""The kit's state machine itself: sequences it once got wrong, replayed step by step."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from agentsessions import connect
from agentsessions_conformance import FrozenClock
from agentsessions_conformance._machine import MachineConfig, _machine


async def test_a_partial_copy_of_an_earlier_life_may_be_refused_as_partial() -> None:
    """A copy loaded with last_events, its id deleted and created again, then edited in a
    way a partial copy cannot save: the manager refuses the edit (PartialSessionError)
    before the backend is asked, and the machine must accept that instead of insisting
    on a conflict. Hypothesis found this sequence; the machine failed it."""
    async with connect("memory://") as subject:
        clock = FrozenClock()
        subject.clock = clock
        config = MachineConfig(
            asyncio.get_running_loop(), [subject], clock, ttl=False, stop=threading.Event()
        )

        def replay() -> None:
            state: Any = _machine(config)()  # its rules are made by decorators
            try:
                state.seed(seeds=[("A", None, 1)])
                state.everything_agrees()
                state.get(last_events=1, session_id="A", user=None, via=0)
                state.everything_agrees()
                state.recreate(pick=0, via=0)
                state.everything_agrees()
                state.save(edit="rewrite", pick=1, via=0)
                state.everything_agrees()
            finally:
                state.teardown()

        await asyncio.wait_for(asyncio.to_thread(replay), 60)
