"""The PostgreSQL doctor's checks: durability settings, replication, version, schema, pool
size and transaction pooling, read from the server and judged from those readings alone."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from agentsessions.backend import Finding, clock_skew, encryption_at_rest, finding, schema_version

from ._schema import LATEST_VERSION, quote_ident, statements

__all__ = [
    "OLDEST_MAINTAINED",
    "POOLING_ROUNDS",
    "SETTINGS",
    "diagnose",
    "durability",
    "encryption",
    "pgbouncer",
    "pool_size",
    "pooling_seen",
    "replication",
    "version",
]

#: The settings the checks read from ``pg_settings``.
SETTINGS = (
    "fsync",
    "full_page_writes",
    "synchronous_commit",
    "synchronous_standby_names",
    "max_connections",
    "superuser_reserved_connections",
    "server_version_num",
)
#: How many times `pooling_seen` compares the backends of its two connections.
POOLING_ROUNDS = 3
#: The oldest major version the PostgreSQL project still fixes (``server_version_num``).
OLDEST_MAINTAINED = 140000


def durability(settings: Mapping[str, str], standby_names: str) -> list[Finding]:
    """``postgres.fsync``, ``postgres.full_page_writes`` and ``postgres.synchronous_commit``."""
    out = []
    if settings.get("fsync") == "off":
        out.append(
            finding(
                "postgres.fsync",
                "critical",
                "fsync = off",
                "a crash of the server's machine can lose acknowledged saves and corrupt "
                "the whole database, sessions included",
                "set fsync = on (postgresql.conf, then reload)",
            )
        )
    else:
        out.append(finding("postgres.fsync", "ok", "fsync = on"))
    if settings.get("full_page_writes") == "off":
        out.append(
            finding(
                "postgres.full_page_writes",
                "error",
                "full_page_writes = off",
                "a power loss in the middle of a page write leaves torn pages that recovery "
                "cannot repair: sessions stored on them are corrupt",
                "set full_page_writes = on (postgresql.conf, then reload)",
            )
        )
    else:
        out.append(finding("postgres.full_page_writes", "ok", "full_page_writes = on"))
    commit = settings.get("synchronous_commit", "on")
    if commit == "off":
        out.append(
            finding(
                "postgres.synchronous_commit",
                "warning",
                "synchronous_commit = off (for this connection's user and database)",
                "a save is acknowledged before it is on disk: a crash of the server loses "
                "the last moments of acknowledged saves (up to three times wal_writer_delay)",
                "set synchronous_commit = on (postgresql.conf, or ALTER ROLE / ALTER "
                "DATABASE ... RESET synchronous_commit)",
            )
        )
    elif commit == "local" and standby_names:
        out.append(
            finding(
                "postgres.synchronous_commit",
                "warning",
                "synchronous_commit = local with synchronous standbys configured",
                "saves do not wait for the standbys: a failover can lose acknowledged saves",
                "set synchronous_commit = on (or remote_apply)",
            )
        )
    else:
        out.append(finding("postgres.synchronous_commit", "ok", f"synchronous_commit = {commit}"))
    return out


def replication(hosts: int, in_recovery: bool, standby_names: str, commit: str) -> Finding:
    """``postgres.replication``: a multi-host URL needs a synchronous standby."""
    if in_recovery:
        return finding(
            "postgres.replication",
            "error",
            "the server reached is a standby (pg_is_in_recovery() is true)",
            "it refuses every write (BackendReadOnlyError)",
            "point the URL at the primary, or list every host with "
            "target_session_attrs=read-write (docs/ha/postgres.md)",
        )
    synchronous = bool(standby_names) and commit in ("on", "remote_write", "remote_apply")
    if hosts > 1 and not synchronous:
        return finding(
            "postgres.replication",
            "error",
            f"the URL lists {hosts} hosts, and the primary has no synchronous standby "
            f"(synchronous_standby_names = {standby_names!r}, synchronous_commit = {commit})",
            "a failover promotes a standby that may lack the latest acknowledged saves: "
            "they are lost, and copies loaded before it conflict or vanish",
            "set synchronous_standby_names on the primary (docs/ha/postgres.md)",
        )
    if synchronous:
        return finding(
            "postgres.replication",
            "ok",
            f"synchronous standbys: {standby_names!r} (synchronous_commit = {commit})",
        )
    return finding(
        "postgres.replication",
        "info",
        "one host, no synchronous standby",
        "the sessions live on one server: its loss loses what its backups lack",
        "add a synchronous standby for failover (docs/ha/postgres.md)",
    )


def version(version_num: int) -> Finding:
    """``postgres.version``: whether the server's major version is still maintained."""
    major = version_num // 10000
    if version_num < OLDEST_MAINTAINED:
        return finding(
            "postgres.version",
            "warning",
            f"PostgreSQL {major}",
            "the PostgreSQL project no longer fixes this major version (bugs, security)",
            f"upgrade to PostgreSQL {OLDEST_MAINTAINED // 10000} or newer",
        )
    return finding("postgres.version", "ok", f"PostgreSQL {major}, maintained upstream")


