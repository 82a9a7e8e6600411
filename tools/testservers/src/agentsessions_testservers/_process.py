"""Child-process, port and wait logic shared by every kind of server.

Each kind (PostgreSQL, Redis, Redis Cluster, SecantusDB) is described as one or more
:class:`Process` specs -- an argv, a log file and a readiness probe -- and driven by
:class:`ProcessServer`. Keeping spawn/wait/stop in one place means every kind gets the
same guarantees: servers are children of the test process (so we know their PIDs and
never stop anything we did not start), output goes to a log file whose tail ends up in
the error when startup fails, and cleanup runs at interpreter exit.
"""

from __future__ import annotations

import abc
import atexit
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

__all__ = [
    "LOOPBACK",
    "ManagedServer",
    "PortInUse",
    "Process",
    "ProcessServer",
    "ServerUnavailable",
    "free_port",
    "free_port_with_offset",
    "log_tail",
    "make_workdir",
    "process_gone",
    "run_checked",
    "start_with_port_retry",
    "tcp_accepts",
    "wait_for",
]

LOOPBACK = "127.0.0.1"
"""Every server started here binds to this address only: tests must not expose anything."""

_STOP_GRACE_SECONDS = 15.0
_POLL_SECONDS = 0.05

_S = TypeVar("_S", bound="ManagedServer")


class ServerUnavailable(Exception):
    """No server of the requested kind could be found or started.

    The message says what was tried and why it failed, so the pytest side can turn it
    into an informative skip (or a failure in CI) instead of a bare connection error.
    """


