"""The ``agentsessions`` command: one small dispatcher, each verb group in its own module.

Verb modules are imported only when the command starts, and each one registers its
own subcommands, so a verb's dependencies (the kit, the benchmarks) load only for it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Each module defines ``register(subparsers)``; a parser's ``func`` returns the exit code.
_VERB_MODULES = (
    "agentsessions._cli._chat",
    "agentsessions._cli._ops",
    "agentsessions._cli._conformance",
    "agentsessions._cli._bench",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentsessions",
        description="Durable conversation sessions for AI agents: demo, inspect, operate.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _VERB_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
