"""SecantusDB, a MongoDB-wire-compatible server written in Python, as the test MongoDB.

It is pip-installable (no Docker, no mongod download), so the suite can always have a
MongoDB peer. It lives in its OWN virtual environment in a cache directory, never in
the project's environment: its pinned dependencies (its own pymongo, numpy, shapely,
...) must not leak into what the backend is tested with.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import struct
import sys
import time
from pathlib import Path

from ._process import (
    LOOPBACK,
    ManagedServer,
    Process,
    ProcessServer,
    ServerUnavailable,
    free_port,
    make_workdir,
    run_checked,
    start_with_port_retry,
)

__all__ = [
    "SECANTUS_SPEC",
    "ensure_secantus",
    "mongo_pings",
    "secantus_venv_dir",
    "start_mongo",
]

SECANTUS_SPEC = "secantusdb==0.7.0b3"
"""Exact pin: a beta whose behaviour the findings in README.md were checked against."""

DATABASE = "agentsessions_test"
_INSTALL_TIMEOUT = 900.0
_MARKER = ".agentsessions-installed"
_OP_MSG = 2013


def cache_dir() -> Path:
    """``$AGENTSESSIONS_CACHE_DIR``, else ``$XDG_CACHE_HOME/agentsessions``, else ~/.cache."""
    explicit = os.environ.get("AGENTSESSIONS_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "agentsessions"


def secantus_venv_dir() -> Path:
    """Where the SecantusDB virtual environment lives (one per pinned version)."""
    return cache_dir() / SECANTUS_SPEC.replace("==", "-")


def _installed(venv: Path) -> bool:
    marker = venv / _MARKER
    try:
        pinned = marker.read_text(encoding="utf-8").strip() == SECANTUS_SPEC
    except OSError:
        return False
    # The interpreter symlink dangles if the base Python it was made from went away.
    return (
        pinned and (venv / "bin" / "python").exists() and (venv / "bin" / "secantusd-py").exists()
    )


def _isolated_env(**extra: str) -> dict[str, str]:
    """Our environment minus what would point SecantusDB's Python at the project's venv."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _install(venv: Path, log_path: Path) -> None:
    """Create the venv and install the pinned package: uv if available, else venv + pip."""
    shutil.rmtree(venv, ignore_errors=True)  # a half-made venv from an interrupted run
    env = _isolated_env(UV_PYTHON_DOWNLOADS="never")
    uv = shutil.which("uv")
    python = venv / "bin" / "python"
    if uv is not None:
        steps = [
            [uv, "venv", "--quiet", "--python", sys.executable, str(venv)],
            [uv, "pip", "install", "--quiet", "--python", str(python), SECANTUS_SPEC],
        ]
    else:
        steps = [
            [sys.executable, "-m", "venv", str(venv)],
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SECANTUS_SPEC,
            ],
        ]
    for argv in steps:
        run_checked(
            argv,
            log_path=log_path,
            what=f"installing {SECANTUS_SPEC} ({Path(argv[0]).name} {argv[1]})",
            timeout=_INSTALL_TIMEOUT,
            env=env,
        )
    (venv / _MARKER).write_text(SECANTUS_SPEC + "\n", encoding="utf-8")


def ensure_secantus() -> Path:
    """Return the ``secantusd-py`` executable, installing SecantusDB once if needed.

    Concurrent callers (pytest-xdist workers, parallel CI jobs) serialize on an fcntl
    lock; the marker file is written last, so a venv without it is known to be partial
    and is rebuilt.
    """
    venv = secantus_venv_dir()
    executable = venv / "bin" / "secantusd-py"
    if _installed(venv):
        return executable
    venv.parent.mkdir(parents=True, exist_ok=True)
    lock_path = venv.parent / f"{venv.name}.lock"
    log_path = venv.parent / f"{venv.name}.install.log"
    with lock_path.open("a") as lock:
        deadline = time.monotonic() + _INSTALL_TIMEOUT
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServerUnavailable(
                        f"timed out waiting for another process installing {SECANTUS_SPEC} "
                        f"(lock {lock_path})"
                    ) from None
                time.sleep(0.5)
        try:
            if not _installed(venv):  # another process may have finished meanwhile
                _install(venv, log_path)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return executable


def _bson_ping() -> bytes:
    """BSON for ``{"ping": 1, "$db": "admin"}`` (int32 and string elements only)."""
    body = b"\x10ping\x00" + struct.pack("<i", 1)
    body += b"\x02$db\x00" + struct.pack("<i", len(b"admin") + 1) + b"admin\x00"
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def _recv_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("connection closed")
        data += chunk
    return data


def mongo_pings(port: int, host: str = LOOPBACK, timeout: float = 2.0) -> bool:
    """Whether a MongoDB-wire server on host:port answers ``ping`` with ``ok: 1``.

    Hand-rolled OP_MSG so the check needs no pymongo (which would spin up monitor
    threads per probe) and works the same for SecantusDB and a real mongod.
    """
    sections = struct.pack("<I", 0) + b"\x00" + _bson_ping()  # flagBits, kind-0 body
    message = struct.pack("<iiii", 16 + len(sections), 1, 0, _OP_MSG) + sections
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(message)
            length, _, _, opcode = struct.unpack("<iiii", _recv_exact(sock, 16))
            reply = _recv_exact(sock, length - 16)
    except OSError:
        return False
    ok_double = b"\x01ok\x00" + struct.pack("<d", 1.0)
    ok_int = b"\x10ok\x00" + struct.pack("<i", 1)
    return opcode == _OP_MSG and (ok_double in reply or ok_int in reply)


def _build(executable: Path, persistent: bool, start_timeout: float) -> ProcessServer:
    workdir = make_workdir("mongo")
    port = free_port()
    config = workdir / "secantusd.toml"
    config.write_text("# empty: keeps secantusd from auto-discovering other configs\n")
    storage = str(workdir / "data") if persistent else ":memory:"
    process = Process(
        name="secantusd-py",
        port=port,
        argv=[
            str(executable),
            "--config",
            str(config),
            "--host",
            LOOPBACK,
            "--port",
            str(port),
            "--storage-path",
            storage,
        ],
        log_path=workdir / "server.log",
        ready=lambda: mongo_pings(port),
        cwd=workdir,
        # ":memory:" makes a temp dir; keep it inside ours so a SIGKILL leaks nothing.
        env=_isolated_env(TMPDIR=str(workdir)),
    )
    return ProcessServer(
        kind="mongo",
        url=f"mongodb://{LOOPBACK}:{port}/{DATABASE}",
        workdir=workdir,
        processes=[process],
        start_timeout=start_timeout,
    )


def start_mongo(*, persistent: bool = False, start_timeout: float = 30.0) -> ManagedServer:
    """Start SecantusDB on a free loopback port and return it running.

    By default storage is ``:memory:``, so a restart comes back empty; with
    ``persistent=True`` data lives in the server's temp dir and survives restarts.
    The first call may spend a while installing SecantusDB into its cache venv.
    """
    executable = ensure_secantus()
    return start_with_port_retry(lambda: _build(executable, persistent, start_timeout))