class PortInUse(ServerUnavailable):
    """The server could not bind its port (someone took it between probe and bind).

    Raised separately so that the first start of a server can retry on a fresh port;
    a *restart* must keep its port and therefore fails instead.
    """


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now.

    The port is found by binding to port 0 and letting the kernel choose; it is released
    before returning, so a race with another process is possible (see :class:`PortInUse`).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _can_bind(port: int) -> bool:
    """Whether a server could listen on the port now (SO_REUSEADDR, as servers use,
    so connections of a just-stopped server in TIME_WAIT do not count as "taken")."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def free_port_with_offset(offset: int, *, attempts: int = 200) -> int:
    """Return a free port ``p`` such that ``p + offset`` is free and valid too.

    Redis Cluster nodes also listen on a bus port at ``port + 10000``; a kernel-chosen
    ephemeral port (often above 55535) would put that bus port out of range.
    """
    low, high = 10000, 65535 - offset
    for _ in range(attempts):
        port = random.randint(low, high)  # not security related
        if _can_bind(port) and _can_bind(port + offset):
            return port
    raise ServerUnavailable(f"no free pair of ports (p, p+{offset}) found on {LOOPBACK}")


def tcp_accepts(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections on host:port (a cheap liveness probe)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def make_workdir(kind: str) -> Path:
    """Create a private temporary directory for one server (data, sockets, logs)."""
    return Path(tempfile.mkdtemp(prefix=f"agentsessions-{kind}-"))


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log file, for error messages; never raises."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"(no log: {exc})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "(log is empty)"


def _with_tail(message: str, log_path: Path) -> str:
    return f"{message}\n--- last lines of {log_path} ---\n{log_tail(log_path)}"


def _credentials(user: str | None) -> tuple[int | None, int | None, list[int] | None]:
    """``(user, group, extra_groups)`` for Popen to drop root privileges to ``user``.

    PostgreSQL refuses to run as root. ``Popen(user=..., group=..., extra_groups=[])``
    switches uid/gid in the child before exec without needing runuser/setpriv and
    without a thread-unsafe ``preexec_fn``. Returns no change when we are not root.
    """
    if user is None or os.geteuid() != 0:
        return None, None, None
    import pwd

    entry = pwd.getpwnam(user)
    return entry.pw_uid, entry.pw_gid, []


def run_checked(
    argv: Sequence[str],
    *,
    log_path: Path,
    what: str,
    timeout: float,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    user: str | None = None,
) -> None:
    """Run a one-shot helper (initdb, redis-cli, pip, ...) with output appended to a log.

    Raises :class:`ServerUnavailable` with the log tail if it fails or times out, so the
    caller never has to format subprocess errors itself.
    """
    uid, gid, groups = _credentials(user)
    with log_path.open("ab") as log:
        log.write(f"$ {' '.join(argv)}\n".encode())
        log.flush()
        try:
            result = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                timeout=timeout,
                check=False,
                user=uid,
                group=gid,
                extra_groups=groups,
            )
        except subprocess.TimeoutExpired:
            raise ServerUnavailable(
                _with_tail(f"{what} timed out after {timeout:.0f}s", log_path)
            ) from None
        except OSError as exc:
            raise ServerUnavailable(f"{what} could not be run: {exc}") from exc
    if result.returncode != 0:
        raise ServerUnavailable(
            _with_tail(f"{what} failed with exit code {result.returncode}", log_path)
        )


class Process:
    """One long-running server child process: how to spawn it, probe it and stop it.

    The same object can be spawned again after :meth:`stop`; that is what makes a
    restart on the same port and data directory possible.
    """

    def __init__(
        self,
        *,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        ready: Callable[[], bool],
        cwd: Path,
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        stop_signal: int = signal.SIGTERM,
    ) -> None:
        self.name = name
        self.port = port
        self.argv = list(argv)
        self.log_path = log_path
        self.ready = ready
        self.cwd = cwd
        self.env = dict(env) if env is not None else None
        self.user = user
        self.stop_signal = stop_signal
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running child, or None."""
        return self._popen.pid if self._popen is not None else None

    def is_running(self) -> bool:
        """Whether the child we spawned is still alive."""
        return self._popen is not None and self._popen.poll() is None

    def spawn(self) -> None:
        """Start the child with stdout/stderr appended to the log file.

        ``start_new_session`` keeps a Ctrl-C in the terminal from reaching the server
        directly: the test process gets it and stops the server in order.
        """
        if self.is_running():
            return
        # If someone else listens there, the readiness probe would talk to *them*.
        if self.port is not None and not _can_bind(self.port):
            raise PortInUse(f"{self.name}: port {self.port} on {LOOPBACK} is already in use")
        uid, gid, groups = _credentials(self.user)
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.argv)}\n".encode())
            log.flush()
            try:
                self._popen = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.cwd,
                    env=self.env,
                    start_new_session=True,
                    user=uid,
                    group=gid,
                    extra_groups=groups,
                )
            except OSError as exc:
                raise ServerUnavailable(f"{self.name} could not be started: {exc}") from exc

    def wait_ready(self, deadline: float) -> None:
        """Poll this process's readiness probe (see :func:`wait_for`)."""
        wait_for(
            self.ready, deadline=deadline, what=self.name, watch=[self], log_path=self.log_path
        )

    def check_alive(self) -> None:
        """Raise :class:`ServerUnavailable` (with the log tail) if the child has exited."""
        if self.is_running():
            return
        code = self._popen.returncode if self._popen is not None else None
        message = _with_tail(f"{self.name} exited (exit code {code})", self.log_path)
        if "address already in use" in log_tail(self.log_path).lower():
            raise PortInUse(message)
        raise ServerUnavailable(message)

    def kill(self) -> None:
        """SIGKILL the child by PID and reap it (a crash, for failover drills)."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            popen.kill()
            popen.wait()
        self._popen = None

    def stop(self, grace: float = _STOP_GRACE_SECONDS) -> None:
        """Stop the child by PID: its stop signal, wait, then SIGKILL as a last resort."""
        popen = self._popen
        if popen is None:
            return
        if popen.poll() is None:
            try:
                popen.send_signal(self.stop_signal)
                popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                popen.kill()
                popen.wait()
            except ProcessLookupError:
                pass
        self._popen = None


def wait_for(
    condition: Callable[[], bool],
    *,
    deadline: float,
    what: str,
    watch: Sequence[Process],
    log_path: Path | None,
    detail: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until it is true; fail fast if a watched child dies.

    ``condition`` may raise OSError (connection refused while the server boots); that
    counts as "not yet". On timeout the error carries the tail of ``log_path`` and, if
    given, ``detail()`` (e.g. what each cluster node reports).
    """
    while True:
        for process in watch:
            process.check_alive()
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() >= deadline:
            message = f"{what} did not become ready in time"
            if detail is not None:
                message += f" ({detail()})"
            raise ServerUnavailable(message if log_path is None else _with_tail(message, log_path))
        time.sleep(_POLL_SECONDS)


