"""A private, throw-away PostgreSQL cluster (initdb in a temp dir, postgres as a child).

Why not the machine's own server on 5432: tests must not depend on (or damage) whatever
runs there, and a private server can be stopped and restarted by a test.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import struct
import subprocess
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
    process_gone,
    run_checked,
    start_with_port_retry,
    wait_for,
)

__all__ = [
    "PostgresStandbyPair",
    "find_postgres_bindir",
    "pg_accepts_connections",
    "start_postgres",
    "start_postgres_pair",
]

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


def _build(
    bindir: Path, user: str | None, start_timeout: float, settings: dict[str, str] | None = None
) -> ProcessServer:
    workdir = _own_workdir("postgres", user)
    datadir = workdir / "data"
    log_path = workdir / "server.log"
    _initdb(bindir, datadir, workdir, log_path, user)
    port = free_port()
    process = _server_process(
        "postgres",
        bindir,
        datadir,
        port,
        workdir,
        log_path,
        user,
        {"synchronous_commit": "off", "full_page_writes": "off", **(settings or {})},
    )
    return ProcessServer(
        kind="postgres",
        url=f"postgresql://{_PG_USER}@{LOOPBACK}:{port}/postgres",
        workdir=workdir,
        processes=[process],
        start_timeout=start_timeout,
    )


def _own_workdir(kind: str, user: str | None) -> Path:
    workdir = make_workdir(kind)
    if user is not None:
        import pwd

        entry = pwd.getpwnam(user)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
    return workdir


def _initdb(bindir: Path, datadir: Path, workdir: Path, log_path: Path, user: str | None) -> None:
    """initdb with trust auth (its pg_hba.conf lets loopback replication in too)."""
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


def _server_process(
    name: str,
    bindir: Path,
    datadir: Path,
    port: int,
    workdir: Path,
    log_path: Path,
    user: str | None,
    settings: dict[str, str],
) -> Process:
    """The ``postgres`` child for *datadir* on *port*, loopback only, fsync off."""
    every = {
        "listen_addresses": LOOPBACK,
        "unix_socket_directories": str(workdir),
        "fsync": "off",
        "max_connections": "200",
        **settings,
    }
    argv = [str(bindir / "postgres"), "-D", str(datadir), "-p", str(port)]
    for key, value in every.items():
        argv += ["-c", f"{key}={value}"]
    return Process(
        name=name,
        port=port,
        argv=argv,
        log_path=log_path,
        ready=lambda: pg_accepts_connections(port),
        cwd=workdir,
        user=user,
        # SIGINT is PostgreSQL's "fast" shutdown; SIGTERM ("smart") waits for clients.
        stop_signal=signal.SIGINT,
    )


def start_postgres(
    *, start_timeout: float = 30.0, settings: dict[str, str] | None = None
) -> ManagedServer:
    """Start a private PostgreSQL on a free loopback port and return it running.

    initdb runs in a fresh ``tempfile.mkdtemp`` directory with trust auth; the server
    runs with fsync, full_page_writes and synchronous_commit off (test data is
    disposable; *settings*, as ``-c name=value``, override these) and its unix socket
    inside that directory. As root, both run as the ``postgres`` OS user.
    ``stop()``/``start()`` keep the port and the data. Raises :class:`ServerUnavailable`
    if it cannot.
    """
    bindir = find_postgres_bindir()
    user = _os_user()
    return start_with_port_retry(lambda: _build(bindir, user, start_timeout, settings))


def _children_of(pid: int) -> list[int]:
    """PIDs whose parent is *pid*, read from /proc (none where there is no /proc)."""
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _psql(bindir: Path, port: int, sql: str, *, timeout: float = 10.0) -> str:
    """One statement's unaligned output from ``psql`` (this package uses no driver)."""
    argv = [str(bindir / "psql"), "-h", LOOPBACK, "-p", str(port), "-U", _PG_USER]
    argv += ["-d", "postgres", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={**os.environ, "PGCONNECT_TIMEOUT": str(max(1, round(timeout)))},
        )
    except subprocess.TimeoutExpired:
        raise ServerUnavailable(f"psql on port {port} timed out after {timeout:g}s") from None
    if result.returncode != 0:
        raise ServerUnavailable(f"psql on port {port}: {result.stderr.strip()}")
    return result.stdout.strip()


