"""``agentsessions conformance URL``: the kit's verb of the ``agentsessions`` command.

Registered through the ``agentsessions.cli`` entry point group, so the command offers
it only where the kit is installed. rich (a dependency of ``agentsessions-cli``, present
whenever the command runs) and the runner (pytest) are imported only when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from agentsessions import mask_url

__all__ = ["register"]

_STYLES = {
    "passed": "green",
    "failed": "bold red",
    "error": "bold red",
    "xfailed": "yellow",
    "xpassed": "bold red",
    "skipped": "dim",
    "not run": "dim",
}


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Register ``conformance``."""
    parser = subparsers.add_parser(
        "conformance",
        help="check a backend URL against the SessionManager contract",
        description=(
            "Run the agentsessions conformance kit against URL and print every clause "
            "that did not pass (failed, errors, skips with their reasons) and a summary; "
            "-v lists the passes too. Exits non-zero if any clause fails."
        ),
    )
    parser.add_argument("url", help="backend URL, e.g. postgresql://user:pw@host/db")
    parser.add_argument("--report", metavar="PATH", help="also write a JSON report to PATH")
    parser.add_argument(
        "-k", dest="keyword", metavar="EXPR", help="only clauses matching EXPR (pytest -k)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="list the clauses that passed too"
    )
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from ._runner import run

    # Colour only on a terminal (rich decides, and honours NO_COLOR); a pipe or a CI log
    # gets plain text, wide enough that rows do not wrap into unreadable columns.
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=max(console.width, 160))
    masked = mask_url(args.url)
    console.print(f"agentsessions conformance: {masked}")
    outcome = run(args.url, keyword=args.keyword, report=args.report)
    if not outcome.results:
        console.print(
            f"no conformance clause ran against {masked} (pytest exit {outcome.exit_code})"
        )
        return outcome.exit_code or 1
    title = outcome.backend.describe() if outcome.backend else masked
    table = Table(title=title, title_justify="left")
    table.add_column("clause test", overflow="fold")
    table.add_column("outcome")
    table.add_column("s", justify="right")
    table.add_column("clause, and why it did not pass", overflow="fold")
    counts: dict[str, int] = {}
    for result in outcome.results:
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
        if result.outcome == "passed" and not args.verbose:
            continue
        detail = Text(result.clause)
        if result.message:
            message = result.message.replace(args.url, masked)
            detail.append(f"\n{message}", style=_STYLES.get(result.outcome, ""))
        table.add_row(
            Text(result.test),  # Text, not markup: "[param]" ids must print as they are
            Text(result.outcome, style=_STYLES.get(result.outcome, "")),
            f"{result.duration:.2f}",
            detail,
        )
    if table.row_count:
        console.print(table)
    else:
        console.print(f"{title}: every clause passed (-v lists them)")
    console.print(", ".join(f"{n} {what}" for what, n in sorted(counts.items())))
    if args.report:
        console.print(f"JSON report: {args.report}")
    return outcome.exit_code
