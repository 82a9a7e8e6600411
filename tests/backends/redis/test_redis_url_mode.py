"""URL mode on Redis: the whole kit on a bare URL, with no adopter code, is green, its
storage clauses read through the inventory agentsessions-redis registers; on one server,
a Cluster and a Sentinel deployment alike."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from agentsessions import connect
from agentsessions_conformance import find_wire_route
from agentsessions_redis._conformance import redis_wire_route
from conformance._run import assert_url_mode_green, run_url_mode


def _namespaced(url: str) -> str:
    # A fresh namespace: the machine's Redis may be shared with other runs.
    return f"{url}{'&' if '?' in url else '?'}namespace=kit_url_{uuid.uuid4().hex[:12]}"


def test_the_registered_wire_route_serves_cluster_and_sentinel_urls(
    redis_url: str, redis_cluster_url: str, redis_sentinel_url: str
) -> None:
    # Found through the entry point, as the wire clauses find it; nothing connects.
    assert find_wire_route(connect(redis_cluster_url)) is redis_wire_route
    assert find_wire_route(connect(redis_sentinel_url)) is redis_wire_route
    assert find_wire_route(connect(redis_url)) is None  # one server: its URL is rewritten


def test_url_mode_runs_every_clause_green(redis_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_url))
    assert_url_mode_green(run, least=220)


def test_url_mode_runs_every_clause_green_on_a_cluster(
    redis_cluster_url: str, tmp_path: Path
) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_cluster_url))
    assert_url_mode_green(run, least=220)


def test_url_mode_runs_every_clause_green_on_sentinel(
    redis_sentinel_url: str, tmp_path: Path
) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_sentinel_url))
    assert_url_mode_green(run, least=220)


def test_url_mode_wrong_password_clause_on_a_server_with_a_password(tmp_path: Path) -> None:
    """On a private server that checks passwords, the kit derives a wrong password from
    the URL and the backend answers BackendAuthenticationError, naming neither password."""
    from agentsessions_testservers import ServerUnavailable, redis_command, start_redis

    try:
        server = start_redis()
    except ServerUnavailable as exc:
        pytest.skip(f"no redis-server to start: {exc}")
    try:
        port = urlsplit(server.url).port
        assert port is not None
        redis_command(port, "CONFIG", "SET", "requirepass", "kit-right-pw")
        url = f"redis://:kit-right-pw@127.0.0.1:{port}/0"
        run = run_url_mode(tmp_path, url, keyword="wrong_password or delete_removes_events")
        assert run.report is not None, run.output[-3000:]
        outcomes = {c["test"]: c["outcome"] for c in run.report["clauses"]}
        assert outcomes == {
            "test_wrong_password_is_backend_authentication_error": "passed",
            "test_delete_removes_events": "passed",
        }, run.output[-3000:]
        assert "kit-right-pw" not in run.output + json.dumps(run.report)
    finally:
        server.stop()
