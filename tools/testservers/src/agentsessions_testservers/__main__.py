"""``python -m agentsessions_testservers [KIND ...]``: start servers, print URLs, wait.

For CI and benchmarks. From the repository root::

    python -m agentsessions_testservers redis-cluster mongo --env-file /tmp/servers.env &
    # wait for /tmp/servers.env to appear, then:  . /tmp/servers.env

Prints ``export NAME=URL`` lines on stdout once every requested server answers (and
writes them to ``--env-file`` atomically, so its appearance means "ready"). Stops every
server it started on SIGTERM/SIGINT/SIGHUP and removes the env file; exits 1 if a
server dies on its own, 2 if one cannot be started.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

from ._find import ENV_VARS, KINDS, Kind, find, started_server, stop_all
from ._process import ServerUnavailable


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m agentsessions_testservers",
        description="Start test database servers and print their URLs as export lines.",
    )
    parser.add_argument(
        "kinds", nargs="*", metavar="KIND", help=f"any of {', '.join(KINDS)} (default: all)"
    )
    parser.add_argument("--env-file", type=Path, help="also write the export lines here")
    args = parser.parse_args(argv)
    unknown = [kind for kind in args.kinds if kind not in KINDS]
    if unknown:
        parser.error(f"unknown kind(s) {', '.join(unknown)}; choose from {', '.join(KINDS)}")
    return args


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = _parse(argv)
    kinds: list[Kind] = list(dict.fromkeys(args.kinds or KINDS))
    env_file: Path | None = args.env_file
    stop = threading.Event()
    ready = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not ready:  # still starting: abort startup; finally below cleans up
            raise KeyboardInterrupt
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    try:
        try:
            urls = {kind: find(kind) for kind in kinds}
        except ServerUnavailable as exc:
            print(f"agentsessions_testservers: {exc}", file=sys.stderr)
            return 2
        lines = "".join(f"export {ENV_VARS[k]}={shlex.quote(u)}\n" for k, u in urls.items())
        if env_file is not None:
            _write_atomically(env_file, lines)
        sys.stdout.write(lines)
        sys.stdout.flush()
        ready = True
        while not stop.wait(1.0):
            for kind in kinds:
                server = started_server(kind)
                if server is not None and not server.is_running():
                    print(
                        f"agentsessions_testservers: the {kind} server died unexpectedly",
                        file=sys.stderr,
                    )
                    return 1
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        stop_all()
        if env_file is not None and ready:
            env_file.unlink(missing_ok=True)


if __name__ == "__main__":
    sys.exit(main())
