"""The model-based clause: random operation sequences agree with the reference backend."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, ClassVar

from agentsessions import SessionManager

from .._machine import MachineConfig, run_machine
from ._base import SuiteBase

#: Runs per Hypothesis call; the time budget is checked between calls.
MACHINE_BATCH = 5


class ModelTests(SuiteBase):
    #: Most Hypothesis runs (examples) of the state machine, and operations per run.
    #: Raise them (or pass ``--conformance-machine-examples``) for a deeper search.
    machine_examples: ClassVar[int] = 25
    machine_steps: ClassVar[int] = 20
    #: Seconds of searching after which no new batch of runs starts (at least one batch
    #: of `MACHINE_BATCH` runs always does), so a slow backend's clause stays bounded.
    machine_seconds: ClassVar[float] = 20.0
    #: Seconds Hypothesis may spend shrinking a failure to a short sequence.
    machine_shrink_seconds: ClassVar[float] = 20.0
    #: Explore the same sequences on every run (reproducible, but never new ones).
    machine_derandomize: ClassVar[bool] = False

    async def test_state_machine_agrees_with_the_reference(self, manager: SessionManager) -> None:
        """Random sequences of every operation (create, get and tail reads, get_or_create,
        saves of fresh and stale copies, update, delete, delete_user, paged listing,
        purge_expired, compact, fork, rewind, restore, writes whose replies or requests
        are lost and then retried or re-read, the clock passing the ttl), through two
        managers when shared, give the results, errors, sessions, archives and listings
        of the reference memory backend; and after every step raw storage (the storage
        hook, `raw_inventory`) holds nothing of an id the model holds nothing of, and
        exactly the model's record, event positions and archive of a live session."""
        self.require(manager, "namespaces")  # a store of its own: the id pool is fixed
        ttl: dict[str, Any] = {"ttl": 100.0} if manager.capabilities.ttl else {}

        first = await self.variant(manager, namespace=self.new_namespace(), **ttl)
        first.clock = self.clock
        subjects = [first]
        if manager.capabilities.shared:
            subjects.append(await self.variant(first))

        stop = threading.Event()
        config = MachineConfig(
            asyncio.get_running_loop(),
            subjects,
            self.clock,
            ttl=bool(ttl),
            stop=stop,
            stored=self.inventory,
        )
        cls = type(self)
        examples = self._machine_examples or cls.machine_examples
        # Derandomized batches would repeat each other: one batch of all examples then.
        batch = examples if cls.machine_derandomize else min(MACHINE_BATCH, examples)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            done = 0
            while done < examples:
                size = min(batch, examples - done)
                await asyncio.to_thread(
                    run_machine,
                    config,
                    size,
                    cls.machine_steps,
                    cls.machine_shrink_seconds,
                    cls.machine_derandomize,
                )
                done += size
                if loop.time() - started > cls.machine_seconds:
                    break
        finally:
            stop.set()  # a run cut short by the time limit stops at its next step
