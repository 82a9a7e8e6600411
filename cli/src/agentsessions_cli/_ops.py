"""The operator's verbs: backends, ls, show, export, import, copy, rm, erase-user, purge-expired."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, TypeVar

import pydantic
from agentsessions import (
    InvalidInputError,
    PartialSessionError,
    Session,
    SessionManager,
    SessionSerializationError,
    SessionSummary,
    backend_problems,
    check_restorable,
    installed_backends,
)

# Not public API of core: the same release's internals (this distribution pins core's
# minor version), kept private there so the library's surface stays the contract.
from rich import box
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ._common import (
    EXIT_CODES_HELP,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    connect,
    console,
    err_console,
    run,
)
from ._transfer import PRESERVED_FIELDS, Outcome, differences, iter_batches, transfer_many

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return subparsers.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    p = add("backends", "List the installed backends, their packages, versions and capabilities.")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_backends)

    p = add("ls", "List sessions, newest first.")
    p.add_argument("url")
    p.add_argument("--user", help="only this user's sessions")
    p.add_argument("--limit", type=_at_least(1), default=50, help="at most this many (default 50)")
    p.add_argument("--json", action="store_true", help="one JSON object per line")
    p.set_defaults(func=_ls)

    p = add("show", "Show one conversation: its events and state.")
    p.add_argument("url")
    p.add_argument("session_id")
    p.add_argument("--last", type=_at_least(0), help="only the newest N events")
    p.add_argument("--json", action="store_true", help="the raw session as JSON")
    p.set_defaults(func=_show)

    p = add("export", "Write sessions as JSON Lines, one session per line (streamed).")
    p.add_argument("url")
    p.add_argument("--user", help="only this user's sessions")
    p.add_argument("-o", "--output", help="file to write (default: standard output)")
    p.set_defaults(func=_export)

    p = add("import", "Create sessions from a JSON Lines export; never overwrites.")
    p.add_argument("url")
    p.add_argument("file", help="the export file, or - for standard input")
    p.add_argument(
        "--on-exists",
        choices=("fail", "skip"),
        default="fail",
        help="a session that exists already: stop with an error (default) or skip it",
    )
    p.set_defaults(func=_import)

    p = add("copy", "Copy sessions between any two stores; resumable, verified at the end.")
    p.add_argument("source_url")
    p.add_argument("destination_url")
    p.add_argument("--user", help="only this user's sessions")
    p.set_defaults(func=_copy)

    p = add("rm", "Delete one session.")
    p.add_argument("url")
    p.add_argument("session_id")
    p.set_defaults(func=_rm)

    p = add("erase-user", "Delete every session of one user (asks first unless --yes).")
    p.add_argument("url")
    p.add_argument("user_id")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_erase_user)

    p = add("purge-expired", "Remove expired sessions now.")
    p.add_argument("url")
    p.set_defaults(func=_purge_expired)


def _at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least *low* (a bad one is a one-line usage error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, not {value}")
        return value

    return parse


# -- backends ---------------------------------------------------------------------------


def _backends(args: argparse.Namespace) -> int:
    """Every scheme, and every broken or conflicting plugin; exit 0 even then (the
    problems are what this command is asked to show)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an ignored claim is listed below as a problem
        specs = installed_backends()
        problems = backend_problems()
    rows = []
    for scheme, spec in sorted(specs.items()):
        try:
            capabilities: dict[str, Any] | str = dataclasses.asdict(spec.load().capabilities)
        except Exception as exc:  # the plugin is there but its manager or driver is not
            capabilities = f"cannot load: {type(exc).__name__}: {exc}"
        rows.append(
            {
                "scheme": scheme,
                "distribution": spec.distribution,
                "version": spec.version,
                "capabilities": capabilities,
            }
        )
    broken: list[dict[str, Any]] = [
        {
            "scheme": problem.scheme,
            "distributions": list(problem.distributions),
            "usable": problem.usable,
            "error": f"{type(problem.error).__name__}: {problem.error}",
        }
        for problem in problems
    ]
    if args.json:
        print(json.dumps({"backends": rows, "problems": broken}, indent=2))
        return EXIT_OK
    table = Table("scheme", "distribution", "version", "capabilities")
    for row in rows:
        caps = row["capabilities"]
        if isinstance(caps, dict):
            caps = ", ".join(
                name if value is True else f"{name}={value}"
                for name, value in caps.items()
                if value not in (False, None)
            )
        table.add_row(str(row["scheme"]), str(row["distribution"]), str(row["version"]), caps)
    console.print(table)
    if broken:
        issues = Table("scheme", "distributions", "problem", title="plugin problems")
        for item in broken:
            issues.add_row(
                str(item["scheme"]) + ("" if not item["usable"] else " (works)"),
                ", ".join(item["distributions"]),
                str(item["error"]),
            )
        console.print(issues)
    return EXIT_OK


