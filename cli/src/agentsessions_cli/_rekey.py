"""``agentsessions rekey URL``: every session re-encrypted under the current key, live."""

from __future__ import annotations

import argparse
import asyncio

from ._common import (
    EXIT_CODES_HELP,
    EXIT_INTERRUPTED,
    EXIT_OK,
    CommandError,
    connect,
    err_console,
    keyring_from_env,
    run,
)
from ._ops import _count, _progress

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    help_text = (
        "Re-encrypt every session under the current key (the first of "
        "AGENTSESSIONS_ENCRYPTION_KEYS), while the service runs; resumable."
    )
    p = subparsers.add_parser(
        "rekey",
        help=help_text,
        description=help_text
        + " Saves racing it win and the session is read again, so none is lost.",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url")
    p.add_argument(
        "--accept-plaintext",
        action="store_true",
        help="also encrypt events and states stored unencrypted (a store written before "
        "encryption was turned on)",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="sessions re-encrypted at once (default 8)",
    )
    p.set_defaults(func=_rekey)


def _rekey(args: argparse.Namespace) -> int:
    from agentsessions.encryption import RekeyProgress, rekey

    async def main() -> int:
        keyring = keyring_from_env(required=True, accept_plaintext=args.accept_plaintext)
        assert keyring is not None
        last = RekeyProgress(0, 0, 0, 0, 0)
        async with connect(args.url, keyring=keyring) as manager:
            total = await _count(manager, None)
            with _progress("re-encrypting", total) as advance:

                def report(progress: RekeyProgress) -> None:
                    nonlocal last
                    last = progress
                    advance(1)

                try:
                    last = await rekey(
                        manager, concurrency=max(1, args.concurrency), progress=report
                    )
                except (KeyboardInterrupt, asyncio.CancelledError):
                    raise CommandError(
                        f"interrupted after {last.done} of {last.total} sessions "
                        f"({last.rekeyed} rekeyed); run the same command again to resume",
                        EXIT_INTERRUPTED,
                    ) from None
        err_console.print(
            f"{last.rekeyed} sessions re-encrypted under key {keyring.current!r}, "
            f"{last.current} already were, {last.vanished} deleted meanwhile "
            f"({last.done} in all)",
            markup=False,
        )
        return EXIT_OK

    return run(main)