def pool_size(max_pool_size: int, max_connections: int, reserved: int) -> Finding:
    """``postgres.pool_size``: one manager's pool against what the server admits."""
    usable = max_connections - reserved
    found = (
        f"max_pool_size {max_pool_size} per event loop and process; the server admits "
        f"{usable} (max_connections {max_connections} - {reserved} reserved)"
    )
    if max_pool_size > usable:
        return finding(
            "postgres.pool_size",
            "error",
            found,
            "one busy process alone can exhaust the server: calls then fail with "
            "BackendUnavailableError (too many clients)",
            "lower max_pool_size, raise max_connections, or put PgBouncer in front "
            "(with pgbouncer=true)",
        )
    if max_pool_size * 4 > usable:
        return finding(
            "postgres.pool_size",
            "info",
            found,
            "a few application processes at full pool exhaust the server",
            "size max_pool_size x processes x event loops below max_connections",
        )
    return finding("postgres.pool_size", "ok", found)


async def pooling_seen(open_connection: Callable[[], Awaitable[Any]]) -> tuple[bool, bool]:
    """``(transaction pooling, a proxy)`` as two fresh connections of *open_connection* see.

    Two client connections open at once cannot share a backend of the server, and one
    connection keeps its backend until it closes: the same ``pg_backend_pid()`` on both,
    or a new one on the same connection, happens only when a proxy hands transactions
    to its server connections (PgBouncer's ``pool_mode = transaction`` or
    ``statement``). A proxy of any mode shows itself by the process id it announced at
    startup (BackendKeyData) differing from ``pg_backend_pid()``.
    """
    first = await open_connection()
    try:
        second = await open_connection()
        try:
            proxied = False
            for _ in range(POOLING_ROUNDS):
                before = await first.fetchval("SELECT pg_backend_pid()")
                other = await second.fetchval("SELECT pg_backend_pid()")
                after = await first.fetchval("SELECT pg_backend_pid()")
                if other == before or after != before:
                    return True, True
                proxied = proxied or before != first.get_server_pid()
            return False, proxied
        finally:
            await second.close()
    finally:
        await first.close()


def pgbouncer(option: bool, pooling: bool, proxied: bool) -> Finding:
    """``postgres.pgbouncer``: the ``pgbouncer`` option against the pooling seen."""
    if pooling and not option:
        return finding(
            "postgres.pgbouncer",
            "error",
            "transaction pooling in front of the server (two connections shared one "
            "backend), and the URL lacks pgbouncer=true",
            "prepared statements made on one server connection are missing on the next: "
            "calls fail under concurrency (prepared statement does not exist), and a "
            "statement_timeout option goes as a startup parameter the proxy refuses",
            "add pgbouncer=true to the URL",
        )
    if pooling:
        return finding(
            "postgres.pgbouncer",
            "ok",
            "transaction pooling in front of the server, pgbouncer=true",
        )
    if option:
        mode = "a proxy without transaction pooling" if proxied else "no proxy"
        return finding(
            "postgres.pgbouncer",
            "info",
            f"pgbouncer=true, but {mode} in front of the server",
            "the option turns off the prepared-statement cache and enforces "
            "statement_timeout on the client only, for nothing",
            "drop pgbouncer=true, unless a transaction pooler will be put in front",
        )
    mode = "a proxy without transaction pooling" if proxied else "no proxy"
    return finding("postgres.pgbouncer", "ok", f"{mode} in front of the server")


async def diagnose(
    connection: Any,
    schema: str,
    hosts: int,
    max_pool_size: int,
    pgbouncer_option: bool = False,
    open_connection: Callable[[], Awaitable[Any]] | None = None,
) -> list[Finding]:
    """Every PostgreSQL check, on one pooled *connection*; the pooling check on two of
    *open_connection*'s, when given."""
    rows = await connection.fetch(
        "SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])", list(SETTINGS)
    )
    settings = {row["name"]: row["setting"] for row in rows}
    standby_names = settings.get("synchronous_standby_names", "")
    commit = settings.get("synchronous_commit", "on")
    out = durability(settings, standby_names)
    in_recovery = bool(await connection.fetchval("SELECT pg_is_in_recovery()"))
    out.append(replication(hosts, in_recovery, standby_names, commit))
    out.append(version(int(settings.get("server_version_num", "0"))))
    out.append(
        pool_size(
            max_pool_size,
            int(settings.get("max_connections", "100")),
            int(settings.get("superuser_reserved_connections", "3")),
        )
    )
    table = f"{quote_ident(schema)}.agentsessions_schema_version"
    exists = await connection.fetchval("SELECT to_regclass($1) IS NOT NULL", table)
    stored = await connection.fetchval(statements(schema).current_version) if exists else None
    out.append(schema_version("postgres.schema_version", stored, LATEST_VERSION))
    before = datetime.now(timezone.utc)
    server = await connection.fetchval("SELECT clock_timestamp()")
    after = datetime.now(timezone.utc)
    out.append(clock_skew(before, server, after))
    if open_connection is not None:
        out.append(pgbouncer(pgbouncer_option, *await pooling_seen(open_connection)))
    return out


def encryption(client_side: bool) -> Finding:
    """``postgres.encryption_at_rest``: the engine does not encrypt its files; the client can."""
    return encryption_at_rest(
        "postgres.encryption_at_rest",
        client_side,
        False,
        "PostgreSQL does not encrypt its files (it has no encryption at rest of its "
        "own): whether its disk is encrypted cannot be read from the server",
    )
