"""Last-resort servers from Docker via testcontainers, when no local binaries exist.

Only used if the ``testcontainers`` package is importable AND a Docker engine answers.
The generic ``DockerContainer`` is used instead of PostgresContainer/MongoDbContainer on
purpose: those set a password (and MongoDbContainer turns auth on, which rules out a
replica set without a keyfile), bind to 0.0.0.0, pick random host ports that change on
restart, and moved module between testcontainers releases. Here every container is
bound to 127.0.0.1 on a fixed port, so ``stop()``/``start()`` keep the URL.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ._mongo import DATABASE, mongo_pings
from ._postgres import pg_accepts_connections
from ._process import LOOPBACK, ManagedServer, ServerUnavailable, free_port, wait_for
from ._redis import redis_pings

__all__ = [
    "container_problem",
    "start_mongo_container",
    "start_postgres_container",
    "start_redis_container",
]

_DOCKER_INFO_TIMEOUT = 5.0
_MONGO_RS_INIT = (
    "try { rs.status().ok } catch (e) { "
    "rs.initiate({_id: 'rs0', members: [{_id: 0, host: '127.0.0.1:27017'}]}).ok }"
)


@functools.lru_cache(maxsize=1)
def container_problem() -> str | None:
    """Why containers cannot be used here, or None if they can (checked once).

    ``docker info`` with a short timeout: a missing or stopped engine must cost seconds,
    not the client's default minute-long retries.
    """
    try:
        importlib.import_module("testcontainers.core.container")
    except ImportError:
        return "testcontainers is not installed"
    docker = shutil.which("docker")
    if docker is None:
        return "the docker CLI is not on PATH"
    try:
        result = subprocess.run(
            [docker, "info"],
            capture_output=True,
            timeout=_DOCKER_INFO_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"`docker info` failed: {exc}"
    if result.returncode != 0:
        lines = result.stderr.decode(errors="replace").strip().splitlines()
        return f"no Docker engine answers `docker info` ({lines[-1] if lines else 'no output'})"
    return None


class ContainerServer(ManagedServer):
    """One Docker container on a fixed 127.0.0.1 host port.

    ``stop()``/``start()`` stop and start the same container (docker keeps its data and
    port binding); ``close()`` removes it. testcontainers' reaper removes it too if this
    process dies without cleaning up.
    """

    def __init__(
        self,
        *,
        kind: str,
        url: str,
        container: Any,
        ready: Callable[[], bool],
        init: Callable[[Any], None] | None = None,
        start_timeout: float = 120.0,
    ) -> None:
        super().__init__(kind=kind, url=url, start_timeout=start_timeout)
        self._container = container
        self._ready = ready
        self._init = init
        self._created = False

    def _start(self, deadline: float) -> None:
        if not self._created:
            self._container.start()  # pulls, creates and starts
            self._created = True
        else:
            self._container.get_wrapped_container().start()
        self._wait(deadline)
        if self._init is not None:
            self._init(self._container)

    def _wait(self, deadline: float) -> None:
        wait_for(
            self._ready,
            deadline=deadline,
            what=f"{self.kind} container",
            watch=[],
            log_path=None,
            detail=self._logs,
        )

    def _logs(self) -> str:
        try:
            raw: bytes = self._container.get_wrapped_container().logs(tail=20)
        except Exception as exc:  # diagnostics only
            return f"no container logs: {exc}"
        return "container log tail:\n" + raw.decode(errors="replace")

    def _stop(self) -> None:
        if self._created:
            with contextlib.suppress(Exception):  # already gone: nothing to stop
                self._container.get_wrapped_container().stop(timeout=10)

    def _is_running(self) -> bool:
        if not self._created:
            return False
        try:
            wrapped = self._container.get_wrapped_container()
            wrapped.reload()
            return bool(wrapped.status == "running")
        except Exception:
            return False

    def _cleanup(self) -> None:
        if self._created:
            with contextlib.suppress(Exception):  # stop() also removes the container
                self._container.stop()


def _container(image: str, container_port: int, host_port: int) -> Any:
    if (problem := container_problem()) is not None:
        raise ServerUnavailable(problem)
    module = importlib.import_module("testcontainers.core.container")
    container = module.DockerContainer(image)
    # A (host_ip, port) tuple makes docker publish on loopback only.
    container.ports[f"{container_port}/tcp"] = (LOOPBACK, host_port)
    return container


def _run(server: ContainerServer) -> ManagedServer:
    try:
        server.start()
    except Exception as exc:
        server.close()
        if isinstance(exc, ServerUnavailable):
            raise
        raise ServerUnavailable(f"{server.kind} container failed: {exc!r}") from exc
    return server


def start_postgres_container() -> ManagedServer:
    """``postgres:17`` with trust auth (so the URL carries no password) and fsync off."""
    port = free_port()
    container = _container("postgres:17", 5432, port)
    container.with_env("POSTGRES_HOST_AUTH_METHOD", "trust")
    container.with_command("postgres -c fsync=off -c synchronous_commit=off")
    return _run(
        ContainerServer(
            kind="postgres",
            url=f"postgresql://postgres@{LOOPBACK}:{port}/postgres",
            container=container,
            ready=lambda: pg_accepts_connections(port),
        )
    )


def start_redis_container() -> ManagedServer:
    """``redis:7`` with persistence off, like the local one."""
    port = free_port()
    container = _container("redis:7", 6379, port)
    container.with_command('redis-server --save "" --appendonly no')
    return _run(
        ContainerServer(
            kind="redis",
            url=f"redis://{LOOPBACK}:{port}/0",
            container=container,
            ready=lambda: redis_pings(port),
        )
    )


def _init_mongo_replica_set(container: Any) -> None:
    """Make the mongod a one-member replica set so transactions work, as on SecantusDB."""
    wrapped = container.get_wrapped_container()
    code, output = wrapped.exec_run(["mongosh", "--quiet", "--eval", _MONGO_RS_INIT])
    if code != 0:
        raise ServerUnavailable(f"rs.initiate failed: {output.decode(errors='replace')}")
    for _ in range(120):
        _, output = wrapped.exec_run(
            ["mongosh", "--quiet", "--eval", "db.hello().isWritablePrimary"]
        )
        if output.strip() == b"true":
            return
        time.sleep(0.5)
    raise ServerUnavailable("mongo container never became replica-set primary")


def start_mongo_container() -> ManagedServer:
    """``mongo:8`` without auth, as a one-member replica set (``directConnection=true``).

    The member is named 127.0.0.1:27017 inside the container, which is not what the host
    sees, hence the direct connection instead of replica-set discovery.
    """
    port = free_port()
    container = _container("mongo:8", 27017, port)
    container.with_command("--replSet rs0 --bind_ip_all")
    return _run(
        ContainerServer(
            kind="mongo",
            url=f"mongodb://{LOOPBACK}:{port}/{DATABASE}?directConnection=true",
            container=container,
            ready=lambda: mongo_pings(port),
            init=_init_mongo_replica_set,
        )
    )
