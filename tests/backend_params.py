"""The backends a cross-backend test runs on, as pytest params, and URL option helpers.

Shared by the suites that parametrize a test over every backend (integrations, sync),
so a new backend is added in one place.
"""

from __future__ import annotations

import pytest

__all__ = ["BACKENDS", "with_option"]

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("redis", id="redis", marks=pytest.mark.redis),
    pytest.param("redis_cluster", id="redis-cluster", marks=pytest.mark.redis),
    pytest.param("mongo", id="mongo", marks=pytest.mark.mongo),
    pytest.param("mysql", id="mysql", marks=pytest.mark.mysql),
]


def with_option(url: str, name: str, value: str) -> str:
    """*url* with the query parameter ``name=value`` appended."""
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"
