"""``agentsessions doctor URL``: the deployment settings that would lose or expose sessions."""

from __future__ import annotations

import argparse
import sys

from agentsessions import SEVERITIES, Diagnosis
from rich.markup import escape

from ._common import EXIT_CODES_HELP, EXIT_OK, console, run
from ._ops import _connect_to_read

__all__ = ["EXIT_FINDINGS", "register", "render"]

#: A finding at or above ``--fail-on`` was reported (distinct from "could not run": 1-5).
EXIT_FINDINGS = 6

_STYLE = {
    "ok": "green",
    "info": "cyan",
    "warning": "yellow",
    "error": "red",
    "critical": "bold red",
}


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_text = (
        "Check a deployment: report each server setting that could lose, expose or wrongly "
        "expire sessions, with its consequence and its fix. Read-only."
    )
    p = subparsers.add_parser(
        "doctor",
        help=help_text,
        description=help_text + " The checks are listed in docs/doctor.md.",
        epilog=EXIT_CODES_HELP.replace(
            "  130  interrupted",
            f"  {EXIT_FINDINGS}    a finding at least as severe as --fail-on\n  130  interrupted",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url")
    p.add_argument(
        "--json",
        action="store_true",
        help="print the report as JSON (schema: docs/doctor.schema.json)",
    )
    p.add_argument(
        "--fail-on",
        choices=SEVERITIES[1:],
        default="error",
        help=f"exit {EXIT_FINDINGS} if a finding is this severe or worse (default: error)",
    )
    p.add_argument(
        "--all",
        action="store_true",
        help="also list the checks that found nothing wrong (always in --json)",
    )
    p.set_defaults(func=_doctor)


def render(report: Diagnosis, *, show_ok: bool) -> None:
    """The report for a person: one block per finding, worst first."""
    console.print(
        f"{escape(report.url)} ({escape(report.backend)}): worst finding [b]{report.worst}[/b]"
    )
    for f in report.findings:
        if f.severity == "ok" and not show_ok:
            continue
        style = _STYLE[f.severity]
        console.print(f"\n[{style}]{f.severity.upper():8}[/{style}] {escape(f.check)}")
        console.print(f"  found: {f.found}", markup=False)
        if f.consequence:
            console.print(f"  means: {f.consequence}", markup=False)
        if f.fix:
            console.print(f"  fix:   {f.fix}", markup=False)
        console.print(f"  docs:  {f.docs}", markup=False)
    hidden = sum(f.severity == "ok" for f in report.findings)
    if hidden and not show_ok:
        checks = "check" if hidden == 1 else "checks"
        console.print(f"\n{hidden} {checks} found nothing wrong (--all lists them)")


def _doctor(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with _connect_to_read(args.url) as manager:
            report = await manager.diagnose()
        if args.json:
            sys.stdout.write(report.model_dump_json(indent=2) + "\n")
        else:
            render(report, show_ok=args.all)
        return EXIT_FINDINGS if report.at_least(args.fail_on) else EXIT_OK

    return run(main)
