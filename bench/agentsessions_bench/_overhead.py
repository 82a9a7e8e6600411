"""What instrumentation costs: the same agent turn with it off and on, in one run.

Three managers of ours on the engine, one per arm: no plugin, a plugin that does nothing
(the hook machinery alone), and the OpenTelemetry plugin on an SDK set up as in
production (a batch span processor, here exporting nowhere, and a meter provider
aggregating every measurement). Their turns rotate turn by turn, so drift on a shared
machine falls on all of them alike. Each
turn is timed twice: wall clock (what the agent waits) and this process's CPU time, all
threads (what instrumentation really spends, and what other processes on a busy machine
do not disturb: their load inflates wall-clock times, not our CPU time).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from agentsessions.instrumentation import hookimpl

from ._ours import OurStore
from ._runner import Config, Log, _no_gc, _quiet_gc
from ._store import StoreUnavailable, new_session_id

__all__ = ["measure_instrumentation", "render_instrumentation"]

#: Sessions per arm: the histories grow by two events per turn, spread over these.
_SESSIONS = 10


def _instrumented_plugin() -> tuple[Any, Any, Any]:
    try:
        from agentsessions.otel import OpenTelemetry
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            BatchSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError as exc:
        raise StoreUnavailable(f"needs opentelemetry-sdk ({exc})") from exc

    class Discard(SpanExporter):  # type: ignore[misc,unused-ignore]
        def export(self, spans: Sequence[Any]) -> Any:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(Discard()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    plugin = OpenTelemetry(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return plugin, tracer_provider, meter_provider


class _NoOp:
    """A plugin that does nothing: what the hook machinery itself costs."""

    @hookimpl
    def agentsessions_operation_started(self, operation: Any) -> None:
        pass

    @hookimpl
    def agentsessions_operation_finished(self, operation: Any) -> None:
        pass


#: The arms of the case: instrumentation off, a no-op plugin, the OpenTelemetry plugin.
ARMS = ("disabled", "hooks", "enabled")


async def _one_round(url: str, config: Config, round_no: int) -> dict[str, dict[str, float]]:
    plugin, tracer_provider, meter_provider = _instrumented_plugin()
    plugins: dict[str, object | None] = {"disabled": None, "hooks": _NoOp(), "enabled": plugin}

    def arm_url(name: str) -> str:
        # A file each: two managers on one SQLite file flush each other's page caches.
        return url.removesuffix(".db") + f"-{name}.db" if url.startswith("sqlite") else url

    # A manager per arm, made in an order rotated each round: managers of one process are
    # not all equally fast (the first SQLite manager made is slower, instrumented or not),
    # and switching one manager's plugins between turns leaves its caches cold.
    shift = round_no % len(ARMS)
    made = ARMS[shift:] + ARMS[:shift]
    arms = {name: OurStore(arm_url(name), instrument=plugins[name]) for name in made}
    wall: dict[str, list[float]] = {name: [] for name in ARMS}
    cpu: dict[str, list[float]] = {name: [] for name in ARMS}
    try:
        sessions: dict[str, list[str]] = {}
        for name, store in arms.items():
            await store.open()
            sessions[name] = [new_session_id(f"ovh-{name}") for _ in range(_SESSIONS)]
            for session_id in sessions[name]:
                await store.create(session_id, config.overhead_history)
                await store.turn(session_id, None)  # warm-up, untimed
        _quiet_gc()
        for turn in range(config.overhead_turns):
            # Rotated turn by turn, so each arm takes each position equally often.
            step = turn % len(ARMS)
            for name in ARMS[step:] + ARMS[:step]:
                store = arms[name]
                session_id = sessions[name][turn % _SESSIONS]
                store.forget(session_id)
                with _no_gc():
                    started, cpu_started = time.perf_counter(), time.process_time()
                    await store.turn(session_id, None)
                    wall[name].append(time.perf_counter() - started)
                    cpu[name].append(time.process_time() - cpu_started)
    finally:
        for store in arms.values():
            await store.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return {
        name: {"wall": statistics.median(wall[name]), "cpu": statistics.median(cpu[name])}
        for name in ARMS
    }


async def measure_instrumentation(
    urls: dict[str, str], config: Config, log: Log | None = None
) -> list[dict[str, Any]]:
    """Per engine and arm: the median turn, wall clock (ms) and CPU (µs), over rounds."""
    found: list[dict[str, Any]] = []
    for engine, url in urls.items():
        rounds = [await _one_round(url, config, n) for n in range(config.overhead_rounds)]
        row: dict[str, Any] = {
            "engine": engine,
            "history": config.overhead_history,
            "turns": config.overhead_turns,
            "rounds": config.overhead_rounds,
        }
        for arm in ARMS:
            row[f"{arm}_ms"] = statistics.median(r[arm]["wall"] for r in rounds) * 1e3
            row[f"{arm}_cpu_us"] = statistics.median(r[arm]["cpu"] for r in rounds) * 1e6
        row["ratio"] = row["enabled_ms"] / row["disabled_ms"]
        row["cpu_ratio"] = row["enabled_cpu_us"] / row["disabled_cpu_us"]
        row["added_cpu_us"] = row["enabled_cpu_us"] - row["disabled_cpu_us"]
        row["hooks_added_cpu_us"] = row["hooks_cpu_us"] - row["disabled_cpu_us"]
        if log:
            log(
                f"  instrumentation on {engine}: {row['disabled_ms']:.3f} -> "
                f"{row['enabled_ms']:.3f} ms per turn ({row['ratio']:.2f}x), CPU "
                f"{row['disabled_cpu_us']:.0f} -> {row['enabled_cpu_us']:.0f} µs"
            )
        found.append(row)
    return found


def render_instrumentation(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The overhead table, as Markdown lines."""
    if not rows:
        return []
    first = rows[0]
    lines = [
        "### Instrumentation overhead",
        "",
        f"One agent turn (full read of a {first['history']}-event session, two events "
        f"appended, saved), {first['turns']} turns per arm per round, arms alternating, "
        f"{first['rounds']} round(s). Off: no plugin. Hooks: a plugin that does nothing "
        "(the cost of our hook machinery). On: the OpenTelemetry plugin on the SDK (a batch "
        "span processor, a meter provider; two spans per turn). Medians per turn; CPU is "
        "this process's, all threads.",
        "",
        "| engine | wall off, ms | wall on, ms | on / off | CPU off, µs | CPU hooks, µs "
        "| CPU on, µs | on / off | CPU added by hooks | CPU added on |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['engine']} | {row['disabled_ms']:.3f} | {row['enabled_ms']:.3f} | "
            f"{row['ratio']:.2f}x | {row['disabled_cpu_us']:.0f} | {row['hooks_cpu_us']:.0f} "
            f"| {row['enabled_cpu_us']:.0f} | {row['cpu_ratio']:.2f}x "
            f"| {row['hooks_added_cpu_us']:.0f} µs | {row['added_cpu_us']:.0f} µs |"
        )
    return lines
