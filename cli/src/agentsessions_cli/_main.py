"""The ``agentsessions`` command: one small dispatcher, each verb group in its own module.

Verbs that belong to other distributions (the kit's ``conformance``, the benchmarks'
``bench``) come from the ``agentsessions.cli`` entry point group, so this distribution
never imports them and lists only the verbs installed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import sys
from collections.abc import Sequence
from typing import NoReturn

from ._common import CommandError, fail

__all__ = ["ENTRY_POINT_GROUP", "build_parser", "main"]

#: Each entry point names a ``register(subparsers)`` callable; its name is the verb.
ENTRY_POINT_GROUP = "agentsessions.cli"

# Each module defines ``register(subparsers)``; a parser's ``func`` returns the exit code.
_VERB_MODULES = (
    "agentsessions_cli._branches",
    "agentsessions_cli._chat",
    "agentsessions_cli._doctor",
    "agentsessions_cli._ops",
    "agentsessions_cli._rekey",
    "agentsessions_cli._inspect",
)


class _Parser(argparse.ArgumentParser):
    """Usage errors as one line on stderr, exit 2, like every other failure."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"agentsessions: error: {self.prog}: {message} (see {self.prog} --help)\n")


def installed_versions() -> list[tuple[str, str]]:
    """(name, version) of every installed agentsessions distribution, core first."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        if name.lower().replace("_", "-").startswith("agentsessions"):
            found.setdefault(name, dist.version)
    return sorted(found.items(), key=lambda item: (item[0] != "agentsessions", item[0]))


class _Versions(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        width = max(len(name) for name, _ in installed_versions())
        for name, version in installed_versions():
            print(f"{name.ljust(width)}  {version}")
        parser.exit(0)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="agentsessions",
        description="Durable conversation sessions for AI agents: demo, inspect, operate.",
    )
    parser.add_argument(
        "--version",
        action=_Versions,
        nargs=0,
        help="show the version of every installed agentsessions distribution and exit",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _VERB_MODULES:
        importlib.import_module(name).register(subparsers)
    builtin = set(subparsers.choices)
    for entry_point in sorted(
        importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name
    ):
        if entry_point.name in builtin or entry_point.name in subparsers.choices:
            continue  # a built-in verb (or an earlier plugin's) is never replaced
        try:
            register = entry_point.load()
        except Exception as exc:
            # One broken plugin must not take the other verbs down with it.
            print(
                f"agentsessions: warning: verb {entry_point.name!r} ({entry_point.value}) "
                f"could not be loaded: {type(exc).__name__}: {exc}",
                file=sys.stderr,
            )
            continue
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    try:
        code: int = args.func(args)
    except CommandError as exc:  # raised before the verb's own run() could report it
        return fail(str(exc), exc.code)
    return code
