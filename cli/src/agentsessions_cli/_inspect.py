"""The ``inspect`` verb: serve the inspector web app (`_inspect_app`) on loopback."""

from __future__ import annotations

import argparse
import asyncio
import secrets
import socket
import sys

from ._common import EXIT_OK, EXIT_USAGE, CommandError, connect, err_console, keyring_from_env, run

__all__ = ["register"]

HOST = "127.0.0.1"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ._common import EXIT_CODES_HELP

    help_text = "Browse a store's sessions in a local web page (read-only unless --allow-writes)."
    p = subparsers.add_parser(
        "inspect",
        help=help_text,
        description=help_text
        + " Binds 127.0.0.1 only; the address printed holds a random access token. "
        "Needs the inspect extra: pip install 'agentsessions-cli[inspect]'.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url")
    p.add_argument(
        "--port", type=_port, default=0, help="port to listen on (default: any free port)"
    )
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="offer delete, rewind and fork (each confirmed); without it nothing is written",
    )
    p.set_defaults(func=_inspect)


def _port(text: str) -> int:
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


def _inspect(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ._inspect_app import create_app
    except ImportError as exc:
        raise CommandError(
            f"inspect needs the inspect extra ({exc.name} is missing): "
            "pip install 'agentsessions-cli[inspect]'",
            EXIT_USAGE,
        ) from None
    from ._ops import _connect_to_read

    keyring = keyring_from_env()

    async def check() -> int:
        # Fail here, with the command's exit codes, rather than inside the server.
        async with _connect_to_read(args.url) as manager:
            await manager.list_sessions(limit=1)
        return EXIT_OK

    code = run(check)
    if code != EXIT_OK:
        return code
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, args.port))
    except OSError as exc:
        sock.close()
        raise CommandError(
            f"cannot listen on {HOST}:{args.port}: {exc.strerror}", EXIT_USAGE
        ) from None
    # Listening before the address is printed: a browser opened at once waits in the
    # backlog until the server accepts, instead of being refused.
    sock.listen(128)
    port = sock.getsockname()[1]
    token = secrets.token_urlsafe(24)
    app = create_app(
        lambda: connect(args.url, keyring=keyring),
        token=token,
        allow_writes=args.allow_writes,
        allowed_hosts={f"{HOST}:{port}", f"localhost:{port}"},
        keyring_given=keyring is not None,
    )
    # The address is the credential: it goes to the terminal, never to a log.
    print(f"http://{HOST}:{port}/?token={token}", flush=True)
    err_console.print(
        ("writes allowed (delete, rewind, fork)" if args.allow_writes else "read-only")
        + "; Ctrl-C stops"
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    try:
        asyncio.run(server.serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    sys.stdout.flush()
    return EXIT_OK