class ManagedServer(abc.ABC):
    """A server this process controls: ``url``, ``start()``, ``stop()``, ``is_running()``.

    ``stop()``/``start()`` keep the URL (same port, same data directory), so a test can
    take the server away and bring it back to check reconnect behaviour. ``close()``
    stops it for good and deletes its files; it is idempotent, runs on ``with`` exit and
    is registered with :mod:`atexit` so an aborted test run does not leak processes.
    """

    def __init__(self, *, kind: str, url: str, start_timeout: float) -> None:
        self.kind = kind
        self._url = url
        self.start_timeout = start_timeout
        self.last_start_seconds: float | None = None
        self._closed = False
        self._lock = threading.RLock()
        self._owner_pid = os.getpid()  # a forked child must not stop its parent's servers
        atexit.register(self.close)

    @property
    def url(self) -> str:
        """Connection URL (no password: every server here uses trust/no auth)."""
        return self._url

    def start(self) -> None:
        """Start (or restart) the server and wait until it answers; no-op if running.

        On failure everything already spawned is stopped again before re-raising, so a
        failed start never leaves half a cluster behind.
        """
        with self._lock:
            if self._closed:
                raise ServerUnavailable(f"{self.kind} server was closed; it cannot be restarted")
            if self.is_running():
                return
            began = time.monotonic()
            try:
                self._start(began + self.start_timeout)
            except BaseException:
                self._stop()
                raise
            self.last_start_seconds = time.monotonic() - began

    def stop(self) -> None:
        """Stop the server but keep its port and files so :meth:`start` can bring it back."""
        with self._lock:
            self._stop()

    def is_running(self) -> bool:
        """Whether the server is up (its processes/containers are alive)."""
        return not self._closed and self._is_running()

    def close(self) -> None:
        """Stop the server and delete its files. Idempotent; safe to call from atexit."""
        with self._lock:
            if self._closed or os.getpid() != self._owner_pid:
                return
            self._closed = True
            try:
                self._stop()
            finally:
                self._cleanup()
        atexit.unregister(self.close)

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self.is_running() else "stopped")
        return f"<{type(self).__name__} {self.kind} {self._url} {state}>"

    @abc.abstractmethod
    def _start(self, deadline: float) -> None:
        """Bring the server up and return once it answers (before ``deadline``)."""

    @abc.abstractmethod
    def _stop(self) -> None:
        """Stop the server; must tolerate a server that is not running."""

    @abc.abstractmethod
    def _is_running(self) -> bool:
        """Whether the server's processes/containers are alive."""

    @abc.abstractmethod
    def _cleanup(self) -> None:
        """Release files/containers after the final stop."""


class ProcessServer(ManagedServer):
    """A server made of local child processes living in one private temporary directory."""

    def __init__(
        self,
        *,
        kind: str,
        url: str,
        workdir: Path,
        processes: Sequence[Process],
        start_timeout: float = 30.0,
    ) -> None:
        super().__init__(kind=kind, url=url, start_timeout=start_timeout)
        self.workdir = workdir
        self.processes = list(processes)

    @property
    def pids(self) -> list[int]:
        """PIDs of the running server processes (for diagnostics)."""
        return [p.pid for p in self.processes if p.pid is not None]

    def _start(self, deadline: float) -> None:
        for process in self.processes:
            process.spawn()
        for process in self.processes:
            process.wait_ready(deadline)
        self._after_start(deadline)

    def _after_start(self, deadline: float) -> None:
        """Hook for work that needs all processes up (e.g. forming a Redis cluster)."""

    def _stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()

    def _is_running(self) -> bool:
        return all(p.is_running() for p in self.processes)

    def _cleanup(self) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def start_with_port_retry(
    build: Callable[[], ManagedServer], *, attempts: int = 3
) -> ManagedServer:
    """Build and start a server, retrying with a new build if its port was taken meanwhile.

    ``build`` must choose fresh ports (and a fresh workdir) each time it is called.
    """
    last: PortInUse | None = None
    for _ in range(attempts):
        server = build()
        try:
            server.start()
        except PortInUse as exc:
            server.close()
            last = exc
            continue
        except BaseException:
            server.close()
            raise
        return server
    assert last is not None
    raise last


def process_gone(pid: int) -> bool:
    """Gone, or a zombie that its new parent has not reaped yet."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True
    except OSError:
        return False
