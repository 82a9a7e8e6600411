"""``python -m agentsessions_bench``: run the suite, write bench/results/, print the tables."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._api import (
    RESULTS_DIR,
    profile_operation,
    publish,
    publish_branching,
    publish_compaction,
    publish_curves,
    run_branching,
    run_compaction,
    run_curves,
    run_encryption,
    run_engines,
    run_instrumentation,
    run_url,
)
from ._encryption import render_encryption
from ._overhead import render_instrumentation
from ._report import evaluate_targets, render_markdown, write_results
from ._runner import Config
from ._suite import ENGINES

__all__ = ["add_run_options", "config_from_args", "failed_stores", "main"]


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``agentsessions bench``."""
    parser.add_argument("--quick", action="store_true", help="one short round (a smoke run)")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--ops", type=int, help="timed turns per history size per round")
    parser.add_argument("--sizes", help="comma-separated history sizes (default 0,100,1000,5000)")
    parser.add_argument(
        "--by-turn-sizes",
        help="comma-separated history sizes also built two events per write (default 1000; "
        "'' for none)",
    )


def config_from_args(args: argparse.Namespace) -> Config:
    config = Config.quick() if args.quick else Config()
    changes: dict[str, object] = {}
    if args.rounds is not None:
        changes["rounds"] = args.rounds
    if args.ops is not None:
        changes["ops"] = args.ops
    if args.sizes:
        changes["sizes"] = tuple(int(part) for part in args.sizes.split(","))
    if args.by_turn_sizes is not None:
        changes["by_turn_sizes"] = tuple(
            int(part) for part in args.by_turn_sizes.split(",") if part.strip()
        )
    return dataclasses.replace(config, **changes)  # type: ignore[arg-type]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m agentsessions_bench",
        description="Benchmark agentsessions against raw drivers and peer session stores.",
    )
    add_run_options(parser)
    parser.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help=f"comma-separated subset of {','.join(ENGINES)}",
    )
    parser.add_argument("--no-peers", action="store_true", help="skip the OpenAI / ADK stores")
    parser.add_argument(
        "--no-instrumentation", action="store_true", help="skip the instrumentation case"
    )
    parser.add_argument("--url", help="measure only our store on this URL (and its floor)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    parser.add_argument("--no-write", action="store_true", help="print only; write no files")
    parser.add_argument(
        "--from-json",
        type=Path,
        metavar="PATH",
        help="re-render tables, plots and docs from a results file instead of running",
    )
    parser.add_argument(
        "--profile",
        metavar="URL",
        help="profile one operation of our store on URL instead of benchmarking",
    )
    parser.add_argument(
        "--operation",
        default="append",
        choices=("append", "turn_full", "turn_last", "read_full", "read_last"),
    )
    parser.add_argument("--size", type=int, default=5000, help="history size to profile at")
    parser.add_argument(
        "--instrumentation",
        action="store_true",
        help="run only the instrumentation case (off vs on); writes instrumentation.json",
    )
    parser.add_argument(
        "--encryption",
        action="store_true",
        help="run only the encryption case (SQLite, PostgreSQL, the SDK's EncryptedSession); "
        "writes encryption.json",
    )
    parser.add_argument("--count", type=int, default=200, help="operations to profile")
    parser.add_argument(
        "--curves",
        action="store_true",
        help="run only the cost curves (reduced sizes; --full: the full ones; --quick: "
        "tiny sizes, a smoke run); writes curves.json and curves-*.png",
    )
    parser.add_argument("--full", action="store_true", help="with --curves: the full sizes")
    parser.add_argument(
        "--branching",
        action="store_true",
        help="run only the branching case (fork and rewind of 0 / 1,000 / 5,000 / 50,000 "
        "events against a full read; --short: up to 5,000; --quick: tiny sizes); writes "
        "branching.json",
    )
    parser.add_argument("--short", action="store_true", help="with --branching: a short run")
    parser.add_argument(
        "--compaction",
        action="store_true",
        help="run only the compaction case (5,000 events into 1 + 20 kept, and a turn "
        "before and after; --quick: tiny sizes); writes compaction.json",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.profile:
        print(asyncio.run(profile_operation(args.profile, args.operation, args.size, args.count)))
        return 0
    if args.curves:
        return _curves(args)
    if args.compaction:
        return _compaction(args)
    if args.branching:
        return _branching(args)
    config = config_from_args(args)
    if args.no_instrumentation:
        config = dataclasses.replace(config, overhead_turns=0)
    if args.instrumentation:
        engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
        found = asyncio.run(run_instrumentation(engines, config))
        print("\n".join(render_instrumentation(found["instrumentation"])))
        for item in found["skipped"]:
            print(f"not measured: {item['engine']}: {item['reason']}", file=sys.stderr)
        if not args.no_write:
            write_results(found, args.out, "instrumentation")
        return 0 if found["instrumentation"] else 1
    if args.encryption:
        found = asyncio.run(run_encryption(config, log=print))
        print("\n".join(render_encryption(found["encryption"])))
        for item in found["skipped"]:
            print(f"not measured: {item['engine']}: {item['reason']}", file=sys.stderr)
        if not args.no_write:
            write_results(found, args.out, "encryption")
        return 0 if found["encryption"] else 1
    if args.from_json:
        results = json.loads(args.from_json.read_text(encoding="utf-8"))
        # Judged again by this version's goals: the measurements are the run's own.
        results["targets"] = [
            target.as_dict()
            for target in evaluate_targets(results["stores"], results["config"]["sizes"])
        ]
    elif args.url:
        results = asyncio.run(run_url(args.url, config, peers=not args.no_peers))
    else:
        engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
        unknown = set(engines) - set(ENGINES)
        if unknown:
            print(f"unknown engine(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        results = asyncio.run(run_engines(engines, config, peers=not args.no_peers))
    if args.no_write:
        print(render_markdown(results))
    else:
        path = publish(results, args.out)
        print(path.read_text(encoding="utf-8"))
        print(f"written to {args.out}", file=sys.stderr)
    return 1 if failed_stores(results["stores"]) else 0


def failed_stores(stores: Sequence[dict[str, Any]]) -> list[str]:
    """The labels of the stores whose failure fails the run: every one that failed,
    except a peer that cannot run here (its package missing, or an engine it cannot use,
    as the SDK's SQLAlchemySession on MySQL), which the tables report instead."""
    return [
        store["label"]
        for store in stores
        if store.get("error")
        and not (store["kind"] == "peer" and str(store["error"]).startswith("unavailable: "))
    ]


def _compaction(args: argparse.Namespace) -> int:
    from ._compaction import CompactionConfig, render_compaction

    config = CompactionConfig.smoke() if args.quick else CompactionConfig()
    engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
    unknown = set(engines) - set(ENGINES)
    if unknown:
        print(f"unknown engine(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    found = asyncio.run(run_compaction(engines, config))
    if args.no_write:
        print(render_compaction(found))
    else:
        print(publish_compaction(found, args.out))
        print(f"written to {args.out}", file=sys.stderr)
    for item in found["skipped"]:
        print(f"not measured: {item['engine']}: {item['reason']}", file=sys.stderr)
    for engine in found.get("unsupported", []):
        print(f"not measured: {engine}: the backend does not branch", file=sys.stderr)
    return 1 if found["errors"] else 0


def _branching(args: argparse.Namespace) -> int:
    from ._branching import BranchingConfig, render_branching

    if args.quick:
        config = BranchingConfig.smoke()
    else:
        config = BranchingConfig.short() if args.short else BranchingConfig()
    engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
    unknown = set(engines) - set(ENGINES)
    if unknown:
        print(f"unknown engine(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    found = asyncio.run(run_branching(engines, config))
    if args.no_write:
        print(render_branching(found))
    else:
        print(publish_branching(found, args.out))
        print(f"written to {args.out}", file=sys.stderr)
    for item in found["skipped"]:
        print(f"not measured: {item['engine']}: {item['reason']}", file=sys.stderr)
    return 1 if found["errors"] else 0


def _curves(args: argparse.Namespace) -> int:
    from ._curves import CurveConfig

    if args.full and args.quick:
        print("--full and --quick exclude each other", file=sys.stderr)
        return 2
    config = (
        CurveConfig.full_size()
        if args.full
        else CurveConfig.smoke()
        if args.quick
        else CurveConfig()
    )
    engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
    unknown = set(engines) - set(ENGINES)
    if unknown:
        print(f"unknown engine(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    found = asyncio.run(run_curves(engines, config))
    if args.no_write:
        from ._curves import render_curves

        print(render_curves(found))
    else:
        print(publish_curves(found, args.out))
        print(f"written to {args.out}", file=sys.stderr)
    for item in found["skipped"]:
        print(f"not measured: {item['engine']}: {item['reason']}", file=sys.stderr)
    return 1 if found["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
