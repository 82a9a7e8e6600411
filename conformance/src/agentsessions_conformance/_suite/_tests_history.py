"""A concurrent list-append history, checked whole afterwards (in the style of Jepsen's Elle).

Clients (tasks, each with a manager of its own when the backend is `shared`) append to one
session's event list through ``update()`` and ``save()``, with replies lost on the way
(`lost_replies`), and read full and tail histories. Seeded and bounded. Afterwards: every
acknowledged append is present exactly once, nothing unknown is, every read is a prefix
(a full read) or a slice ending a prefix (a tail read) of the one final order, and no
client sees versions go backwards. A failure names the smallest anomaly found.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from dataclasses import dataclass, field

import pytest
from agentsessions import (
    BackendUnavailableError,
    Session,
    SessionConflictError,
    SessionManager,
)

from .._faults import lost_replies
from ._base import SuiteBase

#: Clients, operations each, and the seed: the same history shape every run.
CLIENTS = 4
OPERATIONS = 10
SEED = 31
_TAIL = 3


@dataclass
class _History:
    acked: dict[str, str] = field(default_factory=dict)  # value -> operation
    ambiguous: set[str] = field(default_factory=set)
    reads: list[tuple[str, list[str], bool]] = field(default_factory=list)  # op, seen, full
    versions: dict[int, list[tuple[str, int]]] = field(default_factory=dict)


def _anomaly(history: _History, final: list[str]) -> str | None:
    """The smallest anomaly of *history* against *final*, or None."""
    counts: dict[str, int] = {}
    for value in final:
        counts[value] = counts.get(value, 0) + 1
    for value, op in sorted(history.acked.items()):
        if counts.get(value, 0) != 1:
            return f"acknowledged append {value!r} ({op}) is stored {counts.get(value, 0)} times"
    for value in sorted(history.ambiguous):
        if counts.get(value, 0) > 1:
            return f"ambiguous append {value!r} is stored {counts[value]} times"
    for value in final:
        if value not in history.acked and value not in history.ambiguous:
            return f"{value!r} is stored, though no client appended it"
    for op, seen, full in history.reads:
        if full and final[: len(seen)] != seen:
            return f"{op} read {seen}, not a prefix of the final order {final}"
        if not full and not any(
            final[end - len(seen) : end] == seen for end in range(len(seen), len(final) + 1)
        ):
            return f"{op} tail read {seen}, not the end of any prefix of {final}"
    for client, steps in sorted(history.versions.items()):
        for (op_a, a), (op_b, b) in itertools.pairwise(steps):
            if b < a:
                return f"client {client} saw version {a} ({op_a}) and then {b} ({op_b})"
    return None


class HistoryTests(SuiteBase):
    async def test_list_append_history_has_no_anomaly(self, manager: SessionManager) -> None:
        """Concurrent appends (update() and save(), replies lost on the way) and full and tail
        reads: every acknowledged append stored exactly once, every read a prefix (or the end
        of a prefix) of one final order, versions never backwards per client."""
        session_id = self.new_id()
        await manager.create(session_id)
        shared = manager.capabilities.shared
        clients = [await self.variant(manager) if shared else manager for _ in range(CLIENTS)]
        history = _History()

        async def client(number: int, racer: SessionManager) -> None:
            rng = random.Random(SEED * 100 + number)
            steps = history.versions.setdefault(number, [])
            for step in range(OPERATIONS):
                value = f"c{number}-{step}"
                op = f"client {number} op {step}"
                choice = rng.random()
                # Faults only on a manager of the client's own: the wrapper is per object.
                lose = shared and (step == 0 or rng.random() < 0.2)
                if choice < 0.45:

                    def append(current: Session, value: str = value) -> None:
                        current.add_event("user", value)

                    try:
                        if lose:
                            with lost_replies(racer, "_save"):
                                done = await racer.update(session_id, append, group=False)
                        else:
                            done = await racer.update(session_id, append, group=False)
                    except BackendUnavailableError:
                        history.ambiguous.add(value)
                        continue
                    history.acked[value] = f"{op} update"
                    steps.append((f"{op} update", done.version))
                elif choice < 0.7:
                    loaded = await racer.get(session_id)
                    assert loaded is not None, (
                        f"{op}: get({session_id!r}) returned None while clients appended: the "
                        "session must stay visible throughout"
                    )
                    steps.append((f"{op} get", loaded.version))
                    loaded.add_event("user", value)
                    try:
                        if lose:
                            with (
                                lost_replies(racer, "_save"),
                                pytest.raises(BackendUnavailableError),
                            ):
                                await racer.save(loaded)
                        await racer.save(loaded)
                    except SessionConflictError:
                        if lose:
                            history.ambiguous.add(value)  # its first send may have landed
                        continue
                    history.acked[value] = f"{op} save"
                    steps.append((f"{op} save", loaded.version))
                else:
                    full = choice < 0.85
                    read = await racer.get(session_id, last_events=None if full else _TAIL)
                    assert read is not None, (
                        f"{op}: get({session_id!r}, last_events={None if full else _TAIL}) "
                        "returned None while clients appended: the session must stay visible "
                        "throughout"
                    )
                    seen = [str(event.content) for event in read.events]
                    history.reads.append((f"{op} {'full' if full else 'tail'}", seen, full))
                    steps.append((f"{op} read", read.version))
                await asyncio.sleep(0)

        await asyncio.gather(*(client(n, racer) for n, racer in enumerate(clients)))
        stored = await self.readback(manager, session_id)
        assert stored is not None, (
            f"get({session_id!r}) (read-back) returned None after the clients' appends: the "
            "session must still be stored"
        )
        final = [str(event.content) for event in stored.events]
        anomaly = _anomaly(history, final)
        assert anomaly is None, f"list-append history anomaly: {anomaly}"
        await self.check_positions(manager, session_id, len(final))
