"""Private Redis servers: a single node, and a three-master Redis Cluster.

Both are plain ``redis-server`` children bound to 127.0.0.1 with persistence off. The
cluster keeps a ``nodes.conf`` per node, so after ``stop()`` the nodes come back with
the same ports, IDs and slots and re-form the cluster on ``start()``.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from typing import BinaryIO

from ._process import (
    LOOPBACK,
    ManagedServer,
    Process,
    ProcessServer,
    ServerUnavailable,
    free_port,
    free_port_with_offset,
    make_workdir,
    run_checked,
    start_with_port_retry,
    wait_for,
)

__all__ = [
    "RedisClusterServer",
    "RedisError",
    "cluster_info",
    "redis_command",
    "redis_pings",
    "start_redis",
    "start_redis_cluster",
]

CLUSTER_SLOTS = 16384
_CLUSTER_BUS_OFFSET = 10000  # Redis listens for cluster gossip on port + 10000


class RedisError(Exception):
    """Redis answered with an error reply (``-ERR ...``, ``-LOADING ...``)."""


def _encode(args: tuple[str, ...]) -> bytes:
    payload = f"*{len(args)}\r\n".encode()
    for arg in args:
        data = arg.encode()
        payload += b"$%d\r\n%s\r\n" % (len(data), data)
    return payload


def _reply(reader: BinaryIO) -> str:
    line = reader.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:].decode(errors="replace")
    if kind in (b"+", b":"):
        return rest
    if kind == b"-":
        raise RedisError(rest)
    if kind == b"$":
        size = int(rest)
        return "" if size < 0 else reader.read(size + 2)[:size].decode(errors="replace")
    raise RedisError(f"unexpected reply {line[:40]!r}")


def redis_command(
    port: int,
    *args: str,
    host: str = LOOPBACK,
    timeout: float = 2.0,
    password: str | None = None,
) -> str:
    """Send one command over RESP and return a simple-string/bulk/integer reply as text.

    A dozen lines of RESP keep this package free of a redis-py dependency and usable
    from inside a running event loop. With *password*, ``AUTH`` goes first on the same
    connection. Raises :class:`RedisError` on an error reply and OSError if the server
    cannot be reached.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        reader = sock.makefile("rb")
        if password is not None:
            sock.sendall(_encode(("AUTH", password)))
            _reply(reader)
        sock.sendall(_encode(args))
        return _reply(reader)


def redis_pings(port: int, password: str | None = None) -> bool:
    """Whether the node answers PING with PONG (not LOADING or an error)."""
    try:
        return redis_command(port, "PING", password=password) == "PONG"
    except (OSError, RedisError):
        return False


def cluster_info(port: int) -> dict[str, str]:
    """``CLUSTER INFO`` of one node as a dict."""
    text = redis_command(port, "CLUSTER", "INFO")
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def _find_binary(name: str, near: Path | None = None) -> Path:
    if near is not None and (near.parent / name).exists():
        return near.parent / name
    found = shutil.which(name)
    if found is None:
        raise ServerUnavailable(f"{name} not found on PATH")
    return Path(found)


def _node(server_bin: Path, port: int, nodedir: Path, extra: list[str]) -> Process:
    """One redis-server child; persistence off, bound to loopback, dir = its own folder."""
    nodedir.mkdir(parents=True, exist_ok=True)
    return Process(
        name=f"redis-server :{port}",
        port=port,
        argv=[
            str(server_bin),
            "--port",
            str(port),
            "--bind",
            LOOPBACK,
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(nodedir),
            "--daemonize",
            "no",
            *extra,
        ],
        log_path=nodedir / "server.log",
        ready=lambda: redis_pings(port),
        cwd=nodedir,
    )


def _build_single(server_bin: Path, start_timeout: float, extra: list[str]) -> ProcessServer:
    workdir = make_workdir("redis")
    port = free_port()
    return ProcessServer(
        kind="redis",
        url=f"redis://{LOOPBACK}:{port}/0",
        workdir=workdir,
        processes=[_node(server_bin, port, workdir, extra)],
        start_timeout=start_timeout,
    )


def start_redis(*, start_timeout: float = 30.0, appendonly: bool = False) -> ManagedServer:
    """Start a private ``redis-server`` on a free loopback port and return it running.

    Persistence is off, so a restart comes back empty; with ``appendonly=True`` every
    write is in the append-only file (``appendfsync always``) before it is acknowledged,
    so data survives a restart, even after SIGKILL.
    """
    server_bin = _find_binary("redis-server")
    extra = ["--appendonly", "yes", "--appendfsync", "always"] if appendonly else []
    return start_with_port_retry(lambda: _build_single(server_bin, start_timeout, extra))


