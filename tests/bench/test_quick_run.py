"""The benchmark's own command, run end to end in its quick forms, so it cannot rot.

Every engine whose server the tests have (all of them in CI), our store, its floor,
the peers installed here and our adapters: tiny sizes, one round. This checks that
every store runs every phase and that the results file, tables and curves are
written; it says nothing about speed (see docs/benchmarks.md for that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from agentsessions_bench.__main__ import main
from agentsessions_bench._suite import ENGINES

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"


def _measured(results: dict[str, object]) -> set[str]:
    skipped = results["skipped"]
    assert isinstance(skipped, list)
    if REQUIRE_SERVERS:
        assert skipped == [], skipped  # CI has every server: nothing may be left out
    return {str(item["engine"]) for item in skipped}


def test_quick_suite_runs_every_store_of_every_engine(tmp_path: Path) -> None:
    code = main(
        [
            "--quick",
            "--sizes",
            "0,6",
            "--by-turn-sizes",
            "4",
            "--ops",
            "2",
            "--no-instrumentation",  # tests/bench/test_harness.py runs that case
            "--out",
            str(tmp_path),
        ]
    )
    results = json.loads((tmp_path / "latest.json").read_text(encoding="utf-8"))
    # A peer that cannot run here (its package missing, SQLAlchemySession on MySQL) is
    # reported unavailable and leaves the exit code 0; anything else that fails is a
    # broken harness.
    broken = [s["label"] for s in results["stores"] if s["error"] and s["kind"] != "peer"]
    broken += [
        s["label"]
        for s in results["stores"]
        if s["error"] and not s["error"].startswith("unavailable: ")
    ]
    assert not broken and code == 0
    skipped = _measured(results)
    stores = [s for s in results["stores"] if not s["error"]]
    for engine in set(ENGINES) - skipped:
        kinds = {s["kind"] for s in stores if s["engine"] == engine}
        assert {"ours", "floor"} <= kinds, (engine, kinds)
    for store in stores:
        assert store["error"] is None and store["phase_errors"] == {}, store["label"]
        assert set(store["latency_ms"]["turn_full"]) == {"0", "6"}
        assert set(store["latency_ms"]["turn_full/by_turn"]) == {"4"}
        assert store["contention_all_landed"] is True, store["label"]
    kinds = {s["kind"] for s in stores}
    assert "adapter" in kinds and "peer" in kinds  # the extras are installed here
    goals = {t["goal"] for t in results["targets"]}
    assert "throughput vs raw floor" in goals
    assert any(goal.startswith("ahead of ") for goal in goals)
    assert "### Targets" in (tmp_path / "latest.md").read_text(encoding="utf-8")


def test_quick_cost_curves_run_on_every_engine(tmp_path: Path) -> None:
    code = main(["--curves", "--quick", "--out", str(tmp_path)])
    found = json.loads((tmp_path / "curves.json").read_text(encoding="utf-8"))
    assert code == 0, found["errors"]
    skipped = _measured(found)
    engines = set(ENGINES) - skipped
    assert set(found["engines"]) == engines
    for engine, curves in found["engines"].items():
        assert [p["size"] for p in curves["history"]] == [10, 60], engine
        assert [p["depth"] for p in curves["pages"]] == [1, 10], engine
        assert [p["sessions"] for p in curves["delete_user"]] == [2, 5], engine
        assert [p["sessions"] for p in curves["purge"]] == [3, 6], engine
    assert {row["engine"] for row in found["store"]} == engines & {"sqlite", "postgres", "redis"}
    assert all(row["events"] == 24 for row in found["store"])
    assert {row["verdict"] for row in found["verdicts"]} - {"n/a"}


@pytest.mark.parametrize("argv", [["--curves", "--full", "--quick"], ["--engines", "nope"]])
def test_bad_arguments_are_refused(argv: list[str], tmp_path: Path) -> None:
    assert main([*argv, "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


def test_only_a_peer_that_cannot_run_leaves_the_run_passing() -> None:
    from agentsessions_bench.__main__ import failed_stores

    def store(label: str, kind: str, error: str | None) -> dict[str, object]:
        return {"label": label, "kind": kind, "error": error}

    assert failed_stores([store("a", "ours", None), store("p", "peer", "unavailable: x")]) == []
    assert failed_stores([store("p", "peer", "RuntimeError: boom")]) == ["p"]
    assert failed_stores([store("o", "ours", "unavailable: x")]) == ["o"]
    assert failed_stores([store("f", "floor", "unavailable: x")]) == ["f"]
    assert failed_stores([store("d", "adapter", "TimeoutError")]) == ["d"]


def test_from_json_judges_the_stored_run_by_the_current_goals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recorded = Path(__file__).parents[2] / "bench" / "results" / "latest.json"
    results = json.loads(recorded.read_text(encoding="utf-8"))
    results["targets"] = []  # as a run made before a goal existed
    stale = tmp_path / "latest.json"
    stale.write_text(json.dumps(results), encoding="utf-8")
    assert main(["--from-json", str(stale), "--no-write"]) == 0
    table = capsys.readouterr().out.split("### Targets", 1)[1]
    assert "append at 5,000 vs at 0" in table and "(the floor's)" in table
