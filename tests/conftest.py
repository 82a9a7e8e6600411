"""Shared fixtures: where each backend's server is.

Each server is found by the `servers` tooling (a URL from the environment, else a
server started on loopback, else testcontainers). When none can be had the test is
skipped with the reason, unless AGENTSESSIONS_REQUIRE_SERVERS=1 (CI), where a
missing server fails the run: a green run with skipped backends proves nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, settings

# The properties must hold whatever the machine's speed: generating data is slow only when
# the machine is busy (CI runs two lanes of sessions at once), which says nothing of them.
settings.register_profile(
    "agentsessions", deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("agentsessions")

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"


def _server(kind: str, find: Callable[[], str]) -> str:
    from agentsessions_testservers import ServerUnavailable

    try:
        return find()
    except ServerUnavailable as exc:
        message = f"no {kind} server: {exc}"
        if REQUIRE_SERVERS:
            pytest.fail(message + " (AGENTSESSIONS_REQUIRE_SERVERS=1)", pytrace=False)
        pytest.skip(message)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    from agentsessions_testservers import find_postgres

    return _server("PostgreSQL", find_postgres)


@pytest.fixture(scope="session")
def redis_url() -> str:
    from agentsessions_testservers import find_redis

    return _server("Redis", find_redis)


@pytest.fixture(scope="session")
def redis_cluster_url() -> str:
    from agentsessions_testservers import find_redis_cluster

    return _server("Redis Cluster", find_redis_cluster)


@pytest.fixture(scope="session")
def redis_sentinel_url() -> str:
    from agentsessions_testservers import find_redis_sentinel

    return _server("Redis Sentinel", find_redis_sentinel)


@pytest.fixture(scope="session")
def mongo_url() -> str:
    from agentsessions_testservers import find_mongo

    return _server("MongoDB", find_mongo)


@pytest.fixture(scope="session")
def mysql_url() -> str:
    from agentsessions_testservers import find_mysql

    return _server("MySQL/MariaDB", find_mysql)
