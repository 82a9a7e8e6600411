"""A private Redis Sentinel deployment: a primary, one replica and three Sentinels.

Every process is a child bound to 127.0.0.1 with persistence off, as `start_redis`
does. The Sentinels judge the primary down after ``down_after_ms`` (one second by
default, instead of Redis's thirty) and give a failover ``failover_timeout_ms``, so
a failover drill takes seconds. Each Sentinel rewrites its own ``sentinel.conf`` as
the topology changes, which is why each has a file of its own.

``redis-sentinel`` is a name for ``redis-server --sentinel``; the second form is used
when the first is not installed (Debian ships it in a separate package).
"""

from __future__ import annotations

import functools
import shutil
import time
from pathlib import Path
from urllib.parse import quote, urlencode

from ._process import (
    LOOPBACK,
    ManagedServer,
    Process,
    ProcessServer,
    ServerUnavailable,
    free_port,
    make_workdir,
    start_with_port_retry,
    wait_for,
)
from ._redis import RedisError, _find_binary, _node, redis_command, redis_pings

__all__ = ["SENTINEL_SERVICE", "RedisSentinelServer", "sentinel_view", "start_redis_sentinel"]

#: The name the Sentinels monitor the primary under (the URL's first path segment).
SENTINEL_SERVICE = "mymaster"
_SENTINELS = 3
_QUORUM = 2


def sentinel_view(
    port: int, service: str = SENTINEL_SERVICE, password: str | None = None
) -> dict[str, str]:
    """What the Sentinel on *port* reports about *service* (``INFO sentinel``): ``status``,
    ``address`` (``host:port`` of the primary), ``slaves``, ``sentinels``; empty if none."""
    text = redis_command(port, "INFO", "sentinel", password=password)
    for line in text.splitlines():
        _, _, fields = line.partition(":")
        pairs = dict(field.split("=", 1) for field in fields.split(",") if "=" in field)
        if pairs.get("name") == service:
            return pairs
    return {}


def _replication(port: int, password: str | None) -> dict[str, str]:
    text = redis_command(port, "INFO", "replication", password=password)
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


class RedisSentinelServer(ProcessServer):
    """The primary, the replica, then the Sentinels, started in that order.

    The order matters: a Sentinel learns of replicas from the primary's ``INFO`` and
    asks again only every ten seconds, so it starts once the replica is linked. Ready
    when every running Sentinel sees a primary with status ok, at least one replica
    and all the other Sentinels (which it learns of within a few seconds).

    ``data_ports`` are the primary's then the replica's at the start; after a failover
    `primary_port` says which one is the primary now. With passwords, the URL carries
    them: the data nodes' as its user info, the Sentinels' as ``sentinel_password``.
    """

    def __init__(
        self,
        *,
        workdir: Path,
        data_nodes: list[Process],
        sentinels: list[Process],
        start_timeout: float,
        password: str | None = None,
        sentinel_password: str | None = None,
    ) -> None:
        hosts = ",".join(f"{LOOPBACK}:{s.port}" for s in sentinels)
        auth = "" if password is None else f":{quote(password, safe='')}@"
        query = (
            ""
            if sentinel_password is None
            else "?" + urlencode({"sentinel_password": sentinel_password})
        )
        super().__init__(
            kind="redis-sentinel",
            url=f"redis+sentinel://{auth}{hosts}/{SENTINEL_SERVICE}/0{query}",
            workdir=workdir,
            processes=[*data_nodes, *sentinels],
            start_timeout=start_timeout,
        )
        self.data_nodes = data_nodes
        self.sentinels = sentinels
        self.password = password
        self.sentinel_password = sentinel_password

    @property
    def data_ports(self) -> list[int]:
        return [node.port for node in self.data_nodes if node.port is not None]

    @property
    def sentinel_ports(self) -> list[int]:
        return [node.port for node in self.sentinels if node.port is not None]

    def primary_port(self) -> int | None:
        """The primary's port as the first Sentinel that answers reports it (None if none)."""
        for port in self.sentinel_ports:
            try:
                view = sentinel_view(port, password=self.sentinel_password)
            except (OSError, RedisError):
                continue
            address = view.get("address", "")
            if address:
                return int(address.rsplit(":", 1)[1])
        return None

    def node(self, port: int) -> Process:
        """The data node (primary or replica) listening on *port*."""
        for process in self.data_nodes:
            if process.port == port:
                return process
        raise KeyError(port)

    def restart_as_replica(self, port: int, timeout: float = 30.0) -> None:
        """Start the data node on *port* again (after a kill) as a replica of the current
        primary, as a supervisor that asks the Sentinels first would; the Sentinels
        would convert it too, but only after it has claimed to be a primary for a while.
        """
        primary = self.primary_port()
        if primary is None or primary == port:
            raise ServerUnavailable(f"no other primary to replicate for the node on {port}")
        process = self.node(port)
        process.spawn()
        process.wait_ready(time.monotonic() + timeout)
        redis_command(port, "REPLICAOF", LOOPBACK, str(primary), password=self.password)

    def _start(self, deadline: float) -> None:
        for process in self.data_nodes:
            process.spawn()
        for process in self.data_nodes:
            process.wait_ready(deadline)
        wait_for(
            self._replicated,
            deadline=deadline,
            what="the Redis replica's link to its primary",
            watch=self.data_nodes,
            log_path=self.data_nodes[-1].log_path,
        )
        for process in self.sentinels:
            process.spawn()
        for process in self.sentinels:
            process.wait_ready(deadline)
        wait_for(
            self._sentinels_agree,
            deadline=deadline,
            what="Redis Sentinel",
            watch=self.processes,
            log_path=self.sentinels[0].log_path,
            detail=self._describe,
        )

    def _replicated(self) -> bool:
        """Some running data node is a replica whose link to its primary is up."""
        for node in self.data_nodes:
            if node.port is None or not node.is_running():
                continue
            try:
                info = _replication(node.port, self.password)
            except RedisError:
                continue
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                return True
        return False

    def _sentinels_agree(self) -> bool:
        addresses = set()
        for port in self.sentinel_ports:
            try:
                view = sentinel_view(port, password=self.sentinel_password)
            except RedisError:
                return False
            if (
                view.get("status") != "ok"
                or int(view.get("slaves", "0")) < 1
                or int(view.get("sentinels", "0")) < _SENTINELS
            ):
                return False
            addresses.add(view.get("address"))
        return len(addresses) == 1

    def _describe(self) -> str:
        views = []
        for port in self.sentinel_ports:
            try:
                views.append(f"{port}: {sentinel_view(port, password=self.sentinel_password)}")
            except (OSError, RedisError) as exc:
                views.append(f"{port}: {exc}")
        return "; ".join(views)


