"""The kit's state machine itself: sequences it once got wrong, replayed step by step."""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest
from agentsessions import MemorySessionManager, SessionManager, connect
from agentsessions_conformance import FrozenClock
from agentsessions_conformance._machine import MachineConfig, _machine

from conformance.broken import TokenIgnoringSaveManager


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


def _replay_lost_replies(subject: SessionManager) -> None:
    """Every lost-reply rule once, landed and not, then the invariant after each step."""

    async def run() -> None:
        clock = FrozenClock()
        subject.clock = clock
        config = MachineConfig(
            asyncio.get_running_loop(), [subject], clock, ttl=True, stop=threading.Event()
        )

        def replay() -> None:
            state: Any = _machine(config)()
            try:
                state.seed(seeds=[("a", "u1", 3), ("b*", None, 2)])
                state.everything_agrees()
                for landed in (True, False):
                    state.save_reply_lost(pick=0, edit="append", landed=landed, via=0)
                    state.everything_agrees()
                    for op in ("compact", "create", "restore", "delete"):
                        state.write_reply_lost(
                            op=op, session_id="{c}", user="u2", pick=1, landed=landed, via=0
                        )
                        state.everything_agrees()
                state.restore(session_id="A", user=None, count=2, version=7, via=0)
                state.everything_agrees()
                state.save(pick=0, edit="append", via=0)
                state.everything_agrees()
            finally:
                state.teardown()

        await asyncio.wait_for(asyncio.to_thread(replay), 60)

    asyncio.run(run())


def test_lost_reply_rules_agree_on_the_reference() -> None:
    """The machine's lost-reply and restore rules hold on the reference backend itself."""
    _replay_lost_replies(MemorySessionManager(f"memory://machine-{uuid.uuid4().hex}"))


def test_lost_reply_rule_catches_a_backend_that_ignores_its_tokens() -> None:
    """A save whose reply was lost and that is saved again lands twice on a backend that
    does not recognise its own token: the machine's rule fails on it."""
    subject = TokenIgnoringSaveManager(f"memory://machine-{uuid.uuid4().hex}")
    with pytest.raises(AssertionError, match="reply lost=True"):
        _replay_lost_replies(subject)
