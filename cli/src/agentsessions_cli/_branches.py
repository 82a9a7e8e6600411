"""The branching verbs: fork a session at an event, rewind one, and show its fork tree."""

from __future__ import annotations

import argparse
import json

from agentsessions import SessionManager, SessionSummary
from rich.text import Text
from rich.tree import Tree

from ._common import EXIT_CODES_HELP, EXIT_OK, CommandError, connect, console, err_console, run

__all__ = ["register"]

#: The most sessions `branches` walks (the tree is read page by page, level by level).
MAX_BRANCHES = 10_000
#: The deepest fork of a fork `branches` follows.
MAX_DEPTH = 100
#: The newest events `rewind` loads first, looking for its cut.
_TAIL = 256


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    def add(name: str, help_text: str) -> argparse.ArgumentParser:
        return subparsers.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    p = add(
        "fork",
        "Create NEW from SRC's events up to --at (default: all) and its state; never overwrites.",
    )
    p.add_argument("url")
    p.add_argument("source_id")
    p.add_argument("new_id")
    p.add_argument("--at", metavar="EVENT", help="the id of the last event the fork keeps")
    p.set_defaults(func=_fork)

    p = add("rewind", "Drop every event of a session after EVENT (the rest stays).")
    p.add_argument("url")
    p.add_argument("session_id")
    p.add_argument("event_id", help="the id of the last event kept")
    p.add_argument("--archive", action="store_true", help="keep what is dropped in the archive")
    p.set_defaults(func=_rewind)

    p = add("branches", "Show the fork tree of a session: its forks, theirs, and so on.")
    p.add_argument("url")
    p.add_argument("session_id")
    p.add_argument("--json", action="store_true", help="one JSON object per fork, parents first")
    p.set_defaults(func=_branches)


def _fork(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            summary = await manager.fork(args.source_id, args.new_id, through_event_id=args.at)
        where = f"through event {args.at}" if args.at else "whole"
        err_console.print(
            f"forked {args.source_id} ({where}) into {summary.session_id}: "
            f"{summary.event_count} events",
            markup=False,
            highlight=False,
        )
        return EXIT_OK

    return run(main)


def _rewind(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            # A rewind needs only the events from the cut on: the newest ones first, the
            # whole history only when the cut is older.
            session = await manager.get(args.session_id, last_events=_TAIL)
            if session is not None and all(e.id != args.event_id for e in session.events):
                session = await manager.get(args.session_id)
            if session is None:
                raise CommandError(f"session {args.session_id!r} does not exist")
            before = len(session.events)
            await manager.rewind(session, args.event_id, archive=args.archive)
        dropped = before - len(session.events)
        err_console.print(
            f"rewound {args.session_id} to event {args.event_id}: {dropped} events dropped"
            + (" (archived)" if args.archive and dropped else ""),
            markup=False,
            highlight=False,
        )
        return EXIT_OK

    return run(main)


async def _forks_of(manager: SessionManager, session_id: str) -> list[SessionSummary]:
    found: list[SessionSummary] = []
    cursor: str | None = None
    for _ in range(MAX_BRANCHES):
        page = await manager.list_sessions(forked_from=session_id, limit=1000, cursor=cursor)
        found.extend(page.items)
        if page.next_cursor is None or len(found) >= MAX_BRANCHES:
            return found
        cursor = page.next_cursor
    return found


def _label(summary: SessionSummary) -> str:
    origin = summary.forked_from
    cut = "" if origin is None or origin.event_id is None else f" at {origin.event_id}"
    version = "" if origin is None else f" (from v{origin.version}{cut})"
    return f"{summary.session_id}: {summary.event_count} events{version}"


def _json(summary: SessionSummary, parent: str) -> str:
    origin = summary.forked_from
    return json.dumps(
        {
            "session_id": summary.session_id,
            "forked_from": parent,
            "source_version": None if origin is None else origin.version,
            "event_id": None if origin is None else origin.event_id,
            "event_count": summary.event_count,
            "version": summary.version,
            "created_at": summary.created_at.isoformat(),
        },
        ensure_ascii=False,
    )


def _branches(args: argparse.Namespace) -> int:
    async def main() -> int:
        async with connect(args.url) as manager:
            root = await manager.get(args.session_id, last_events=0)
            if root is None:
                raise CommandError(f"session {args.session_id!r} does not exist")
            tree = Tree(Text(root.session_id), highlight=False)
            level: list[tuple[str, Tree]] = [(root.session_id, tree)]
            lines: list[str] = []
            seen = {root.session_id}
            for _ in range(MAX_DEPTH):
                following: list[tuple[str, Tree]] = []
                for parent, node in level:
                    for fork in await _forks_of(manager, parent):
                        if fork.session_id in seen or len(seen) >= MAX_BRANCHES:
                            continue
                        seen.add(fork.session_id)
                        lines.append(_json(fork, parent))
                        following.append((fork.session_id, node.add(Text(_label(fork)))))
                if not following:
                    break
                level = following
        if args.json:
            for line in lines:
                print(line)
        else:
            console.print(tree)
        return EXIT_OK

    return run(main)
