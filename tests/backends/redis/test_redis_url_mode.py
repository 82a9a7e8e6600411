"""URL mode on Redis: the whole kit on a bare URL, with no adopter code, is green, its
storage clauses read through the inventory agentsessions-redis registers; on a Cluster
and a Sentinel deployment the clauses that read storage (the subclass runs the rest there)."""

from __future__ import annotations

import uuid
from pathlib import Path

from conformance._run import STORAGE_CLAUSES, assert_url_mode_green, run_url_mode


def _namespaced(url: str) -> str:
    # A fresh namespace: the machine's Redis may be shared with other runs.
    return f"{url}{'&' if '?' in url else '?'}namespace=kit_url_{uuid.uuid4().hex[:12]}"


def test_url_mode_runs_every_clause_green(redis_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_url))
    assert_url_mode_green(run, least=220)


def test_url_mode_storage_clauses_on_a_cluster(redis_cluster_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_cluster_url), keyword=STORAGE_CLAUSES)
    assert_url_mode_green(run, least=8)


def test_url_mode_storage_clauses_on_sentinel(redis_sentinel_url: str, tmp_path: Path) -> None:
    run = run_url_mode(tmp_path, _namespaced(redis_sentinel_url), keyword=STORAGE_CLAUSES)
    assert_url_mode_green(run, least=8)