# -- reading ----------------------------------------------------------------------------


def _connect_to_read(url: str) -> SessionManager:
    """A manager for a store that must exist already: a SQLite path that does not is a
    typo to report, not an empty database to create (and then list, export or copy)."""
    manager = connect(url)
    path = getattr(manager, "path", None)
    if (
        url.partition("://")[0].lower() == "sqlite"  # connect() accepted it as a URL
        and isinstance(path, str)
        and not getattr(manager, "in_memory", False)
        and not os.path.exists(path)
    ):
        raise CommandError(
            f"no SQLite database at {path} (from {manager.url}): nothing to read, and "
            "none was created; check the path",
            EXIT_USAGE,
        )
    return manager


def _summary_json(summary: SessionSummary) -> str:
    return json.dumps(
        {
            "session_id": summary.session_id,
            "user_id": summary.user_id,
            "created_at": summary.created_at.isoformat(),
            "updated_at": summary.updated_at.isoformat(),
            "event_count": summary.event_count,
            "version": summary.version,
        },
        ensure_ascii=False,
    )


def _ls(args: argparse.Namespace) -> int:

    async def main() -> int:
        async with _connect_to_read(args.url) as manager:
            summaries: list[SessionSummary] = []
            cursor: str | None = None
            while len(summaries) < args.limit:
                page = await manager.list_sessions(
                    user_id=args.user, limit=min(100, args.limit - len(summaries)), cursor=cursor
                )
                summaries.extend(page.items)
                if page.next_cursor is None:
                    break
                cursor = page.next_cursor
        if args.json:
            for summary in summaries:
                print(_summary_json(summary))
            return EXIT_OK
        table = Table(box=box.SIMPLE_HEAD)
        table.add_column("session", min_width=7, overflow="fold")  # ids are never cut
        table.add_column("user", min_width=4, overflow="fold")
        for name in ("created", "updated", "events", "version"):
            table.add_column(name, no_wrap=True)  # timestamps stay on one line
        for s in summaries:
            table.add_row(
                s.session_id,
                s.user_id or "",
                _when(s.created_at),
                _when(s.updated_at),
                str(s.event_count),
                str(s.version),
            )
        console.print(table)
        if cursor is not None and len(summaries) >= args.limit:
            err_console.print(f"(showing the newest {args.limit}; use --limit for more)")
        return EXIT_OK

    return run(main)


