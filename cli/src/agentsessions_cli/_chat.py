"""``agentsessions chat`` (one turn with the demo agent) and ``agentsessions demo``.

``chat`` is deliberately one turn per process: running it twice with one
``--session`` shows that the conversation lives in the store, not in a process.
``demo`` proves exactly that by running every turn of a scripted conversation as a
separate ``python -m agentsessions_cli chat`` process, pause for approval included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import shlex
import sys
from dataclasses import dataclass
from typing import Any

from agentsessions import Session, connect, mask_url
from agentsessions.runtime import RunResult
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ._common import EXIT_CODES_HELP, EXIT_USAGE, CommandError, console, run
from ._demo import DemoAgent

__all__ = ["DEFAULT_URL", "register"]

#: A file in the working directory, so a conversation can be continued by hand later.
DEFAULT_URL = "sqlite:///agentsessions.db"
DEMO_USER = "ada"
NO_SESSION_NOTE = "(no --session given: this run is independent and nothing was stored)"
_CHILD_TIMEOUT = 120.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chat = subparsers.add_parser(
        "chat",
        help="Send one message to the demo agent and print its reply.",
        description=(
            "Send one message to the deterministic demo agent and print its reply. "
            "With --session the conversation is loaded from and saved to the store at "
            "--url, so a later run (another process) continues it; without, the run is "
            "independent and nothing is stored. Reply 'approve' or 'deny' when the "
            "agent asks for approval."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chat.add_argument(
        "--url", default=DEFAULT_URL, help=f"where sessions are stored (default: {DEFAULT_URL})"
    )
    chat.add_argument("--session", metavar="ID", help="the conversation to continue or start")
    chat.add_argument("--user", metavar="ID", help="the user who owns the session")
    chat.add_argument(
        "--json", action="store_true", help="print the result as one JSON object (for scripts)"
    )
    chat.add_argument("message", nargs="+", metavar="MESSAGE", help="what you say")
    chat.set_defaults(func=_chat)

    demo = subparsers.add_parser(
        "demo",
        help="Play a scripted conversation, each turn in a new process.",
        description=(
            "Play a short scripted conversation with the demo agent, every turn a "
            "separate 'agentsessions chat' process on one session, including a pause "
            "for approval and its resumption; then show the stored session."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument(
        "--url", default=DEFAULT_URL, help=f"where sessions are stored (default: {DEFAULT_URL})"
    )
    demo.set_defaults(func=_demo)


# -- chat ---------------------------------------------------------------------------------


def _chat(args: argparse.Namespace) -> int:
    return run(lambda: _chat_turn(args))


async def _chat_turn(args: argparse.Namespace) -> int:
    message = " ".join(args.message)
    manager = connect(args.url)
    try:
        # The manager connects on first use, so a run without --session never even
        # creates the database file.
        result = await DemoAgent(manager).run(message, session_id=args.session, user_id=args.user)
    finally:
        await manager.close()
    if args.json:
        sys.stdout.write(json.dumps(_as_json(result, args.user)) + "\n")
        return 0
    # soft_wrap: a piped reply stays one line, whatever the console's width.
    console.print(result.reply or "", markup=False, soft_wrap=True)
    if not result.stored:
        console.print(NO_SESSION_NOTE, style="dim", markup=False, soft_wrap=True)
    return 0


def _as_json(result: RunResult, user_id: str | None) -> dict[str, Any]:
    return {
        "reply": result.reply,
        "status": result.status,
        "session_id": result.session_id,
        "user_id": user_id,
        "stored": result.stored,
        "version": result.version,
        "event_count": result.event_count,
        "pending": [call.model_dump(mode="json") for call in result.pending],
        "pid": os.getpid(),
    }


# -- demo ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Turn:
    message: str
    expect: str  # a phrase the reply must contain, so a broken store fails the demo loudly
    caption: str = ""


_SCRIPT = (
    _Turn("Hi, I'm Ada!", "Ada"),
    _Turn("I like green tea and long walks.", "green tea"),
    _Turn("Remember that my cat is called Tom.", "Tom"),
    _Turn("What's my name?", "Your name is Ada.", "recalled from the stored events"),
    _Turn(
        "Send a note to Bob saying the cat is fine",
        "I need your approval",
        "paused: the pending call is stored in the session",
    ),
    _Turn("What do you remember about me?", "your cat is called Tom"),
    _Turn("approve", "Done: I sent a note to Bob", "resumed in a new process and executed"),
)


def _demo(args: argparse.Namespace) -> int:
    return run(lambda: _play(args.url))


async def _play(url: str) -> int:
    manager = connect(url)  # an unknown scheme or bad option fails here, before any process
    if not manager.capabilities.persistent:
        raise CommandError(
            f"the demo runs every turn in a separate process, so it needs a store that "
            f"outlives a process; {mask_url(url)} does not (try {DEFAULT_URL})",
            EXIT_USAGE,
        )
    out = Console(highlight=False)
    session_id = "demo-" + secrets.token_hex(4)
    out.print(Text("agentsessions demo", style="bold"))
    out.print(
        Text.assemble(
            "Session ",
            (session_id, "cyan"),
            " of user ",
            (DEMO_USER, "cyan"),
            " stored at ",
            (manager.url, "cyan"),
            ". Every turn below is a separate 'agentsessions chat' process: what the "
            "agent knows comes from the store.",
        )
    )
    for number, turn in enumerate(_SCRIPT, start=1):
        result = await _run_child(url, session_id, turn.message)
        _show_turn(out, number, turn, result)
        reply = str(result.get("reply") or "")
        if turn.expect not in reply:
            raise CommandError(
                f"turn {number}: expected the reply to contain {turn.expect!r}, got {reply!r}"
            )
    async with manager:
        session = await manager.get(session_id)
    if session is None:
        raise CommandError(f"session {session_id!r} is not in the store after the demo")
    _show_session(out, session, url)
    return 0


async def _run_child(url: str, session_id: str, message: str) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "agentsessions_cli", "chat", "--json",
        "--url", url, "--session", session_id, "--user", DEMO_USER, "--", message,
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        stdout, stderr = await asyncio.wait_for(process.communicate(), _CHILD_TIMEOUT)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        raise CommandError(
            f"'agentsessions chat' did not answer within {_CHILD_TIMEOUT:g}s"
        ) from None
    if process.returncode != 0:
        lines = stderr.decode(errors="replace").strip().splitlines()
        detail = lines[-1] if lines else f"exit code {process.returncode}"
        raise CommandError(f"the chat process failed: {detail}", process.returncode or 1)
    try:
        data: dict[str, Any] = json.loads(stdout)
    except ValueError:
        raise CommandError(f"the chat process printed no result: {stdout[:200]!r}") from None
    return data


def _show_turn(out: Console, number: int, turn: _Turn, result: dict[str, Any]) -> None:
    out.print()
    heading = Text.assemble(
        (f"Run {number}", "bold"),
        (f"  process {result.get('pid')}, session version {result.get('version')}", "dim"),
    )
    if turn.caption:
        heading.append(f"  ({turn.caption})", style="green")
    out.print(heading)
    grid = Table.grid(padding=(0, 1))
    grid.add_column(justify="right", no_wrap=True)
    grid.add_column()
    grid.add_row(Text("you:", style="bold blue"), Text(turn.message))
    grid.add_row(Text("agent:", style="bold magenta"), Text(str(result.get("reply") or "")))
    for call in result.get("pending") or []:
        grid.add_row(
            Text(""),
            Text(f"(waiting for approval: {call.get('tool')}, call {call.get('id')})", "yellow"),
        )
    out.print(grid)


def _show_session(out: Console, session: Session, url: str) -> None:
    out.print()
    out.print(
        Text.assemble(
            ("Stored session ", "bold"),
            (session.session_id, "bold cyan"),
            f": {len(session.events)} events, version {session.version}, "
            f"user {session.user_id}, state keys: {', '.join(session.state) or 'none'}",
        )
    )
    table = Table(show_edge=False, pad_edge=False, box=None, header_style="bold")
    table.add_column("#", justify="right")
    table.add_column("author")
    table.add_column("kind")
    table.add_column("content", overflow="fold")
    for position, event in enumerate(session.events):
        content = event.content if isinstance(event.content, str) else json.dumps(event.content)
        table.add_row(
            str(position), event.author, str(event.metadata.get("kind", "")), content or ""
        )
    out.print(table)
    out.print()
    parts = ["agentsessions", "chat"]
    if url != DEFAULT_URL:
        parts += ["--url", mask_url(url)]
    parts += ["--session", session.session_id, "--user", DEMO_USER, "What do I like?"]
    out.print("Continue the conversation by hand:")
    out.print(Text("  " + shlex.join(parts), style="bold"))
