"""Find or start the database servers the test suite and the benchmarks need.

For each kind the policy is: a URL from ``$AGENTSESSIONS_<KIND>_URL``; else a private
server started here from installed binaries on a free 127.0.0.1 port; else a
testcontainers container (only with testcontainers and a reachable Docker engine); else
:class:`ServerUnavailable`, which the pytest side turns into a skip (a failure in CI).

Finders (``find_postgres()`` ...) return a URL and share one server per kind per
process. ``start_*()`` return a fresh :class:`ManagedServer` the caller owns -- use
those for tests that stop and restart the server. ``python -m agentsessions_testservers``
starts servers for CI and benchmarks and prints ``export`` lines. See this
distribution's README.md (tools/testservers).

This package depends only on the standard library (testcontainers optionally).
"""

from __future__ import annotations

from ._find import (
    ENV_VARS,
    KINDS,
    Kind,
    find,
    find_mongo,
    find_mysql,
    find_postgres,
    find_redis,
    find_redis_cluster,
    find_redis_sentinel,
    started_server,
    stop_all,
)
from ._mongo import SECANTUS_SPEC, ensure_secantus, start_mongo
from ._mysql import start_mysql
from ._postgres import PostgresStandbyPair, start_postgres, start_postgres_pair
from ._process import ManagedServer, ServerUnavailable, free_port
from ._redis import RedisError, redis_command, start_redis, start_redis_cluster
from ._sentinel import SENTINEL_SERVICE, RedisSentinelServer, start_redis_sentinel

__all__ = [
    "ENV_VARS",
    "KINDS",
    "SECANTUS_SPEC",
    "SENTINEL_SERVICE",
    "Kind",
    "ManagedServer",
    "PostgresStandbyPair",
    "RedisError",
    "RedisSentinelServer",
    "ServerUnavailable",
    "ensure_secantus",
    "find",
    "find_mongo",
    "find_mysql",
    "find_postgres",
    "find_redis",
    "find_redis_cluster",
    "find_redis_sentinel",
    "free_port",
    "redis_command",
    "start_mongo",
    "start_mysql",
    "start_postgres",
    "start_postgres_pair",
    "start_redis",
    "start_redis_cluster",
    "start_redis_sentinel",
    "started_server",
    "stop_all",
]
