"""Smoke test of the benchmark harness on memory:// with tiny sizes: structure, not speed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import agentsessions_bench as bench
import pytest
from agentsessions_bench import _runner as runner
from agentsessions_bench._floors import MemoryFloor
from agentsessions_bench._ours import OurStore
from agentsessions_bench._report import evaluate_targets, render_markdown
from agentsessions_bench._runner import BY_TURN
from agentsessions_bench._store import BULK_BATCH, TURN_BATCH

TINY = bench.Config(
    sizes=(0, 7, 30),
    by_turn_sizes=(),
    rounds=2,
    ops=2,
    throughput_sessions=3,
    throughput_turns=2,
    writers=4,
    updates_per_writer=3,
)


async def test_run_suite_measures_every_phase_and_all_contended_writes_land() -> None:
    results = await bench.run_suite([lambda: OurStore("memory://"), MemoryFloor], TINY)
    summaries = [result.summary() for result in results]
    assert [s["kind"] for s in summaries] == ["ours", "floor"]
    for summary in summaries:
        assert summary["error"] is None
        assert summary["rounds"] == TINY.rounds
        for metric in ("turn_full", "read_full", "append", "turn_last", "read_last"):
            assert set(summary["latency_ms"][metric]) == {"0", "7", "30"}
            assert all(value > 0 for value in summary["latency_ms"][metric].values())
        assert summary["throughput"]["turns_per_s"] > 0
        assert summary["throughput"]["p95_ms"] >= summary["throughput"]["p50_ms"]
        expected = 2 * TINY.writers * TINY.updates_per_writer
        assert summary["contention"]["events_expected"] == expected
        assert summary["contention"]["events_landed"] == expected
        assert summary["contention_all_landed"] is True
    assert summaries[0]["stale_write"] == "raises"


async def test_turns_write_what_they_claim() -> None:
    store = OurStore("memory://")
    await store.open()
    try:
        await store.create("s", 25)
        assert await store.count("s") == 25
        await store.turn("s", None)
        await store.append("s")
        await store.turn("s", 20)
        assert await store.count("s") == 31
        assert await store.contended_update("s") == 0
        assert await store.count("s") == 33
    finally:
        await store.close()


async def test_settle_runs_for_its_engine_after_each_phase_has_written_before_it_is_timed() -> None:
    events: list[tuple[str, int]] = []

    class Watched(MemoryFloor):
        async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
            await super().create(session_id, history, batch)
            events.append(("create", len(self._events)))

        async def turn(self, session_id: str, last: int | None) -> float:
            events.append(("turn", len(self._events)))
            return await super().turn(session_id, last)

    class Elsewhere(MemoryFloor):
        engine = "sqlite"

    async def settle() -> None:
        events.append(("settle", 0))

    config = dataclasses.replace(TINY, rounds=1)
    await bench.run_suite([Watched, Elsewhere], config, settle={"memory": settle})
    kinds = [kind for kind, _ in events]
    # Once per latency size, per throughput burst and before contention, for the
    # memory store only; each right after that phase's sessions were written and (but
    # for contention, whose turns are not `turn`) right before its first timed turn.
    settles = [index for index, kind in enumerate(kinds) if kind == "settle"]
    assert len(settles) == len(config.sizes) + config.throughput_bursts + 1
    assert all(kinds[index - 1] == "create" for index in settles)
    assert all(kinds[index + 1] == "turn" for index in settles[:-1])


async def test_throughput_runs_its_bursts_on_fresh_sessions_and_keeps_their_median(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    turned: dict[str, int] = {}
    bursts = iter([3.0, 1.0, 2.0])  # seconds each burst appears to take

    class Counted(MemoryFloor):
        async def turn(self, session_id: str, last: int | None) -> float:
            if session_id.startswith("tp-"):
                turned[session_id] = turned.get(session_id, 0) + 1
            return await super().turn(session_id, last)

    clock = {"now": 0.0}
    real_gather = runner.asyncio.gather

    async def timed_gather(*calls: Any) -> list[Any]:
        # The burst's own gather: its elapsed time is the next of `bursts`.
        done: list[Any] = await real_gather(*calls)
        clock["now"] += next(bursts)
        return done

    def fake_counter() -> float:
        return clock["now"]

    config = dataclasses.replace(TINY, rounds=1, throughput_bursts=3)
    store = Counted()
    result = runner.StoreResult("x", "x", "memory", "floor")
    monkeypatch.setattr(runner.asyncio, "gather", timed_gather)
    monkeypatch.setattr(runner.time, "perf_counter", fake_counter)
    await store.open()
    await runner._throughput(store, config, result, runner._settled)
    await store.close()
    sessions = config.throughput_sessions
    assert len(turned) == 3 * sessions  # fresh sessions for every burst
    assert set(turned.values()) == {config.throughput_turns}
    turns = sessions * config.throughput_turns
    # Bursts of 3, 1 and 2 s: the median rate is that of the 2 s burst, one figure a round.
    assert result.throughput["turns_per_s"] == [turns / 2.0]
    assert len(result.throughput["p95_ms"]) == 1


async def test_a_failing_store_is_reported_not_fatal() -> None:
    class Broken(MemoryFloor):
        async def turn(self, session_id: str, last: int | None) -> float:
            raise RuntimeError("boom")

    results = await bench.run_suite([Broken, MemoryFloor], dataclasses.replace(TINY, rounds=2))
    broken, healthy = (result.summary() for result in results)
    assert broken["phase_errors"] == {
        "latency": "RuntimeError: boom",
        "throughput": "RuntimeError: boom",
        "contention": "RuntimeError: boom",
    }
    assert healthy["error"] is None
    assert healthy["phase_errors"] == {}
    assert healthy["rounds"] == 2


async def test_report_marks_targets_and_renders_every_store() -> None:
    results = await bench.run_suite([lambda: OurStore("memory://"), MemoryFloor], TINY)
    stores = [result.summary() for result in results]
    targets = evaluate_targets(stores, TINY.sizes)
    goals = {t.goal for t in targets}
    assert "throughput vs raw floor" in goals
    assert "append at 30 vs at 0" in goals
    assert all(t.met in (True, False) and t.value is not None for t in targets)
    document = {
        "machine": {
            "date": "d",
            "cpu": "c",
            "cores": 2,
            "memory_gib": 1.0,
            "os": "o",
            "python": "p",
            "packages": {},
        },
        "config": dataclasses.asdict(TINY),
        "stores": stores,
        "targets": [t.as_dict() for t in targets],
        "skipped": [],
    }
    json.dumps(document)  # the results file must be plain JSON
    markdown = render_markdown(document)
    assert "| agentsessions | **ours** |" in markdown
    assert "| raw dict | floor |" in markdown
    assert "### Targets" in markdown


async def test_the_instrumentation_case_times_both_arms_and_renders() -> None:
    from agentsessions_bench._overhead import measure_instrumentation, render_instrumentation

    config = dataclasses.replace(TINY, overhead_rounds=1, overhead_turns=4, overhead_history=5)
    (row,) = await measure_instrumentation({"memory": "memory://"}, config)
    assert row["engine"] == "memory"
    assert row["disabled_ms"] > 0 and row["enabled_ms"] > 0
    assert row["ratio"] == pytest.approx(row["enabled_ms"] / row["disabled_ms"])
    lines = render_instrumentation([row])
    assert lines[0] == "### Instrumentation overhead"
    assert any(line.startswith("| memory |") for line in lines)


async def test_histories_built_turn_by_turn_are_measured_under_their_own_names() -> None:
    config = dataclasses.replace(TINY, rounds=1, by_turn_sizes=(12,))
    (summary,) = [r.summary() for r in await bench.run_suite([MemoryFloor], config)]
    for metric in ("turn_full", "read_full", "append", "turn_last", "read_last"):
        assert set(summary["latency_ms"][metric + BY_TURN]) == {"12"}
    store = OurStore("memory://")
    await store.open()
    try:
        await store.create("t", 12, TURN_BATCH)
        session = await store._manager.get("t")
        assert len(session.events) == 12 and session.version == 1 + 12 // TURN_BATCH
    finally:
        await store.close()


async def test_adapters_run_the_peers_turn_and_are_compared_with_their_own_framework() -> None:
    pytest.importorskip("agents")
    pytest.importorskip("google.adk")
    from agentsessions_bench._adapters import AdkAdapterStore, SdkAdapterStore
    from agentsessions_bench._peers import AdkInMemoryStore

    config = dataclasses.replace(TINY, rounds=1, by_turn_sizes=(6,))
    factories = [
        lambda: SdkAdapterStore("memory://"),
        lambda: AdkAdapterStore("memory://"),
        AdkInMemoryStore,
    ]
    summaries = [r.summary() for r in await bench.run_suite(factories, config)]
    assert [(s["kind"], s["family"]) for s in summaries] == [
        ("adapter", "openai"),
        ("adapter", "adk"),
        ("peer", "adk"),
    ]
    expected = 2 * config.writers * config.updates_per_writer
    for summary in summaries:
        assert summary["error"] is None and summary["phase_errors"] == {}
        assert summary["contention"]["events_landed"] == expected
    # The ADK adapter refuses a stale append as ADK's own database service does; the
    # SDK adapter appends both, as every SDK store does (add_items retries).
    assert [s["stale_write"] for s in summaries] == ["both kept", "raises", "both kept"]
    targets = evaluate_targets(summaries, config.sizes)
    # Only the ADK adapter meets an ADK peer: the OpenAI adapter has none in memory.
    assert [(t.store, t.goal) for t in targets] == [
        ("agentsessions ADK adapter [memory]", "ahead of ADK InMemorySessionService")
    ]
    markdown = render_markdown(
        {
            "machine": {
                "date": "d",
                "cpu": "c",
                "cores": 2,
                "memory_gib": 1.0,
                "os": "o",
                "python": "p",
                "packages": {},
            },
            "config": dataclasses.asdict(config),
            "stores": summaries,
            "targets": [t.as_dict() for t in targets],
        }
    )
    assert "| agentsessions OpenAI adapter | **ours**, adapter |" in markdown
    assert "Histories built one turn at a time" in markdown


def test_curve_shapes_are_judged_against_the_design() -> None:
    from agentsessions_bench._curves import verdicts

    history = [
        {
            "size": n,
            "turn_full_ms": 0.5 + n * 0.01,  # linear once the fixed cost is amortised
            "turn_last_ms": 0.5,
            "append_ms": 0.3 + n * 8e-6,  # 10 -> 10,000: +27%, within the 1.3x goal
            "memory_full_kib": 2.0 * n,
            "memory_last_kib": 40.0,
        }
        for n in (10, 100, 1_000, 10_000)
    ]
    found = {
        "engines": {
            "x": {
                "history": history,
                "pages": [{"depth": d, "ms": 1.0 + d / 100} for d in (1, 10, 100)],
                "delete_user": [{"sessions": n, "ms": n**1.6} for n in (10, 100)],
                "purge": [{"sessions": n, "ms": 3.0 * n} for n in (10, 100)],
            }
        },
        "store": [
            {
                "engine": "x",
                "sessions": 2,
                "events": 8,
                "turn_empty_ms": 1.0,
                "turn_full_store_ms": 3.0,
            }
        ],
    }
    judged = {(r["curve"], r["metric"]): r["verdict"] for r in verdicts(found)}
    assert judged == {
        ("history", "turn_full_ms"): "linear",
        ("history", "memory_full_kib"): "linear",
        ("history", "turn_last_ms"): "flat",
        ("history", "append_ms"): "flat",
        ("history", "memory_last_kib"): "flat",
        ("pages", "ms"): "grows slightly",
        ("delete_user", "ms"): "worse than linear",
        ("purge", "ms"): "linear",
        ("store", "turn at 4 events, full store / empty store"): "NOT flat",
    }


async def test_the_encryption_case_times_every_arm_and_renders(tmp_path: Path) -> None:
    from agentsessions_bench._encryption import measure_encryption, render_encryption

    config = dataclasses.replace(TINY, overhead_rounds=1, overhead_turns=3, ops=2)
    urls = {"sqlite": f"sqlite:///{tmp_path / 'unused.db'}"}
    rows = await measure_encryption(urls, config, tmp_path / "work", histories=(4, 9))
    arms = {(row["case"], row["arm"]) for row in rows}
    assert arms == {
        (case, arm)
        for case in ("turn", "read")
        for arm in ("plain", "encrypted", "sdk", "sdk_encrypted")
    }
    assert all(row["wall_ms"] > 0 and row["cpu_us"] >= 0 for row in rows)
    lines = render_encryption(rows)
    assert any("| agentsessions, encryption on |" in line for line in lines)
    assert any("full read of 9 events | OpenAI EncryptedSession" in line for line in lines)
