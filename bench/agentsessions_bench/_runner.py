"""Running the workload: rounds with a rotated store order, medians over rounds.

Every store runs the same phases in a round: turn latency and append cost at each
history size, then throughput (many sessions, concurrent turns), then contention (many
writers, one session). Stores take turns within a round in an order rotated by one
each round, so drift on a shared machine (a noisy neighbour, a server checkpoint)
falls on every store alike instead of on whichever ran last.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import statistics
import sys
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._store import (
    BULK_BATCH,
    LAST_EVENTS,
    TURN_BATCH,
    Store,
    StoreUnavailable,
    new_session_id,
)

__all__ = ["BY_TURN", "Config", "StoreResult", "run_suite"]

#: Appended to a latency metric's name when its histories were built turn by turn.
BY_TURN = "/by_turn"

Log = Callable[[str], None]
#: Brings an engine's server to its steady state after a phase has written what it
#: will time (PostgreSQL: ANALYZE; see `_suite.analyze_postgres`).
Settle = Callable[[], Awaitable[None]]


async def _settled() -> None:
    """Engines with nothing to settle."""


@dataclass(frozen=True)
class Config:
    sizes: tuple[int, ...] = (0, 100, 1_000, 5_000)
    #: History sizes also built turn by turn (two events per write, as an agent writes
    #: them), measured like the others under the metric names with `BY_TURN` appended.
    by_turn_sizes: tuple[int, ...] = (1_000,)
    rounds: int = 3
    #: Timed turns (each: full-read turn, append, last-20 turn) per size per round.
    ops: int = 10
    throughput_sessions: int = 50
    throughput_turns: int = 20
    #: Bursts of ``throughput_sessions x throughput_turns`` per round, each on fresh
    #: sessions; the round's figures are their median (turns/s) and the percentiles of
    #: all their turns. One burst is a short sample on cores the servers share, too
    #: noisy alone to tell a store from its floor by a tenth.
    throughput_bursts: int = 3
    writers: int = 20
    updates_per_writer: int = 5
    #: A phase that takes longer than this is abandoned and the store reported failed.
    phase_timeout: float = 600.0
    #: The instrumentation case: turns per arm per round (0 skips it), its rounds (not
    #: fewer with --quick: they rotate which arm's manager is made first), the history.
    overhead_turns: int = 300
    overhead_rounds: int = 3
    overhead_history: int = 100

    @classmethod
    def quick(cls) -> Config:
        return cls(
            sizes=(0, 100, 1_000, 5_000),
            rounds=1,
            ops=4,
            throughput_sessions=10,
            throughput_turns=5,
            throughput_bursts=1,
            writers=5,
            updates_per_writer=3,
            overhead_turns=100,
        )


@dataclass
class StoreResult:
    label: str
    name: str
    engine: str
    kind: str
    family: str | None = None
    #: metric -> size -> per-round medians (seconds)
    latency: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    #: per-round values
    throughput: dict[str, list[float]] = field(default_factory=dict)
    contention: dict[str, list[float]] = field(default_factory=dict)
    contention_ok: bool = True
    stale_write: str | None = None
    error: str | None = None
    #: phase -> why it failed (it is not run again in later rounds)
    phase_errors: dict[str, str] = field(default_factory=dict)

    def add_latency(self, metric: str, size: int, samples: Sequence[float]) -> None:
        self.latency.setdefault(metric, {}).setdefault(size, []).append(statistics.median(samples))

    def summary(self) -> dict[str, Any]:
        """Medians over rounds, in milliseconds and operations per second."""
        latency = {
            metric: {str(size): statistics.median(values) * 1e3 for size, values in by.items()}
            for metric, by in self.latency.items()
        }
        return {
            "label": self.label,
            "name": self.name,
            "engine": self.engine,
            "kind": self.kind,
            "family": self.family,
            "latency_ms": latency,
            "throughput": {k: statistics.median(v) for k, v in self.throughput.items()},
            "contention": {k: statistics.median(v) for k, v in self.contention.items()},
            "contention_all_landed": self.contention_ok if self.contention else None,
            "stale_write": self.stale_write,
            "rounds": len(next(iter(self.throughput.values()), [])),
            "error": self.error,
            "phase_errors": dict(self.phase_errors),
        }


def _percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def _sessions_per_size(size: int, ops: int) -> int:
    # Each timed triple adds 6 events; spread the triples over enough sessions that
    # a history grows by at most ~3% while it is measured (size 0 and 100: a fresh
    # session per triple).
    per_session = max(1, size // 200)
    return max(1, -(-ops // per_session))


def _quiet_gc() -> None:
    """Collect now, then freeze what survives (the peers' imported modules above all).

    A full collection walks every live object, and this process holds google-adk,
    openai-agents and SQLAlchemy: one landing inside a timed turn cost milliseconds
    unrelated to the store being measured, and it landed more often on whichever store
    allocated more. Frozen objects are skipped by later collections.
    """
    gc.collect()
    gc.freeze()


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """No collection inside a timed operation (as timeit does); young generations are
    collected right after, untimed, so garbage does not pile up."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect(1)


async def _latency(store: Store, config: Config, result: StoreResult, settle: Settle) -> None:
    # Warm-up: connections, prepared statements and caches, untimed.
    warm = new_session_id("warm")
    await store.create(warm, 10)
    await store.turn(warm, None)
    await store.append(warm)
    await store.turn(warm, LAST_EVENTS)
    for size in config.sizes:
        await _latency_at(store, config, result, settle, size, BULK_BATCH, "")
    for size in config.by_turn_sizes:
        await _latency_at(store, config, result, settle, size, TURN_BATCH, BY_TURN)


async def _latency_at(
    store: Store,
    config: Config,
    result: StoreResult,
    settle: Settle,
    size: int,
    batch: int,
    suffix: str,
) -> None:
    """The timed turns on histories of *size* events written *batch* per write."""
    sessions = [new_session_id(f"h{size}") for _ in range(_sessions_per_size(size, config.ops))]
    for session_id in sessions:
        await store.create(session_id, size, batch)
    await settle()
    samples: dict[str, list[float]] = {
        name: [] for name in ("turn_full", "read_full", "append", "turn_last", "read_last")
    }
    _quiet_gc()
    for op in range(config.ops):
        session_id = sessions[op % len(sessions)]
        store.forget(session_id)
        with _no_gc():
            started = time.perf_counter()
            read = await store.turn(session_id, None)
            samples["turn_full"].append(time.perf_counter() - started)
            samples["read_full"].append(read)
        with _no_gc():
            started = time.perf_counter()
            await store.append(session_id)
            samples["append"].append(time.perf_counter() - started)
        store.forget(session_id)
        with _no_gc():
            started = time.perf_counter()
            read = await store.turn(session_id, LAST_EVENTS)
            samples["turn_last"].append(time.perf_counter() - started)
            samples["read_last"].append(read)
    for name, values in samples.items():
        result.add_latency(name + suffix, size, values)


async def _throughput(store: Store, config: Config, result: StoreResult, settle: Settle) -> None:
    latencies: list[float] = []
    bursts = range(config.throughput_bursts)
    rates = [await _burst(store, config, settle, latencies) for _ in bursts]
    result.throughput.setdefault("turns_per_s", []).append(statistics.median(rates))
    result.throughput.setdefault("p50_ms", []).append(statistics.median(latencies) * 1e3)
    result.throughput.setdefault("p95_ms", []).append(_percentile(latencies, 0.95) * 1e3)


async def _burst(store: Store, config: Config, settle: Settle, latencies: list[float]) -> float:
    """Turns per second of one burst on fresh sessions; each turn's latency is appended."""
    sessions = [new_session_id("tp") for _ in range(config.throughput_sessions)]
    for session_id in sessions:
        await store.create(session_id, 0)
    await settle()
    turns = len(latencies)

    async def agent(session_id: str) -> None:
        for _ in range(config.throughput_turns):
            store.forget(session_id)
            started = time.perf_counter()
            await store.turn(session_id, None)
            latencies.append(time.perf_counter() - started)

    _quiet_gc()
    with _no_gc():
        started = time.perf_counter()
        await asyncio.gather(*(agent(session_id) for session_id in sessions))
        elapsed = time.perf_counter() - started
    return (len(latencies) - turns) / elapsed


async def _contention(store: Store, config: Config, result: StoreResult, settle: Settle) -> None:
    session_id = new_session_id("rmw")
    await store.create(session_id, 0)
    await settle()
    retries: list[int] = []

    async def writer() -> None:
        for _ in range(config.updates_per_writer):
            retries.append(await store.contended_update(session_id))

    _quiet_gc()
    with _no_gc():
        started = time.perf_counter()
        await asyncio.gather(*(writer() for _ in range(config.writers)))
        elapsed = time.perf_counter() - started
    expected = 2 * config.writers * config.updates_per_writer
    landed = await store.count(session_id)
    result.contention_ok = result.contention_ok and landed == expected
    result.contention.setdefault("updates_per_s", []).append(len(retries) / elapsed)
    result.contention.setdefault("retries", []).append(float(sum(retries)))
    result.contention.setdefault("events_expected", []).append(float(expected))
    result.contention.setdefault("events_landed", []).append(float(landed))


_PHASES = {"latency": _latency, "throughput": _throughput, "contention": _contention}


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return text if len(text) <= 200 else text[:197] + "..."


async def _one_round(
    store: Store, config: Config, result: StoreResult, first: bool, settle: Settle
) -> None:
    """One round of one store. A phase that fails is recorded and not run again; the
    other phases still are (a peer that breaks under concurrency still has latencies)."""
    await store.open()
    try:
        if first:
            result.stale_write = await store.stale_write()
        for name, phase in _PHASES.items():
            if name in result.phase_errors:
                continue
            try:
                await asyncio.wait_for(phase(store, config, result, settle), config.phase_timeout)
            except StoreUnavailable:
                raise
            except Exception as exc:
                result.phase_errors[name] = _short(exc)
                traceback.print_exc(file=sys.stderr)
    finally:
        await store.close()


async def run_suite(
    factories: Sequence[Callable[[], Store]],
    config: Config,
    log: Log | None = None,
    settle: Mapping[str, Settle] | None = None,
) -> list[StoreResult]:
    """Run every store for ``config.rounds`` rounds; a store that fails is dropped.

    A factory builds a fresh store each round (a new schema / prefix / file), so no
    round reads what an earlier one left behind. *settle* maps an engine to what every
    store on it runs, untimed, between writing a phase's sessions and timing them.
    """
    say = log or (lambda line: print(line, file=sys.stderr, flush=True))
    probes = [factory() for factory in factories]
    results = [StoreResult(p.label, p.name, p.engine, p.kind, p.family) for p in probes]
    alive = list(range(len(factories)))
    for round_no in range(config.rounds):
        shift = round_no % max(1, len(alive))
        order = alive[shift:] + alive[:shift]
        say(f"round {round_no + 1}/{config.rounds}: {len(order)} stores")
        for index in order:
            result = results[index]
            store = factories[index]()
            started = time.perf_counter()
            try:
                await _one_round(
                    store,
                    config,
                    result,
                    first=round_no == 0,
                    settle=(settle or {}).get(store.engine, _settled),
                )
            except StoreUnavailable as exc:
                result.error = f"unavailable: {exc}"
            except Exception as exc:  # a broken store must not stop the others
                result.error = _short(exc)
                traceback.print_exc(file=sys.stderr)
            if result.error:
                alive.remove(index)
                say(f"  {result.label}: FAILED ({result.error})")
            else:
                failed = "".join(f"; {k} FAILED: {v}" for k, v in result.phase_errors.items())
                say(f"  {result.label}: {time.perf_counter() - started:.1f}s{failed}")
    return results