_STREAMING = "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
_STREAMING_SYNC = _STREAMING + " AND sync_state = 'sync'"


class PostgresStandbyPair(ProcessServer):
    """A primary and a streaming standby of it (``pg_basebackup -R``), one port each.

    ``url`` names both hosts, primary first, with ``target_session_attrs=read-write``:
    a client following it writes to whichever of the two is the primary. For failover
    drills: `kill_primary` (SIGKILL, a crash), then `promote` (``pg_ctl promote``).
    After a failover, `start` would bring the old primary back as a second primary:
    drills close the pair instead.
    """

    def __init__(
        self,
        *,
        bindir: Path,
        user: str | None,
        workdir: Path,
        primary: Process,
        standby: Process,
        synchronous: bool,
        start_timeout: float,
    ) -> None:
        assert primary.port is not None and standby.port is not None
        hosts = f"{LOOPBACK}:{primary.port},{LOOPBACK}:{standby.port}"
        super().__init__(
            kind="postgres-pair",
            url=f"postgresql://{_PG_USER}@{hosts}/postgres?target_session_attrs=read-write",
            workdir=workdir,
            processes=[primary, standby],
            start_timeout=start_timeout,
        )
        self.bindir = bindir
        self.user = user
        self.primary = primary
        self.standby = standby
        self.synchronous = synchronous
        self.standby_datadir = workdir / "standby"

    @property
    def primary_url(self) -> str:
        """The primary's address alone."""
        return f"postgresql://{_PG_USER}@{LOOPBACK}:{self.primary.port}/postgres"

    @property
    def standby_url(self) -> str:
        """The standby's address alone."""
        return f"postgresql://{_PG_USER}@{LOOPBACK}:{self.standby.port}/postgres"

    def _start(self, deadline: float) -> None:
        assert self.primary.port is not None and self.standby.port is not None
        self.primary.spawn()
        self.primary.wait_ready(deadline)
        if not self.standby_datadir.exists():
            run_checked(
                [
                    str(self.bindir / "pg_basebackup"),
                    "-h",
                    LOOPBACK,
                    "-p",
                    str(self.primary.port),
                    "-U",
                    _PG_USER,
                    "-D",
                    str(self.standby_datadir),
                    "--write-recovery-conf",
                    "--wal-method=stream",
                    "--checkpoint=fast",
                    "--no-sync",
                ],
                log_path=self.standby.log_path,
                what="pg_basebackup",
                timeout=max(1.0, deadline - time.monotonic()),
                cwd=self.workdir,
                user=self.user,
            )
        self.standby.spawn()
        self.standby.wait_ready(deadline)
        # Streaming (and, with synchronous_standby_names, counted as synchronous) before
        # the pair is handed out, so that the first write is already replicated.
        streaming = _STREAMING_SYNC if self.synchronous else _STREAMING
        wait_for(
            lambda: _psql(self.bindir, self.primary.port or 0, streaming) == "1",
            deadline=deadline,
            what="the standby's streaming replication",
            watch=self.processes,
            log_path=self.standby.log_path,
        )

    def _is_running(self) -> bool:
        return any(p.is_running() for p in self.processes)

    def wait_replayed(self, timeout: float = 30.0) -> None:
        """Return once the standby has replayed all WAL the primary has written."""
        assert self.primary.port is not None and self.standby.port is not None
        lsn = _psql(self.bindir, self.primary.port, "SELECT pg_current_wal_lsn()")
        wait_for(
            lambda: (
                _psql(
                    self.bindir,
                    self.standby.port or 0,
                    f"SELECT pg_last_wal_replay_lsn() >= '{lsn}'::pg_lsn",
                )
                == "t"
            ),
            deadline=time.monotonic() + timeout,
            what=f"the standby's replay up to {lsn}",
            watch=[self.standby],
            log_path=self.standby.log_path,
        )

    def walsender_pids(self) -> list[int]:
        """PIDs of the primary's WAL senders (children named so): for stalling replication."""
        pid = self.primary.pid
        if pid is None:
            return []
        found = []
        for child in _children_of(pid):
            try:
                with open(f"/proc/{child}/cmdline", "rb") as cmdline:
                    if b"walsender" in cmdline.read():
                        found.append(child)
            except OSError:
                continue
        return found

    def kill_primary(self) -> None:
        """SIGKILL the primary and its backends (by PID): a crash, not a shutdown.

        The backends are listed before the postmaster dies (they are re-parented
        after); each runs in its own session, so a process-group kill would miss them.
        """
        with self._lock:
            pid = self.primary.pid
            if pid is None or not self.primary.is_running():
                return
            backends = _children_of(pid)
            self.primary.kill()
            for doomed in backends:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(doomed, signal.SIGKILL)
            # A signal is delivered asynchronously: return only once the crash is complete,
            # so that nothing of the old primary can still answer or write.
            wait_for(
                lambda: all(process_gone(doomed) for doomed in backends),
                deadline=time.monotonic() + 10.0,
                what="the killed primary's backends to exit",
                watch=(),
                log_path=None,
            )

    def promote(self, timeout: float = 30.0) -> None:
        """``pg_ctl promote --wait``: the standby ends recovery and accepts writes."""
        with self._lock:
            run_checked(
                [
                    str(self.bindir / "pg_ctl"),
                    "promote",
                    "-D",
                    str(self.standby_datadir),
                    "--wait",
                    "--timeout",
                    str(max(1, round(timeout))),
                ],
                log_path=self.standby.log_path,
                what="pg_ctl promote",
                timeout=timeout + 5.0,
                cwd=self.workdir,
                user=self.user,
            )


