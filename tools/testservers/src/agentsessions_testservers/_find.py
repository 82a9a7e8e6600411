"""The finding policy: environment variable, else a private local server, else a container.

One server per kind per process, started lazily on first request and reused by every
later caller, so a test session pays each startup once. Failures are remembered too,
so a missing binary costs one attempt, not one per test module.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Final, Literal, get_args

from ._containers import (
    container_problem,
    start_mongo_container,
    start_postgres_container,
    start_redis_container,
)
from ._mongo import start_mongo
from ._mysql import start_mysql
from ._postgres import start_postgres
from ._process import ManagedServer, ServerUnavailable
from ._redis import start_redis, start_redis_cluster
from ._sentinel import start_redis_sentinel

__all__ = [
    "ENV_VARS",
    "KINDS",
    "Kind",
    "find",
    "find_mongo",
    "find_mysql",
    "find_postgres",
    "find_redis",
    "find_redis_cluster",
    "find_redis_sentinel",
    "started_server",
    "stop_all",
]

Kind = Literal["postgres", "redis", "redis-cluster", "redis-sentinel", "mongo", "mysql"]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)

ENV_VARS: Final[dict[Kind, str]] = {
    "postgres": "AGENTSESSIONS_POSTGRES_URL",
    "redis": "AGENTSESSIONS_REDIS_URL",
    "redis-cluster": "AGENTSESSIONS_REDIS_CLUSTER_URL",
    "redis-sentinel": "AGENTSESSIONS_REDIS_SENTINEL_URL",
    "mongo": "AGENTSESSIONS_MONGO_URL",
    "mysql": "AGENTSESSIONS_MYSQL_URL",
}

_LOCAL: Final[dict[Kind, tuple[str, Callable[[], ManagedServer]]]] = {
    "postgres": ("local PostgreSQL", start_postgres),
    "redis": ("local redis-server", start_redis),
    "redis-cluster": ("local redis-server cluster", start_redis_cluster),
    "redis-sentinel": ("local redis-server and Sentinels", start_redis_sentinel),
    "mongo": ("SecantusDB", start_mongo),
    "mysql": ("local mariadbd", start_mysql),
}

_CONTAINER: Final[dict[Kind, Callable[[], ManagedServer]]] = {
    "postgres": start_postgres_container,
    "redis": start_redis_container,
    "mongo": start_mongo_container,
}

_lock = threading.Lock()
_servers: dict[Kind, ManagedServer] = {}
_failures: dict[Kind, ServerUnavailable] = {}


def find(kind: Kind) -> str:
    """URL of a server of ``kind``, by the policy in this module's docstring.

    1. ``$AGENTSESSIONS_<KIND>_URL`` if set (checked on every call, so it always wins);
    2. a private server started from local binaries (never the machine's own server);
    3. a testcontainers container, if testcontainers and a Docker engine are there;
    4. otherwise :class:`ServerUnavailable`, saying what each step found.

    A cached server that a test stopped is started again (same port, same URL).
    """
    if kind not in ENV_VARS:
        raise ValueError(f"unknown server kind {kind!r}; expected one of {KINDS}")
    url = os.environ.get(ENV_VARS[kind], "").strip()
    if url:
        return url
    with _lock:
        server = _servers.get(kind)
        if server is not None:
            server.start()  # no-op when running
            return server.url
        if kind in _failures:
            raise _failures[kind]
        try:
            server = _start(kind)
        except ServerUnavailable as exc:
            _failures[kind] = exc
            raise
        _servers[kind] = server
        return server.url


def _start(kind: Kind) -> ManagedServer:
    tried = [f"${ENV_VARS[kind]} is not set"]
    label, start_local = _LOCAL[kind]
    try:
        return start_local()
    except ServerUnavailable as exc:
        tried.append(f"{label}: {exc}")
    start_container = _CONTAINER.get(kind)
    if start_container is None:
        tried.append(f"containers: not supported for {kind}")
    elif (problem := container_problem()) is not None:
        tried.append(f"containers: {problem}")
    else:
        try:
            return start_container()
        except ServerUnavailable as exc:
            tried.append(f"container: {exc}")
    raise ServerUnavailable(f"no {kind} server available; tried:\n- " + "\n- ".join(tried))


def find_postgres() -> str:
    """PostgreSQL URL (``postgresql://postgres@127.0.0.1:PORT/postgres`` when started here)."""
    return find("postgres")


def find_redis() -> str:
    """Redis URL (``redis://127.0.0.1:PORT/0`` when started here)."""
    return find("redis")


def find_redis_cluster() -> str:
    """Redis Cluster URL (``redis+cluster://127.0.0.1:PORT`` when started here)."""
    return find("redis-cluster")


def find_redis_sentinel() -> str:
    """Redis Sentinel URL (``redis+sentinel://127.0.0.1:S1,...,127.0.0.1:S3/mymaster/0``)."""
    return find("redis-sentinel")


def find_mongo() -> str:
    """MongoDB URL (``mongodb://127.0.0.1:PORT/agentsessions_test``, SecantusDB, here)."""
    return find("mongo")


def find_mysql() -> str:
    """MySQL/MariaDB URL (``mysql://root@127.0.0.1:PORT/agentsessions_test`` here)."""
    return find("mysql")


def started_server(kind: Kind) -> ManagedServer | None:
    """The server the finders started for ``kind``, if any (None when an env var is used)."""
    with _lock:
        return _servers.get(kind)


def stop_all() -> None:
    """Close every server the finders started and forget cached failures.

    Also runs at exit via each server's own atexit hook; calling it early is harmless.
    """
    with _lock:
        servers = list(_servers.values())
        _servers.clear()
        _failures.clear()
    for server in servers:
        server.close()
