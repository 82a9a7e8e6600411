"""What instrumentation costs: the same agent turn with it off and on, in one run.

Two stores of ours on one engine, one connected plainly and one with the OpenTelemetry
plugin on an SDK set up as in production (a batch span processor, here exporting
nowhere, and a meter provider aggregating every measurement). Their turns alternate,
the order swapped every turn, so drift on a shared machine falls on both alike; the
figure is the ratio of the median turns and the time added per turn.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

from ._ours import OurStore
from ._runner import Config, Log, _no_gc, _quiet_gc
from ._store import StoreUnavailable, new_session_id

__all__ = ["measure_instrumentation", "render_instrumentation"]

#: Sessions per arm: each grows by two events per turn, spread over this many.
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


async def _one_round(url: str, config: Config) -> dict[str, float]:
    plugin, tracer_provider, meter_provider = _instrumented_plugin()
    arms = {"disabled": OurStore(url), "enabled": OurStore(url, instrument=plugin)}
    samples: dict[str, list[float]] = {name: [] for name in arms}
    try:
        sessions: dict[str, list[str]] = {}
        for name, store in arms.items():
            await store.open()
            sessions[name] = [new_session_id(f"ovh-{name}") for _ in range(_SESSIONS)]
            for session_id in sessions[name]:
                await store.create(session_id, config.overhead_history)
                await store.turn(session_id, None)  # warm-up, untimed
        _quiet_gc()
        order = list(arms)
        for turn in range(config.overhead_turns):
            for name in order if turn % 2 == 0 else order[::-1]:
                store = arms[name]
                session_id = sessions[name][turn % _SESSIONS]
                store.forget(session_id)
                with _no_gc():
                    started = time.perf_counter()
                    await store.turn(session_id, None)
                    samples[name].append(time.perf_counter() - started)
    finally:
        for store in arms.values():
            await store.close()
        tracer_provider.shutdown()
        meter_provider.shutdown()
    return {name: statistics.median(values) for name, values in samples.items()}


async def measure_instrumentation(
    urls: dict[str, str], config: Config, log: Log | None = None
) -> list[dict[str, Any]]:
    """Per engine: median turn disabled and enabled (ms), their ratio, µs added per turn."""
    found: list[dict[str, Any]] = []
    for engine, url in urls.items():
        rounds = [await _one_round(url, config) for _ in range(config.rounds)]
        disabled = statistics.median(r["disabled"] for r in rounds)
        enabled = statistics.median(r["enabled"] for r in rounds)
        row = {
            "engine": engine,
            "history": config.overhead_history,
            "turns": config.overhead_turns,
            "rounds": config.rounds,
            "disabled_ms": disabled * 1e3,
            "enabled_ms": enabled * 1e3,
            "ratio": enabled / disabled,
            "added_us": (enabled - disabled) * 1e6,
        }
        if log:
            log(
                f"  instrumentation on {engine}: {row['disabled_ms']:.3f} -> "
                f"{row['enabled_ms']:.3f} ms per turn ({row['ratio']:.2f}x)"
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
        f"appended, saved), {first['turns']} turns per arm per round alternating, "
        f"{first['rounds']} round(s): instrumentation off against the OpenTelemetry plugin "
        "on (SDK with a batch span processor and a meter provider; two spans per turn).",
        "",
        "| engine | off, ms | on, ms | on / off | added per turn |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['engine']} | {row['disabled_ms']:.3f} | {row['enabled_ms']:.3f} | "
            f"{row['ratio']:.2f}x | {row['added_us']:.0f} µs |"
        )
    return lines