def _build_pair(
    bindir: Path, user: str | None, synchronous: bool, start_timeout: float
) -> PostgresStandbyPair:
    workdir = _own_workdir("postgres-pair", user)
    primary_log = workdir / "primary.log"
    _initdb(bindir, workdir / "primary", workdir, primary_log, user)
    # PostgreSQL's own default, so that what a commit waits for is the replication
    # setting alone; full_page_writes stays on, as a base backup's replay expects.
    settings = {"synchronous_commit": "on", "wal_level": "replica", "max_wal_senders": "4"}
    if synchronous:
        settings["synchronous_standby_names"] = "*"
    primary = _server_process(
        "postgres-primary",
        bindir,
        workdir / "primary",
        free_port(),
        workdir,
        primary_log,
        user,
        settings,
    )
    standby = _server_process(
        "postgres-standby",
        bindir,
        workdir / "standby",
        free_port(),
        workdir,
        workdir / "standby.log",
        user,
        {"synchronous_commit": "on", "hot_standby": "on"},
    )
    return PostgresStandbyPair(
        bindir=bindir,
        user=user,
        workdir=workdir,
        primary=primary,
        standby=standby,
        synchronous=synchronous,
        start_timeout=start_timeout,
    )


def start_postgres_pair(
    *, synchronous: bool = False, start_timeout: float = 60.0
) -> PostgresStandbyPair:
    """Start a private primary and a hot standby streaming from it, on loopback.

    Both live in one fresh temp dir (``primary/``, ``standby/``, a log each), run as
    `start_postgres` runs its server (trust auth, fsync off), with
    ``synchronous_commit=on``. *synchronous* sets ``synchronous_standby_names='*'``
    on the primary: a commit then returns only once the standby has it. Returns once
    the standby streams. Raises :class:`ServerUnavailable` if it cannot.
    """
    bindir = find_postgres_bindir()
    missing = [exe for exe in ("pg_basebackup", "pg_ctl", "psql") if not (bindir / exe).exists()]
    if missing:
        raise ServerUnavailable(f"PostgreSQL client binaries missing in {bindir}: {missing}")
    user = _os_user()
    server = start_with_port_retry(lambda: _build_pair(bindir, user, synchronous, start_timeout))
    assert isinstance(server, PostgresStandbyPair)
    return server
