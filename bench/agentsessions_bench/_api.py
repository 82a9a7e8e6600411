"""Running a whole suite or one URL, and profiling one operation of our store."""

from __future__ import annotations

import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._encryption import measure_encryption
from ._machine import describe_machine, server_versions
from ._ours import OurStore
from ._overhead import measure_instrumentation
from ._report import evaluate_targets, render_markdown, write_plots, write_results
from ._runner import Config, Log, run_suite
from ._store import LAST_EVENTS, StoreUnavailable, new_session_id
from ._suite import ENGINES, plan_for_url, plan_suite

__all__ = [
    "RESULTS_DIR",
    "publish_curves",
    "run_curves",
    "profile_operation",
    "publish",
    "run_encryption",
    "run_engines",
    "run_instrumentation",
    "run_url",
]

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"


def _collect(
    results: list[Any], config: Config, plan: Any, versions: dict[str, str]
) -> dict[str, Any]:
    from agentsessions import mask_url

    stores = [result.summary() for result in results]
    return {
        "machine": describe_machine(),
        "server_versions": versions,
        "servers": {engine: mask_url(url) for engine, url in plan.servers.items()},
        "config": dataclasses.asdict(config),
        "stores": stores,
        "targets": [t.as_dict() for t in evaluate_targets(stores, config.sizes)],
        "skipped": plan.skipped,
    }


async def run_engines(
    engines: tuple[str, ...] = ENGINES,
    config: Config | None = None,
    *,
    peers: bool = True,
    log: Log | None = None,
) -> dict[str, Any]:
    """Measure every available store of *engines*; the results as plain JSON data."""
    config = config or Config()
    async with plan_suite(engines, peers=peers) as plan:
        for item in plan.skipped:
            print(f"skipping {item['engine']}: {item['reason']}", file=sys.stderr)
        versions = await server_versions(plan.servers)
        results = await run_suite(plan.factories, config, log, plan.settle)
        collected = _collect(results, config, plan, versions)
        collected["instrumentation"] = await _instrumentation(plan, config, log)
        return collected


async def _instrumentation(plan: Any, config: Config, log: Log | None) -> list[dict[str, Any]]:
    if config.overhead_turns <= 0 or not plan.urls:
        return []
    try:
        return await measure_instrumentation(plan.urls, config, log)
    except StoreUnavailable as exc:
        plan.skipped.append({"engine": "all", "store": "instrumentation", "reason": str(exc)})
        return []


async def run_instrumentation(
    engines: tuple[str, ...] = ENGINES, config: Config | None = None, log: Log | None = None
) -> dict[str, Any]:
    """Only the instrumentation case, on every available engine of *engines*."""
    config = config or Config()
    async with plan_suite(engines, peers=False) as plan:
        rows = await _instrumentation(plan, config, log)
        return {
            "machine": describe_machine(),
            "config": dataclasses.asdict(config),
            "instrumentation": rows,
            "skipped": plan.skipped,
        }


async def run_encryption(config: Config | None = None, log: Log | None = None) -> dict[str, Any]:
    """Only the encryption case: SQLite and PostgreSQL, ours and the SDK's, off and on."""
    config = config or Config()
    async with plan_suite(("sqlite", "postgres"), peers=False) as plan:
        versions = await server_versions(plan.servers)
        workdir = Path(tempfile.mkdtemp(prefix="agentsessions-bench-enc-"))
        try:
            rows = await measure_encryption(plan.urls, config, workdir, log)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        return {
            "machine": describe_machine(),
            "server_versions": versions,
            "config": dataclasses.asdict(config),
            "encryption": rows,
            "skipped": plan.skipped,
        }


async def run_url(
    url: str, config: Config | None = None, *, peers: bool = False, log: Log | None = None
) -> dict[str, Any]:
    """Measure our store on *url* against the raw floor of its engine."""
    config = config or Config()
    async with plan_for_url(url, peers=peers) as plan:
        results = await run_suite(plan.factories, config, log, plan.settle)
        return _collect(results, config, plan, {})