class RedisClusterServer(ProcessServer):
    """Several cluster-enabled nodes; forms the cluster on first start, then waits for it.

    ``redis-cli --cluster create`` runs only when no slot is assigned yet: on a restart
    the nodes reload ``nodes.conf`` and re-form the cluster by themselves.
    """

    def __init__(
        self,
        *,
        workdir: Path,
        processes: list[Process],
        ports: list[int],
        cli_bin: Path,
        start_timeout: float,
    ) -> None:
        super().__init__(
            kind="redis-cluster",
            url=f"redis+cluster://{LOOPBACK}:{ports[0]}",
            workdir=workdir,
            processes=processes,
            start_timeout=start_timeout,
        )
        self.ports = ports
        self._cli_bin = cli_bin

    def _after_start(self, deadline: float) -> None:
        if cluster_info(self.ports[0]).get("cluster_slots_assigned", "0") == "0":
            run_checked(
                [
                    str(self._cli_bin),
                    "--cluster",
                    "create",
                    *(f"{LOOPBACK}:{port}" for port in self.ports),
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                log_path=self.workdir / "cluster-create.log",
                what="redis-cli --cluster create",
                timeout=60.0,
                cwd=self.workdir,
            )
        wait_for(
            lambda: all(self._cluster_ok(port) for port in self.ports),
            deadline=deadline,
            what="Redis Cluster",
            watch=self.processes,
            log_path=self.processes[0].log_path,
            detail=self._describe,
        )

    def _describe(self) -> str:
        states = []
        for port in self.ports:
            try:
                info = cluster_info(port)
                states.append(
                    f"{port}: state={info.get('cluster_state')} "
                    f"slots={info.get('cluster_slots_ok')} nodes={info.get('cluster_known_nodes')}"
                )
            except (OSError, RedisError) as exc:
                states.append(f"{port}: {exc}")
        return "; ".join(states)

    def _cluster_ok(self, port: int) -> bool:
        """Cluster healthy as seen from this node: state ok, all slots, all masters known."""
        try:
            info = cluster_info(port)
        except RedisError:
            return False
        return (
            info.get("cluster_state") == "ok"
            and info.get("cluster_slots_assigned") == str(CLUSTER_SLOTS)
            and info.get("cluster_slots_ok") == str(CLUSTER_SLOTS)
            and int(info.get("cluster_known_nodes", "0")) >= len(self.ports)
        )


def _build_cluster(
    server_bin: Path, cli_bin: Path, masters: int, start_timeout: float, extra: list[str]
) -> RedisClusterServer:
    workdir = make_workdir("redis-cluster")
    ports: list[int] = []
    while len(ports) < masters:
        port = free_port_with_offset(_CLUSTER_BUS_OFFSET)
        if port not in ports and port + _CLUSTER_BUS_OFFSET not in ports:
            ports.append(port)
    cluster_args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "5000",
        *extra,
    ]
    processes = [_node(server_bin, port, workdir / str(port), cluster_args) for port in ports]
    return RedisClusterServer(
        workdir=workdir,
        processes=processes,
        ports=ports,
        cli_bin=cli_bin,
        start_timeout=start_timeout,
    )


def start_redis_cluster(
    masters: int = 3, *, start_timeout: float = 60.0, appendonly: bool = False
) -> ManagedServer:
    """Start a private Redis Cluster of ``masters`` master nodes (no replicas).

    ``appendonly=True``: every node keeps its data as `start_redis` does with it, so a
    node killed and started again comes back with its keys.

    Returns it once every node reports ``cluster_state:ok`` with all 16384 slots
    assigned. The URL is ``redis+cluster://127.0.0.1:<first port>``, the scheme the
    redis backend understands; the other nodes are discovered from the first.
    """
    if masters < 3:
        raise ValueError("Redis Cluster needs at least 3 masters")
    server_bin = _find_binary("redis-server")
    cli_bin = _find_binary("redis-cli", near=server_bin)
    extra = ["--appendonly", "yes", "--appendfsync", "always"] if appendonly else []
    return start_with_port_retry(
        lambda: _build_cluster(server_bin, cli_bin, masters, start_timeout, extra)
    )
