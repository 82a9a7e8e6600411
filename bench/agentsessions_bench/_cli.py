"""``agentsessions bench URL``: benchmark our store on one URL against its raw-driver floor.

Registered through the ``agentsessions.cli`` entry point group, so the command offers
it only where this package is installed (``pip install -e bench/`` from a source
checkout, or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from typing import Any

from . import _api, _report, _runner

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register ``bench``."""
    parser = subparsers.add_parser(
        "bench",
        help="benchmark a session store URL against the raw driver",
        description=(
            "Run the benchmark workload (turn latency by history size, append cost, "
            "throughput, contention) on URL and on a hand-written raw-driver floor for "
            "the same engine, and print the tables."
        ),
    )
    parser.add_argument("url", help="e.g. sqlite:///bench.db or postgresql://host/db")
    parser.add_argument("--quick", action="store_true", help="one short round")
    parser.add_argument("--rounds", type=int, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--ops", type=int, help="timed turns per history size per round")
    parser.add_argument("--sizes", help="comma-separated history sizes (default 0,100,1000,5000)")
    parser.add_argument(
        "--peers", action="store_true", help="also run the OpenAI / ADK stores if installed"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    config = _runner.Config.quick() if args.quick else _runner.Config()
    changes: dict[str, Any] = {}
    if args.rounds is not None:
        changes["rounds"] = args.rounds
    if args.ops is not None:
        changes["ops"] = args.ops
    if args.sizes:
        try:
            changes["sizes"] = tuple(int(part) for part in args.sizes.split(","))
        except ValueError:
            print(
                f"agentsessions bench: --sizes must be integers, not {args.sizes!r}",
                file=sys.stderr,
            )
            return 2
    config = dataclasses.replace(config, **changes)
    results = asyncio.run(_api.run_url(args.url, config, peers=args.peers))
    print(_report.render_markdown(results))
    if args.json:
        import json

        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=2)
    return 1 if any(store.get("error") for store in results["stores"]) else 0
