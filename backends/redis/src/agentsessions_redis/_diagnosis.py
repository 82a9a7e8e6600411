"""The Redis doctor's checks: persistence, eviction, replication and cluster health, read
from ``CONFIG GET``, ``INFO`` and ``CLUSTER INFO``; each judged from those answers alone."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from agentsessions.backend import Finding, clock_skew, encryption_at_rest, finding
from redis import exceptions as redis_errors
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

__all__ = [
    "SETTINGS",
    "cluster_findings",
    "diagnose",
    "encryption",
    "eviction",
    "persistence",
    "replication",
    "sentinel_findings",
]

#: The ``CONFIG GET`` parameters the checks read.
SETTINGS = ("appendonly", "appendfsync", "save", "maxmemory", "maxmemory-policy")
_CLUSTER_SLOTS = 16384


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _pairs(reply: Any) -> dict[str, str]:
    """A ``CONFIG GET`` or ``INFO``-like reply as a str-to-str dict, whatever its shape."""
    if isinstance(reply, Mapping):
        return {_text(k): _text(v) for k, v in reply.items()}
    items = list(reply)
    return {_text(items[i]): _text(items[i + 1]) for i in range(0, len(items) - 1, 2)}


def _info(reply: Any) -> dict[str, str]:
    """An ``INFO`` or ``CLUSTER INFO`` reply (parsed by redis-py or raw text) as a dict."""
    if isinstance(reply, Mapping):
        return {_text(k): _text(v) for k, v in reply.items()}
    out = {}
    for line in _text(reply).splitlines():
        key, sep, value = line.partition(":")
        if sep and not line.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def persistence(where: str, config: Mapping[str, str]) -> Finding:
    """``redis.persistence``: what a restart of *where* keeps."""
    aof = config.get("appendonly", "no") == "yes"
    fsync = config.get("appendfsync", "everysec")
    snapshots = config.get("save", "").strip()
    if aof and fsync == "always":
        return finding(
            "redis.persistence",
            "ok",
            f"{where}: appendonly yes, appendfsync always: every acknowledged write is on disk",
        )
    if aof and fsync == "everysec":
        return finding(
            "redis.persistence",
            "info",
            f"{where}: appendonly yes, appendfsync everysec",
            "a crash of the server's machine can lose the last second of acknowledged saves",
            "appendfsync always keeps every acknowledged save (at the cost of one fsync each)",
        )
    if aof:
        return finding(
            "redis.persistence",
            "warning",
            f"{where}: appendonly yes, appendfsync {fsync}",
            "the operating system decides when saves reach the disk: a crash of the machine "
            "loses an unknown number of acknowledged saves",
            "set appendfsync always (or everysec, losing at most a second)",
        )
    if snapshots:
        return finding(
            "redis.persistence",
            "warning",
            f"{where}: appendonly no; RDB snapshots only (save {snapshots!r})",
            "a restart loses every save since the last snapshot",
            "set appendonly yes with appendfsync always (or everysec)",
        )
    return finding(
        "redis.persistence",
        "error",
        f"{where}: appendonly no and no RDB snapshots (save '')",
        "the server keeps sessions in memory only: a restart loses every one of them",
        "set appendonly yes with appendfsync always (or everysec) in redis.conf",
    )


def eviction(where: str, config: Mapping[str, str], ttl: float | None) -> Finding:
    """``redis.eviction``: whether the server may delete sessions to free memory."""
    policy = config.get("maxmemory-policy", "noeviction")
    limit = config.get("maxmemory", "0")
    if policy == "noeviction":
        return finding(
            "redis.eviction",
            "ok",
            f"{where}: maxmemory-policy noeviction: a full server refuses writes "
            "(StorageFullError) instead of deleting sessions",
        )
    evicts_ours = policy.startswith("allkeys-") or ttl is not None
    limited = f"maxmemory {limit}" if limit not in ("", "0") else "maxmemory 0 (no limit yet)"
    if not evicts_ours:
        return finding(
            "redis.eviction",
            "info",
            f"{where}: maxmemory-policy {policy}, {limited}; sessions have no ttl, so "
            "this policy never picks them",
            "with the ttl option set, this policy would delete sessions under memory pressure",
            "set maxmemory-policy noeviction before turning ttl on",
        )
    return finding(
        "redis.eviction",
        "critical",
        f"{where}: maxmemory-policy {policy}, {limited}"
        + ("" if policy.startswith("allkeys-") else ", and sessions carry a ttl"),
        "under memory pressure the server deletes sessions: they vanish without an error, "
        "and a half-evicted session can lose its events while its record stays",
        "set maxmemory-policy noeviction (a full server then refuses writes, which "
        "surfaces as StorageFullError)",
    )


def replication(where: str, info: Mapping[str, str], wait_replicas: int) -> Finding:
    """``redis.replication``: the replicas a primary has against ``wait_replicas``."""
    role = info.get("role", "master")
    if role != "master":
        return finding(
            "redis.replication",
            "error",
            f"{where}: role {role}: the URL reaches a replica",
            "a replica refuses writes (BackendReadOnlyError)",
            "point the URL at the primary, or at the Sentinels (redis+sentinel://)",
        )
    replicas = int(info.get("connected_slaves", "0") or 0)
    if wait_replicas > replicas:
        return finding(
            "redis.replication",
            "error",
            f"{where}: {replicas} connected replicas; wait_replicas is {wait_replicas}",
            "every write waits wait_timeout and then raises BackendUnavailableError",
            f"attach at least {wait_replicas} replicas, or lower wait_replicas",
        )
    if replicas and not wait_replicas:
        return finding(
            "redis.replication",
            "warning",
            f"{where}: {replicas} connected replicas, wait_replicas 0",
            "replication is asynchronous: a failover loses the saves the replica had not "
            "received yet, though the caller was told they landed",
            "set wait_replicas=1 (docs/ha/redis.md)",
        )
    if replicas:
        return finding(
            "redis.replication",
            "ok",
            f"{where}: {replicas} connected replicas; every write waits for {wait_replicas}",
        )
    return finding(
        "redis.replication",
        "info",
        f"{where}: no replicas",
        "the sessions live on one machine: its loss loses them (with persistence: until "
        "its disk is back)",
        "add a replica and Sentinels for failover (docs/ha/redis.md)",
    )


def cluster_findings(info: Mapping[str, str], replicas_of: Mapping[str, int]) -> list[Finding]:
    """``redis.cluster_slots`` and ``redis.cluster_replicas`` from ``CLUSTER INFO`` and the
    number of replicas of each primary (by address)."""
    state = info.get("cluster_state", "fail")
    ok = int(info.get("cluster_slots_ok", "0") or 0)
    if state == "ok" and ok == _CLUSTER_SLOTS:
        slots = finding("redis.cluster_slots", "ok", f"all {_CLUSTER_SLOTS} slots are served")
    else:
        slots = finding(
            "redis.cluster_slots",
            "critical",
            f"cluster_state {state}, {ok} of {_CLUSTER_SLOTS} slots served",
            "the sessions hashed to the missing slots can be neither read nor written",
            "assign every slot (redis-cli --cluster fix) and bring failed primaries back",
        )
    bare = sorted(address for address, count in replicas_of.items() if count == 0)
    if bare:
        replicas = finding(
            "redis.cluster_replicas",
            "warning",
            f"{len(bare)} of {len(replicas_of)} primaries have no replica: {', '.join(bare)}",
            "losing one of them loses its slots' sessions and stops the cluster serving them",
            "give every primary a replica (redis-cli --cluster add-node --cluster-slave)",
        )
    else:
        replicas = finding(
            "redis.cluster_replicas",
            "ok",
            f"each of the {len(replicas_of)} primaries has a replica",
        )
    return [slots, replicas]


def sentinel_findings(
    service: str,
    views: list[Mapping[str, Any] | None],
    quorum_errors: list[str],
    wait_replicas: int,
) -> list[Finding]:
    """``redis.sentinel_quorum`` and ``redis.sentinel_replicas`` from each listed Sentinel's
    ``SENTINEL MASTER`` reply (None: it did not answer) and the ``CKQUORUM`` refusals."""
    answered = [view for view in views if view is not None]
    if not answered:
        quorum = finding(
            "redis.sentinel_quorum",
            "critical",
            f"none of the {len(views)} Sentinels of the URL answered about {service!r}",
            "no failover can happen, and clients cannot find the primary",
            "check that the Sentinels run and monitor this service name",
        )
        return [quorum]
    view = answered[0]
    known = int(view.get("num-other-sentinels", 0)) + 1
    needed = int(view.get("quorum", 0))
    found = (
        f"{service!r}: {len(answered)} of the URL's {len(views)} Sentinels answered; they "
        f"know {known} Sentinels, quorum {needed}"
    )
    if quorum_errors:
        quorum = finding(
            "redis.sentinel_quorum",
            "error",
            f"{found}; CKQUORUM: {quorum_errors[0]}",
            "the Sentinels cannot agree that the primary is down or authorize a failover: "
            "while it is down, every write fails",
            "run at least three Sentinels on separate machines, with a quorum of a majority",
        )
    elif known < 3 or len(answered) < len(views):
        quorum = finding(
            "redis.sentinel_quorum",
            "warning",
            found,
            "losing one more Sentinel (or the machine it shares) stops failovers",
            "run at least three Sentinels on separate machines, and list them all in the URL",
        )
    else:
        quorum = finding("redis.sentinel_quorum", "ok", found)
    replicas = int(view.get("num-slaves", 0))
    seen = (
        f"the Sentinels know {replicas} replicas of {service!r}; wait_replicas is {wait_replicas}"
    )
    if replicas < wait_replicas:
        known_replicas = finding(
            "redis.sentinel_replicas",
            "error",
            seen,
            "every write waits wait_timeout for replicas that do not exist, then fails",
            f"attach at least {wait_replicas} replicas, or lower wait_replicas",
        )
    elif replicas == 0:
        known_replicas = finding(
            "redis.sentinel_replicas",
            "warning",
            seen,
            "there is no replica to promote: a failover cannot happen",
            "attach a replica to the primary",
        )
    else:
        known_replicas = finding("redis.sentinel_replicas", "ok", seen)
    return [quorum, known_replicas]


async def _sentinels(pool: SentinelConnectionPool, wait_replicas: int) -> list[Finding]:
    service = pool.service_name
    views: list[Mapping[str, Any] | None] = []
    refusals: list[str] = []
    for sentinel in pool.sentinel_manager.sentinels:
        try:
            views.append(await sentinel.sentinel_master(service))
        except (redis_errors.RedisError, OSError):
            views.append(None)  # down, or it does not monitor the service
            continue
        try:
            await sentinel.execute_command("SENTINEL", "CKQUORUM", service)
        except redis_errors.ResponseError as exc:
            refusals.append(str(exc))
        except (redis_errors.ConnectionError, redis_errors.TimeoutError, OSError):
            views[-1] = None
    return sentinel_findings(service, views, refusals, wait_replicas)


async def _config(run: Any) -> dict[str, str] | None:
    try:
        reply = await run("CONFIG", "GET", *SETTINGS)
    except redis_errors.ResponseError:
        return None  # CONFIG renamed or forbidden (managed services often do)
    return _pairs(reply)


def _unreadable(where: str) -> Finding:
    return finding(
        "redis.config",
        "warning",
        f"{where}: CONFIG GET is refused (renamed or not permitted for this user)",
        "persistence and eviction could not be checked: they may lose sessions",
        "run the doctor as a user allowed CONFIG GET, or check appendonly, appendfsync "
        "and maxmemory-policy in the provider's console",
    )


async def _node_findings(
    where: str, run: Any, ttl: float | None, wait_replicas: int | None
) -> tuple[list[Finding], int]:
    """The node's persistence and eviction findings (and its replication one when
    *wait_replicas* is given), and how many replicas it has."""
    config = await _config(run)
    if config is None:
        out = [_unreadable(where)]
    else:
        out = [persistence(where, config), eviction(where, config, ttl)]
    info = _info(await run("INFO", "replication"))
    if wait_replicas is not None:
        out.append(replication(where, info, wait_replicas))
    return out, int(info.get("connected_slaves", "0") or 0)


async def _skew(run: Any) -> Finding:
    before = datetime.now(timezone.utc)
    reply = await run("TIME")
    after = datetime.now(timezone.utc)
    seconds, micros = (int(_text(part)) for part in reply)
    server = datetime.fromtimestamp(seconds + micros / 1e6, timezone.utc)
    return clock_skew(before, server, after)


async def diagnose(
    client: Redis | RedisCluster, ttl: float | None, wait_replicas: int
) -> list[Finding]:
    """Every Redis check of the server (or of each primary of the cluster) *client* reaches."""
    if isinstance(client, Redis):
        run = client.execute_command
        out, _ = await _node_findings("server", run, ttl, wait_replicas)
        pool = client.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            out += await _sentinels(pool, wait_replicas)
        return [*out, await _skew(run)]
    findings: list[Finding] = []
    primaries: list[ClusterNode] = client.get_primaries()
    replicas_of: dict[str, int] = {}
    for node in primaries:
        out, replicas_of[node.name] = await _node_findings(
            node.name, node.execute_command, ttl, None
        )
        findings += out
    first = primaries[0].execute_command
    findings += cluster_findings(_info(await first("CLUSTER", "INFO")), replicas_of)
    findings.append(await _skew(first))
    return findings


def encryption(client_side: bool) -> Finding:
    """``redis.encryption_at_rest``: the engine does not encrypt its files; the client can."""
    return encryption_at_rest(
        "redis.encryption_at_rest",
        client_side,
        False,
        "Redis does not encrypt its RDB snapshots and AOF files (it has no "
        "encryption at rest): whether its disk is encrypted cannot be read from it",
    )