DOCS_PAGE = RESULTS_DIR.parents[1] / "docs" / "benchmarks.md"
_START, _END = "<!-- results:start -->", "<!-- results:end -->"


def publish(results: dict[str, Any], directory: Path = RESULTS_DIR) -> Path:
    """Write latest.json, latest.md and one PNG per engine into *directory*.

    A run into the default directory also refreshes the tables between the
    ``results`` markers of docs/benchmarks.md, so the page always shows the last run.
    """
    directory.mkdir(parents=True, exist_ok=True)
    write_results(results, directory)
    plots = write_plots(results, directory)
    markdown = render_markdown(results, {engine: path.name for engine, path in plots.items()})
    path = directory / "latest.md"
    path.write_text(markdown, encoding="utf-8")
    if directory.resolve() == RESULTS_DIR and DOCS_PAGE.is_file():
        page = DOCS_PAGE.read_text(encoding="utf-8")
        if _START in page and _END in page:
            relative = {engine: f"../bench/results/{p.name}" for engine, p in plots.items()}
            head, _, rest = page.partition(_START)
            _, _, tail = rest.partition(_END)
            body = render_markdown(results, relative)
            DOCS_PAGE.write_text(f"{head}{_START}\n{body}{_END}{tail}", encoding="utf-8")
    return path


async def profile_operation(url: str, operation: str, size: int, count: int) -> str:
    """Profile *count* repetitions of one operation of our store on a *size*-event session.

    Uses pyinstrument when installed (a readable call tree), else cProfile's top
    functions by cumulative time.
    """
    from agentsessions import mask_url

    store = OurStore(url)
    await store.open()
    try:
        session_id = new_session_id("prof")
        await store.create(session_id, size)
        await store.turn(session_id, None)

        async def body() -> None:
            for _ in range(count):
                if operation == "append":
                    await store.append(session_id)
                elif operation == "turn_full":
                    await store.turn(session_id, None)
                elif operation == "turn_last":
                    await store.turn(session_id, LAST_EVENTS)
                elif operation == "read_full":
                    await store._manager.get(session_id)
                elif operation == "read_last":
                    await store._manager.get(session_id, last_events=LAST_EVENTS)
                else:
                    raise ValueError(f"unknown operation {operation!r}")

        started = time.perf_counter()
        try:
            from pyinstrument import Profiler
        except ImportError:
            import cProfile
            import io
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
            await body()
            profiler.disable()
            out = io.StringIO()
            pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(30)
            text = out.getvalue()
        else:
            pyinstrument = Profiler(async_mode="enabled", interval=0.0002)
            pyinstrument.start()
            await body()
            pyinstrument.stop()
            text = pyinstrument.output_text(unicode=False, color=False, show_all=False)
        elapsed = time.perf_counter() - started
        header = (
            f"{operation} x{count} on a {size:,}-event session at {mask_url(store.url)}: "
            f"{elapsed / count * 1e3:.3f} ms each (profiled)\n"
        )
        return header + text
    finally:
        await store.close()


async def run_curves(
    engines: tuple[str, ...] = ENGINES, config: Any = None, log: Log | None = None
) -> dict[str, Any]:
    """The cost curves (see `_curves`) on every available engine of *engines*."""
    from ._curves import CurveConfig, measure_curves

    config = config or CurveConfig()
    async with plan_suite(engines, peers=False) as plan:
        found = await measure_curves(plan.urls, config, log)
        found["machine"] = describe_machine()
        found["skipped"] = plan.skipped
        return found


_CURVES_START, _CURVES_END = "<!-- curves:start -->", "<!-- curves:end -->"