def _when(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%d %H:%M:%S"))


def _show(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with _connect_to_read(args.url) as manager:
            session = await manager.get(args.session_id, last_events=args.last)
        if session is None:
            raise CommandError(f"session {args.session_id!r} does not exist")
        if args.json:
            print(session.model_dump_json(indent=2))
            return EXIT_OK
        owner = f" (user {session.user_id})" if session.user_id else ""
        console.print(f"[bold]{session.session_id}[/bold]{owner}", markup=True)
        console.print(
            f"version {session.version}, created {_when(session.created_at)}, "
            f"updated {_when(session.updated_at)}, "
            f"{session.first_event_position + len(session.events)} events"
        )
        table = Table("#", "time", "author", "content", expand=True)
        for offset, event in enumerate(session.events):
            content = event.content
            text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
            table.add_row(
                str(session.first_event_position + offset),
                _when(event.timestamp),
                event.author,
                text,
            )
        console.print(table)
        console.print("state: " + json.dumps(session.state, ensure_ascii=False, indent=2))
        return EXIT_OK

    return run(main)


# -- export and import ------------------------------------------------------------------


@contextlib.contextmanager
def _atomic_output(path: str | None) -> Iterator[IO[str]]:
    """Standard output, or a file that appears only once it is written whole."""
    if path is None or path == "-":
        yield sys.stdout
        return
    target = Path(path)
    if target.is_dir():
        raise CommandError(f"-o {path}: is a directory; give the file to write", EXIT_USAGE)
    if not target.parent.is_dir():
        raise CommandError(f"-o {path}: directory {target.parent} does not exist", EXIT_USAGE)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise CommandError(f"-o {path}: cannot write there: {exc.strerror}", EXIT_USAGE) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            yield handle
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _export(args: argparse.Namespace) -> int:
    async def main() -> int:
        count = 0
        async with _connect_to_read(args.url) as manager:
            total = await _count(manager, args.user)
            with _atomic_output(args.output) as out, _progress("exporting", total) as advance:
                async for batch in iter_batches(manager, user_id=args.user):
                    for session in batch:
                        out.write(session.model_dump_json())
                        out.write("\n")
                    count += len(batch)
                    advance(len(batch))
        where = "" if args.output in (None, "-") else f" to {args.output}"
        err_console.print(f"exported {count} sessions{where}")
        return EXIT_OK

    return run(main)


def _read_export(handle: IO[str], name: str) -> Iterator[tuple[int, Session]]:
    """Each session of an export with its line number; the first bad line is a usage error
    naming the file, the line and what is wrong with it."""
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            session = Session.model_validate_json(line)
            check_restorable(session)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "line"
            raise CommandError(f"{name}:{number}: {where}: {first['msg']}", EXIT_USAGE) from None
        except (InvalidInputError, SessionSerializationError, PartialSessionError) as exc:
            raise CommandError(f"{name}:{number}: {exc}", EXIT_USAGE) from None
        yield number, session


@contextlib.contextmanager
def _import_source(path: str) -> Iterator[tuple[IO[str], str, int]]:
    """The export to import, validated whole: (handle at its start, name, sessions).

    Standard input is spooled to a temporary file first, so that a pipe behaves exactly
    like a file: a bad line anywhere stops the import before anything is written.
    """
    with contextlib.ExitStack() as stack:
        if path == "-":
            name = "<stdin>"
            handle: IO[str] = stack.enter_context(tempfile.TemporaryFile("w+", encoding="utf-8"))
            for line in sys.stdin:
                handle.write(line)
            handle.seek(0)
        else:
            name = path
            handle = stack.enter_context(open(path, encoding="utf-8"))
        total = sum(1 for _ in _read_export(handle, name))
        handle.seek(0)
        yield handle, name, total


def _import(args: argparse.Namespace) -> int:
    async def main() -> int:
        counts: Counter[str] = Counter()
        with _import_source(args.file) as (handle, name, total):
            async with connect(args.url) as manager:
                with _progress("importing", total) as advance, _resumable(counts, "imported"):
                    for batch in _batches(_read_export(handle, name), _BATCH):
                        outcomes = await transfer_many(manager, [s for _, s in batch])
                        taken: list[tuple[int, str]] = []
                        for (number, session), outcome in zip(batch, outcomes, strict=True):
                            if outcome is Outcome.CREATED:
                                counts["created"] += 1
                            elif args.on_exists == "skip":
                                counts["skipped"] += 1
                            else:
                                taken.append((number, session.session_id))
                        advance(len(batch))
                        if taken:
                            number, session_id = taken[0]
                            raise CommandError(
                                f"{name}:{number}: session {session_id!r} already exists "
                                f"(use --on-exists skip to skip it); {len(taken)} of the "
                                f"sessions up to line {batch[-1][0]} exist already; "
                                + _summary(counts, "imported")
                            )
        err_console.print(_summary(counts, "imported"))
        return EXIT_OK

    return run(main)


def _summary(counts: Counter[str], verb: str) -> str:
    parts = [f"{counts[key]} {key}" for key in counts if counts[key]]
    return f"{verb}: " + (", ".join(parts) or "nothing")


# -- copy -------------------------------------------------------------------------------


def _copy(args: argparse.Namespace) -> int:
    async def main() -> int:
        counts: Counter[str] = Counter()
        differing: list[str] = []
        async with (
            _connect_to_read(args.source_url) as source,
            connect(args.destination_url) as target,
        ):
            total = await _count(source, args.user)
            with _progress("copying", total) as advance, _resumable(counts, "copied"):
                async for batch in iter_batches(source, user_id=args.user):
                    outcomes = await transfer_many(target, batch)
                    for session, outcome in zip(batch, outcomes, strict=True):
                        counts[outcome.value] += 1
                        if outcome is Outcome.DIFFERS:
                            differing.append(session.session_id)
                    advance(len(batch))
            with _progress("verifying", total) as advance:
                mismatches = await _verify(source, target, args.user, advance)
        err_console.print(_summary(counts, "copied"))
        if differing:
            err_console.print(
                f"{len(differing)} sessions exist in the destination with other content "
                f"and were left untouched: {', '.join(differing[:10])}"
            )
        if mismatches:
            raise CommandError(f"verification failed: {mismatches}")
        err_console.print(
            "verified: every source session is in the destination, identical in "
            + ", ".join(PRESERVED_FIELDS)
        )
        return EXIT_FAILED if differing else EXIT_OK

    return run(main)


async def _count(manager: SessionManager, user_id: str | None) -> int:
    total, cursor = 0, None
    while True:
        page = await manager.list_sessions(user_id=user_id, limit=1000, cursor=cursor)
        total += len(page.items)
        if page.next_cursor is None:
            return total
        cursor = page.next_cursor


async def _verify(
    source: SessionManager,
    target: SessionManager,
    user_id: str | None,
    advance: Callable[[int], None],
) -> str:
    """Compare every preserved field of every source session with its copy."""
    checked = missing = 0
    fields: Counter[str] = Counter()
    async for batch in iter_batches(source, user_id=user_id):
        copies = await asyncio.gather(*(target.get(s.session_id) for s in batch))
        for session, copy in zip(batch, copies, strict=True):
            checked += 1
            if copy is None:
                missing += 1
            else:
                fields.update(differences(session, copy))
        advance(len(batch))
    different = ", ".join(f"{count} in {name}" for name, count in sorted(fields.items()))
    if missing or different:
        return f"of {checked} sessions, {missing} missing" + (
            f"; differences: {different}" if different else ""
        )
    return ""


# -- progress and interruption -------------------------------------------------------------

_BATCH = 100
T = TypeVar("T")


def _batches(items: Iterable[T], size: int) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class _RateColumn(ProgressColumn):
    """Sessions per second, as rich measures it over the last moments."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.0f}/s")


@contextlib.contextmanager
def _progress(label: str, total: int) -> Iterator[Callable[[int], None]]:
    """A progress bar with count, rate and time left on a terminal; silent otherwise."""
    with Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as progress:
        task = progress.add_task(label, total=total)
        yield lambda count: progress.advance(task, count)


@contextlib.contextmanager
def _resumable(counts: Counter[str], done: str) -> Iterator[None]:
    """On Ctrl-C, say what was written and how to resume (each session is atomic)."""
    try:
        yield
    except (KeyboardInterrupt, asyncio.CancelledError):
        raise CommandError(
            f"interrupted; {_summary(counts, done)}. Every session is written whole or "
            "not at all: run the same command again to resume"
            + (" with --on-exists skip" if done == "imported" else ""),
            EXIT_INTERRUPTED,
        ) from None


# -- deleting ---------------------------------------------------------------------------


def _rm(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            if not await manager.delete(args.session_id):
                raise CommandError(f"session {args.session_id!r} does not exist")
        err_console.print(f"deleted {args.session_id}")
        return EXIT_OK

    return run(main)


def _erase_user(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            if not args.yes:
                count = await _count(manager, args.user_id)
                if not _confirm(f"Erase all {count} sessions of user {args.user_id!r}?"):
                    err_console.print("nothing erased")
                    return EXIT_FAILED
            erased = await manager.delete_user(args.user_id)
        err_console.print(f"erased {erased} sessions of user {args.user_id}")
        return EXIT_OK

    return run(main)


def _confirm(question: str) -> bool:
    if not sys.stdin.isatty():
        raise CommandError("refusing to erase without --yes when not on a terminal", EXIT_USAGE)
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")


def _purge_expired(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            removed = await manager.purge_expired()
        err_console.print(f"purged {removed} expired sessions")
        return EXIT_OK

    return run(main)
