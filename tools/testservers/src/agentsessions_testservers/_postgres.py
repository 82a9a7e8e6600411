"""A private, throw-away PostgreSQL cluster (initdb in a temp dir, postgres as a child).

Why not the machine's own server on 5432: tests must not depend on (or damage) whatever
runs there, and a private server can be stopped and restarted by a test.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import struct
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

__all__ = ["find_postgres_bindir", "pg_accepts_connections", "start_postgres"]

_PG_USER = "postgres"  # database superuser name, and the OS user when we are root
_PROTOCOL_3_0 = 196608


def find_postgres_bindir() -> Path:
    """Directory holding ``initdb`` and ``postgres``: PATH first, then Debian's layout.

    Debian/Ubuntu keep the server binaries in /usr/lib/postgresql/<major>/bin, off PATH;
    the newest major version wins there.
    """
    candidates: list[Path] = []
    initdb = shutil.which("initdb")
    if initdb is not None:
        candidates.append(Path(initdb).resolve().parent)
        candidates.append(Path(initdb).parent)
    versioned = glob.glob("/usr/lib/postgresql/*/bin")
    versioned.sort(key=lambda p: _version_key(Path(p).parent.name), reverse=True)
    candidates.extend(Path(p) for p in versioned)
    for bindir in candidates:
        if all(os.access(bindir / exe, os.X_OK) for exe in ("initdb", "postgres")):
            return bindir
    raise ServerUnavailable(
        "PostgreSQL server binaries (initdb, postgres) not found on PATH "
        "or in /usr/lib/postgresql/*/bin"
    )


def _version_key(name: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in name.split("."))
    except ValueError:
        return (0,)


def pg_accepts_connections(port: int, host: str = LOOPBACK) -> bool:
    """Whether PostgreSQL on host:port would let ``postgres`` in right now.

    Speaks just enough of the wire protocol: sends a StartupMessage and looks at the
    first reply byte. ``R`` (an authentication request; AuthenticationOk under trust)
    means ready; ``E`` means "the database system is starting up" or similar. Unlike a
    bare TCP connect this does not report a recovering server as ready, and unlike
    asyncpg it needs no event loop (we may be called from inside a running one).
    """
    params = f"user\0{_PG_USER}\0database\0postgres\0\0".encode()
    body = struct.pack("!I", _PROTOCOL_3_0) + params
    try:
        with socket.create_connection((host, port), timeout=1.0) as sock:
            sock.sendall(struct.pack("!I", len(body) + 4) + body)
            first = sock.recv(1)
            if first == b"R":
                sock.sendall(b"X" + struct.pack("!I", 4))  # Terminate
                return True
    except OSError:
        pass
    return False


def _os_user() -> str | None:
    """The OS user to run PostgreSQL as: ``postgres`` when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        pwd.getpwnam(_PG_USER)
    except KeyError:
        raise ServerUnavailable(
            "running as root, and PostgreSQL refuses to run as root, "
            f"but there is no '{_PG_USER}' system user to run it as"
        ) from None
    return _PG_USER


def _build(bindir: Path, user: str | None, start_timeout: float) -> ProcessServer:
    workdir = make_workdir("postgres")
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
    datadir = workdir / "data"
    log_path = workdir / "server.log"
    try:
        run_checked(
            [
                str(bindir / "initdb"),
                "-D",
                str(datadir),
                "-U",
                _PG_USER,
                "--auth=trust",
                "--encoding=UTF8",
                "--locale=C",
                "--no-sync",
            ],
            log_path=log_path,
            what="initdb",
            timeout=120.0,
            cwd=workdir,
            env={**os.environ, "LC_ALL": "C"},
            user=user,
        )
    except ServerUnavailable as exc:
        shutil.rmtree(workdir, ignore_errors=True)
        hint = " (the temp dir must be reachable by that user)" if user else ""
        raise ServerUnavailable(f"{exc}\n(initdb ran as {user or 'current user'}{hint})") from None

    port = free_port()
    process = Process(
        name="postgres",
        port=port,
        argv=[
            str(bindir / "postgres"),
            "-D",
            str(datadir),
            "-p",
            str(port),
            "-c",
            f"listen_addresses={LOOPBACK}",
            "-c",
            f"unix_socket_directories={workdir}",
            "-c",
            "fsync=off",
            "-c",
            "synchronous_commit=off",
            "-c",
            "full_page_writes=off",
            "-c",
            "max_connections=200",
        ],
        log_path=log_path,
        ready=lambda: pg_accepts_connections(port),
        cwd=workdir,
        user=user,
        # SIGINT is PostgreSQL's "fast" shutdown; SIGTERM ("smart") waits for clients.
        stop_signal=signal.SIGINT,
    )
    return ProcessServer(
        kind="postgres",
        url=f"postgresql://{_PG_USER}@{LOOPBACK}:{port}/postgres",
        workdir=workdir,
        processes=[process],
        start_timeout=start_timeout,
    )


def start_postgres(*, start_timeout: float = 30.0) -> ManagedServer:
    """Start a private PostgreSQL on a free loopback port and return it running.

    initdb runs in a fresh ``tempfile.mkdtemp`` directory with trust auth; the server
    runs with fsync off (test data is disposable) and its unix socket inside that
    directory. As root, both run as the ``postgres`` OS user. ``stop()``/``start()``
    keep the port and the data. Raises :class:`ServerUnavailable` if it cannot.
    """
    bindir = find_postgres_bindir()
    user = _os_user()
    return start_with_port_retry(lambda: _build(bindir, user, start_timeout))