def publish_curves(found: dict[str, Any], directory: Path = RESULTS_DIR) -> str:
    """Write curves.json and the curve plots; refresh docs/benchmarks.md's curves section
    when writing into the default directory. Returns the Markdown."""
    from ._curves import render_curves, write_curve_plots

    directory.mkdir(parents=True, exist_ok=True)
    write_results(found, directory, "curves")
    plots = write_curve_plots(found, directory)
    markdown = render_curves(found, {name: path.name for name, path in plots.items()})
    if directory.resolve() == RESULTS_DIR and DOCS_PAGE.is_file():
        page = DOCS_PAGE.read_text(encoding="utf-8")
        if _CURVES_START in page and _CURVES_END in page:
            relative = {name: f"../bench/results/{p.name}" for name, p in plots.items()}
            head, _, rest = page.partition(_CURVES_START)
            _, _, tail = rest.partition(_CURVES_END)
            machine = found["machine"]
            body = (
                f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores.\n\n"
                + render_curves(found, relative)
            )
            DOCS_PAGE.write_text(
                f"{head}{_CURVES_START}\n{body}{_CURVES_END}{tail}", encoding="utf-8"
            )
    return markdown


async def run_compaction(
    engines: tuple[str, ...] = ENGINES, config: Any = None, log: Log | None = None
) -> dict[str, Any]:
    """The compaction figures (see `_compaction`) on every available engine of *engines*."""
    from ._compaction import CompactionConfig, measure_compaction

    config = config or CompactionConfig()
    async with plan_suite(engines, peers=False) as plan:
        found = await measure_compaction(plan.urls, config, log)
        found["machine"] = describe_machine()
        found["skipped"] = plan.skipped
        return found


_COMPACTION_START, _COMPACTION_END = "<!-- compaction:start -->", "<!-- compaction:end -->"


def publish_compaction(found: dict[str, Any], directory: Path = RESULTS_DIR) -> str:
    """Write compaction.json; refresh docs/benchmarks.md's compaction section when
    writing into the default directory. Returns the Markdown."""
    from ._compaction import render_compaction

    directory.mkdir(parents=True, exist_ok=True)
    write_results(found, directory, "compaction")
    markdown = render_compaction(found)
    if directory.resolve() == RESULTS_DIR and DOCS_PAGE.is_file():
        page = DOCS_PAGE.read_text(encoding="utf-8")
        if _COMPACTION_START in page and _COMPACTION_END in page:
            head, _, rest = page.partition(_COMPACTION_START)
            _, _, tail = rest.partition(_COMPACTION_END)
            machine = found["machine"]
            body = (
                f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores.\n\n"
                + markdown
            )
            DOCS_PAGE.write_text(
                f"{head}{_COMPACTION_START}\n{body}{_COMPACTION_END}{tail}", encoding="utf-8"
            )
    return markdown


async def run_branching(
    engines: tuple[str, ...] = ENGINES, config: Any = None, log: Log | None = None
) -> dict[str, Any]:
    """The fork and rewind figures (see `_branching`) on every available engine."""
    from ._branching import BranchingConfig, measure_branching

    config = config or BranchingConfig()
    async with plan_suite(engines, peers=False) as plan:
        with tempfile.TemporaryDirectory(prefix="agentsessions-bench-sdk-") as workdir:
            found = await measure_branching(plan.urls, config, Path(workdir), log)
        found["machine"] = describe_machine()
        found["skipped"] = plan.skipped
        return found


_BRANCHING_START, _BRANCHING_END = "<!-- branching:start -->", "<!-- branching:end -->"


def publish_branching(found: dict[str, Any], directory: Path = RESULTS_DIR) -> str:
    """Write branching.json; refresh docs/benchmarks.md's branching section when
    writing into the default directory. Returns the Markdown."""
    from ._branching import render_branching

    directory.mkdir(parents=True, exist_ok=True)
    write_results(found, directory, "branching")
    markdown = render_branching(found)
    if directory.resolve() == RESULTS_DIR and DOCS_PAGE.is_file():
        page = DOCS_PAGE.read_text(encoding="utf-8")
        if _BRANCHING_START in page and _BRANCHING_END in page:
            head, _, rest = page.partition(_BRANCHING_START)
            _, _, tail = rest.partition(_BRANCHING_END)
            machine = found["machine"]
            body = (
                f"Measured {machine['date']} on {machine['cpu']}, {machine['cores']} cores.\n\n"
                + markdown
            )
            DOCS_PAGE.write_text(
                f"{head}{_BRANCHING_START}\n{body}{_BRANCHING_END}{tail}", encoding="utf-8"
            )
    return markdown