def _sentinel(
    sentinel_argv: list[str],
    port: int,
    primary_port: int,
    folder: Path,
    down_after_ms: int,
    failover_timeout_ms: int,
    password: str | None,
    sentinel_password: str | None,
) -> Process:
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "sentinel.conf"
    lines = [
        f"port {port}",
        f"bind {LOOPBACK}",
        f"dir {folder}",
        f"sentinel monitor {SENTINEL_SERVICE} {LOOPBACK} {primary_port} {_QUORUM}",
        f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {down_after_ms}",
        f"sentinel failover-timeout {SENTINEL_SERVICE} {failover_timeout_ms}",
        f"sentinel parallel-syncs {SENTINEL_SERVICE} 1",
    ]
    if password is not None:
        lines.append(f"sentinel auth-pass {SENTINEL_SERVICE} {password}")
    if sentinel_password is not None:
        # Its own password, and the one it gives the other Sentinels.
        lines += [f"requirepass {sentinel_password}", f"sentinel sentinel-pass {sentinel_password}"]
    config.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return Process(
        name=f"redis-sentinel :{port}",
        port=port,
        argv=[*sentinel_argv[:1], str(config), *sentinel_argv[1:]],
        log_path=folder / "sentinel.log",
        ready=lambda: redis_pings(port, sentinel_password),
        cwd=folder,
    )


def _sentinel_argv(server_bin: Path) -> list[str]:
    found = shutil.which("redis-sentinel")
    if found is not None:
        return [found]
    return [str(server_bin), "--sentinel"]


def _build(
    server_bin: Path,
    down_after_ms: int,
    failover_timeout_ms: int,
    start_timeout: float,
    password: str | None,
    sentinel_password: str | None,
) -> RedisSentinelServer:
    workdir = make_workdir("redis-sentinel")
    ports: list[int] = []
    while len(ports) < 2 + _SENTINELS:
        port = free_port()
        if port not in ports:
            ports.append(port)
    primary, replica, *sentinel_ports = ports
    # No delay before a full sync (7.0 waits 5 s for more replicas to share it).
    sync = ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
    if password is not None:
        sync += ["--requirepass", password, "--masterauth", password]
    data_nodes = [
        _node(server_bin, primary, workdir / str(primary), sync),
        _node(
            server_bin,
            replica,
            workdir / str(replica),
            [*sync, "--replicaof", LOOPBACK, str(primary)],
        ),
    ]
    if password is not None:
        for node, port in zip(data_nodes, (primary, replica), strict=True):
            node.ready = functools.partial(redis_pings, port, password)
    argv = _sentinel_argv(server_bin)
    sentinels = [
        _sentinel(
            argv,
            port,
            primary,
            workdir / str(port),
            down_after_ms,
            failover_timeout_ms,
            password,
            sentinel_password,
        )
        for port in sentinel_ports
    ]
    return RedisSentinelServer(
        workdir=workdir,
        data_nodes=data_nodes,
        sentinels=sentinels,
        start_timeout=start_timeout,
        password=password,
        sentinel_password=sentinel_password,
    )


def start_redis_sentinel(
    *,
    down_after_ms: int = 1000,
    failover_timeout_ms: int = 3000,
    start_timeout: float = 60.0,
    password: str | None = None,
    sentinel_password: str | None = None,
) -> ManagedServer:
    """Start a private Redis primary, one replica and three Sentinels on loopback.

    Returns it once the replica is linked and every Sentinel sees the primary, the
    replica and the other two. The URL is
    ``redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster/0``, the form
    the redis backend understands. A Sentinel marks the primary down after
    ``down_after_ms`` without a reply; the quorum is two of three. *password* is
    required by the data nodes (``requirepass``, ``masterauth``), *sentinel_password*
    by the Sentinels; both then appear in the URL (see `RedisSentinelServer`).
    """
    if down_after_ms < 100 or failover_timeout_ms < 1000:
        raise ValueError("down_after_ms must be >= 100 and failover_timeout_ms >= 1000")
    server_bin = _find_binary("redis-server")
    return start_with_port_retry(
        lambda: _build(
            server_bin,
            down_after_ms,
            failover_timeout_ms,
            start_timeout,
            password,
            sentinel_password,
        )
    )
