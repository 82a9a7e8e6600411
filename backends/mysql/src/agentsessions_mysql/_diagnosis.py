"""The MySQL/MariaDB doctor's checks: durability, packet size, read-only mode, encryption
at rest and schema version, read from the server's global variables and its tablespaces,
and judged from those readings alone."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from agentsessions.backend import Finding, clock_skew, encryption_at_rest, finding, schema_version
from asyncmy.errors import MySQLError

from ._schema import LATEST_VERSION, STATEMENTS

__all__ = [
    "ENCRYPTION_SETTINGS",
    "SETTINGS",
    "TABLES",
    "diagnose",
    "durability",
    "encryption",
    "packet",
    "pool_size",
    "read_only",
]

#: The global variables the checks read (``@@GLOBAL.<name>``).
SETTINGS = (
    "innodb_flush_log_at_trx_commit",
    "log_bin",
    "sync_binlog",
    "innodb_doublewrite",
    "max_allowed_packet",
    "read_only",
    "max_connections",
)


#: The encryption variables of either server (each has only its own: read by name, not
#: as ``@@GLOBAL``, which fails on a variable the server lacks). MariaDB first, MySQL 8 second.
ENCRYPTION_SETTINGS = (
    "innodb_encrypt_tables",
    "innodb_encrypt_log",
    "encrypt_binlog",
    "default_table_encryption",
    "innodb_redo_log_encrypt",
    "binlog_encryption",
)
#: The tables that hold session contents.
TABLES = ("agentsessions_sessions", "agentsessions_events", "agentsessions_archive")
# Each server's view of its tables' encryption, as rows ('db/table', encrypted), through
# the tablespace each table is in (its own, or the system tablespace when
# innodb_file_per_table is off). MariaDB lists only tablespaces that carry encryption
# data: a table whose tablespace is missing there is in clear (NULL).
_TABLESPACES = (
    "SELECT t.NAME, e.ENCRYPTION_SCHEME <> 0 FROM information_schema.INNODB_SYS_TABLES t "
    "LEFT JOIN information_schema.INNODB_TABLESPACES_ENCRYPTION e ON e.SPACE = t.SPACE",
    "SELECT t.NAME, s.ENCRYPTION = 'Y' FROM information_schema.INNODB_TABLES t "
    "LEFT JOIN information_schema.INNODB_TABLESPACES s ON s.SPACE = t.SPACE",
)
_ENCRYPTION_FIX = (
    "MariaDB: load a key management plugin (file_key_management, "
    "hashicorp_key_management) and set innodb_encrypt_tables, innodb_encrypt_log and "
    "encrypt_binlog = ON; MySQL: a keyring component, default_table_encryption, "
    "innodb_redo_log_encrypt and binlog_encryption = ON, and ALTER TABLE ... "
    "ENCRYPTION='Y' for the tables that exist"
)


def _on(value: str) -> bool:
    return value.upper() in ("1", "ON")


def durability(settings: Mapping[str, str]) -> list[Finding]:
    """``mysql.flush_log_at_trx_commit``, ``mysql.sync_binlog`` and ``mysql.doublewrite``."""
    out = []
    flush = settings.get("innodb_flush_log_at_trx_commit", "1")
    if flush == "1":
        out.append(
            finding("mysql.flush_log_at_trx_commit", "ok", "innodb_flush_log_at_trx_commit = 1")
        )
    else:
        # 0 loses the last second on a crash of the server process, 2 on one of its machine.
        out.append(
            finding(
                "mysql.flush_log_at_trx_commit",
                "error" if flush == "0" else "warning",
                f"innodb_flush_log_at_trx_commit = {flush}",
                "a save is acknowledged before the redo log is on disk: a crash of the "
                + ("server process" if flush == "0" else "server's machine")
                + " loses about the last second of acknowledged saves",
                "set innodb_flush_log_at_trx_commit = 1 (my.cnf, or SET GLOBAL)",
            )
        )
    sync = settings.get("sync_binlog", "0")
    if not _on(settings.get("log_bin", "0")):
        out.append(finding("mysql.sync_binlog", "ok", "binary log off (sync_binlog not used)"))
    elif sync == "1":
        out.append(finding("mysql.sync_binlog", "ok", "binary log on, sync_binlog = 1"))
    else:
        out.append(
            finding(
                "mysql.sync_binlog",
                "warning",
                f"binary log on, sync_binlog = {sync}",
                "committed saves can be missing from the binary log after a crash of the "
                "server's machine: replicas and point-in-time recovery lack them, and a "
                "failover to a replica loses them",
                "set sync_binlog = 1 (my.cnf, or SET GLOBAL)",
            )
        )
    if _on(settings.get("innodb_doublewrite", "1")):
        out.append(finding("mysql.doublewrite", "ok", "innodb_doublewrite = ON"))
    else:
        out.append(
            finding(
                "mysql.doublewrite",
                "error",
                "innodb_doublewrite = OFF",
                "a power loss in the middle of a page write leaves torn pages that crash "
                "recovery cannot repair: sessions stored on them are corrupt",
                "set innodb_doublewrite = ON (my.cnf; needs a restart on older servers)",
            )
        )
    return out


def encryption(
    variables: Mapping[str, str],
    encrypted: Mapping[str, bool] | None,
    log_bin: bool,
    client_side: bool,
) -> Finding:
    """``mysql.encryption_at_rest``: the session tables, the redo log and the binary log.

    *encrypted* maps each of `TABLES` the server lists to whether its tablespace is
    encrypted (None: neither server's tablespace view could be read).
    """
    if encrypted is None:
        tables = variables.get("innodb_encrypt_tables") or variables.get(
            "default_table_encryption", "unknown"
        )
        return encryption_at_rest(
            "mysql.encryption_at_rest",
            client_side,
            None,
            "the tablespaces' encryption could not be read (information_schema refused); "
            f"the default for new tables: {tables}",
            "grant the doctor's user PROCESS (the tablespace views need it)",
        )
    clear = [table for table in TABLES if not encrypted.get(table, False)]
    logs = [("redo log", ("innodb_encrypt_log", "innodb_redo_log_encrypt"))]
    if log_bin:
        logs.append(("binary log", ("encrypt_binlog", "binlog_encryption")))
    clear_logs = [
        f"{what} ({next((n for n in names if n in variables), names[0])} = OFF)"
        for what, names in logs
        if not any(_on(variables.get(name, "OFF")) for name in names)
    ]
    if clear:
        found = f"not encrypted: {', '.join(clear)}"
        for name in ("innodb_encrypt_tables", "default_table_encryption"):
            if name in variables:
                found += f" ({name} = {variables[name]})"
                break
    else:
        found = f"the session tables are encrypted ({', '.join(TABLES)})"
        if clear_logs:
            found += (
                f", but not the {' nor the '.join(clear_logs)}: recent saves sit there in clear"
            )
    return encryption_at_rest(
        "mysql.encryption_at_rest",
        client_side,
        not clear and not clear_logs,
        found,
        _ENCRYPTION_FIX,
    )


async def _encrypted_tables(fetch: Any) -> dict[str, bool] | None:
    """Whether each of our tables' tablespace is encrypted, by the first view the server has."""
    database = (await fetch("SELECT DATABASE()"))[0][0]
    for sql in _TABLESPACES:
        try:
            rows = await fetch(sql)
        except MySQLError as exc:
            if not exc.args or not isinstance(exc.args[0], int) or exc.args[0] >= 2000:
                raise  # a client error (the connection), not the server refusing the query
            continue
        prefix = f"{database}/"
        return {
            str(name)[len(prefix) :]: bool(flag)
            for name, flag in rows
            if str(name).startswith(prefix)
        }
    return None


def packet(max_allowed_packet: int, needed: int) -> Finding:
    """``mysql.max_allowed_packet``: what new connections get, against what a save needs."""
    found = f"max_allowed_packet = {max_allowed_packet} bytes (this backend needs {needed})"
    if max_allowed_packet < needed:
        return finding(
            "mysql.max_allowed_packet",
            "error",
            found,
            "a new manager refuses to open, and connections opened from now on reject "
            "saves of large states or events",
            "SET GLOBAL max_allowed_packet = 16777216 (and in my.cnf)",
        )
    return finding("mysql.max_allowed_packet", "ok", found)


def read_only(value: str) -> Finding:
    """``mysql.read_only``: a read-only server (a replica, or one set so) refuses writes."""
    if _on(value):
        return finding(
            "mysql.read_only",
            "error",
            "read_only = ON",
            "every save, create and delete is refused (BackendReadOnlyError), unless "
            "the user has SUPER, which writes past it",
            "point the URL at the primary, or SET GLOBAL read_only = OFF",
        )
    return finding("mysql.read_only", "ok", "read_only = OFF")


def pool_size(max_pool_size: int, max_connections: int) -> Finding:
    """``mysql.pool_size``: one manager's pool against what the server admits."""
    found = (
        f"max_pool_size {max_pool_size} per event loop and process; the server admits "
        f"{max_connections} (max_connections)"
    )
    if max_pool_size > max_connections:
        return finding(
            "mysql.pool_size",
            "error",
            found,
            "one busy process alone can exhaust the server: calls then fail with "
            "BackendUnavailableError (too many connections)",
            "lower max_pool_size or raise max_connections",
        )
    if max_pool_size * 4 > max_connections:
        return finding(
            "mysql.pool_size",
            "info",
            found,
            "a few application processes at full pool exhaust the server",
            "size max_pool_size x processes x event loops below max_connections",
        )
    return finding("mysql.pool_size", "ok", found)


async def diagnose(
    fetch: Any, needed_packet: int, max_pool_size: int, client_side: bool
) -> list[Finding]:
    """Every MySQL/MariaDB check; *fetch* is ``async (sql) -> rows`` on one connection;
    *client_side*: the manager encrypts before writing."""
    columns = ", ".join(f"@@GLOBAL.{name}" for name in SETTINGS)
    row = (await fetch(f"SELECT {columns}"))[0]
    settings = {name: str(value) for name, value in zip(SETTINGS, row, strict=True)}
    out = durability(settings)
    out.append(packet(int(settings["max_allowed_packet"]), needed_packet))
    out.append(read_only(settings["read_only"]))
    out.append(pool_size(max_pool_size, int(settings["max_connections"])))
    names = ", ".join(f"'{name}'" for name in ENCRYPTION_SETTINGS)
    rows = await fetch(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({names})")
    variables = {str(name): str(value) for name, value in rows}
    tables = await _encrypted_tables(fetch)
    out.append(encryption(variables, tables, _on(settings["log_bin"]), client_side))
    exists = (await fetch(STATEMENTS.schema_exists))[0][0]
    stored = (await fetch(STATEMENTS.current_version))[0][0] if exists else None
    out.append(
        schema_version(
            "mysql.schema_version", None if stored is None else int(stored), LATEST_VERSION
        )
    )
    before = datetime.now(timezone.utc)
    server = (await fetch("SELECT UTC_TIMESTAMP(6)"))[0][0]
    after = datetime.now(timezone.utc)
    out.append(clock_skew(before, server.replace(tzinfo=timezone.utc), after))
    return out
