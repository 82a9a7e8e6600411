"""The MongoDB doctor's checks: the storage engine, journaling on both sides, write
concern against the replica set's state, encryption at rest and the TTL index, read from
``hello``, ``serverStatus``, ``getCmdLineOpts``, ``replSetGetConfig``, ``buildInfo``,
``getParameter`` and the collection's indexes.

A command the server refuses (the user lacks the clusterMonitor role, or a
MongoDB-compatible server does not implement it) is read as unknown: its checks say so
as "info" instead of failing the run."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from agentsessions.backend import Finding, clock_skew, encryption_at_rest, finding
from pymongo.errors import OperationFailure

from ._layout import Link

__all__ = [
    "Readings",
    "diagnose",
    "journal",
    "read",
    "replica_set",
    "server_encryption",
    "server_journal",
    "storage_engine",
    "ttl_index",
    "write_concern",
]

#: The server release from which journaling can no longer be turned off.
_ALWAYS_JOURNALED = (6, 1)
_ROLE = "grant the doctor's user the clusterMonitor role (it reads {})"


@dataclass(frozen=True)
class Readings:
    """What the server told of itself; None for each command it refused."""

    #: ``serverStatus`` (its ``storageEngine`` and ``encryptionAtRest`` sections).
    status: Mapping[str, Any] | None
    #: ``getCmdLineOpts``'s ``parsed``: the options the server was started with.
    options: Mapping[str, Any] | None
    #: ``replSetGetConfig``'s ``config`` (None too on a server outside a replica set).
    config: Mapping[str, Any] | None
    #: ``buildInfo``'s ``versionArray``.
    version: tuple[int, ...] | None
    #: ``getParameter``'s ``journalCommitInterval`` (milliseconds).
    commit_interval: int | None = None


def _section(document: Mapping[str, Any] | None, *path: str) -> Any:
    """``document[path[0]][path[1]]...``, None where a level is missing or not a document."""
    value: Any = document
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _false(value: Any) -> bool:
    # Older servers echo an option given as a string ("false") as they parsed it.
    return value is False or (isinstance(value, str) and value.lower() == "false")


def storage_engine(readings: Readings, hello: Mapping[str, Any]) -> Finding:
    """``mongo.storage_engine``: whether the server keeps sessions on disk at all."""
    if readings.status is None:
        return finding(
            "mongo.storage_engine",
            "info",
            "serverStatus was refused: the storage engine could not be read",
            "a server on the in-memory engine loses every session when it restarts",
            _ROLE.format("serverStatus"),
        )
    engine = _section(readings.status, "storageEngine")
    if not isinstance(engine, Mapping):
        where = "a mongos" if hello.get("msg") == "isdbgrid" else "the server"
        return finding(
            "mongo.storage_engine",
            "info",
            f"serverStatus reports no storage engine ({where}): it could not be read",
            "a server on the in-memory engine loses every session when it restarts",
            "run the doctor against each shard's replica set",
        )
    name = engine.get("name", "?")
    if engine.get("persistent") is False or name == "inMemory":
        return finding(
            "mongo.storage_engine",
            "error",
            f"storage engine {name!r} keeps its data in memory only (persistent: false)",
            "a restart of the server loses every session; on a replica set, so does a "
            "restart of every member at once",
            "run mongod on the wiredTiger engine (storage.engine: wiredTiger)",
        )
    return finding("mongo.storage_engine", "ok", f"storage engine {name!r}, on disk")


def server_journal(
    readings: Readings, concern: Mapping[str, Any], hello: Mapping[str, Any]
) -> Finding:
    """``mongo.server_journal``: whether the server journals what it acknowledges."""
    if hello.get("msg") == "isdbgrid":
        return finding(
            "mongo.server_journal",
            "info",
            "a mongos: the shards' journaling is not read through it",
            "a shard started with --nojournal (before MongoDB 6.1) loses the saves since "
            "its last checkpoint on a crash",
            "run the doctor against each shard's replica set",
        )
    enabled = _section(readings.options, "storage", "journal", "enabled")
    if _false(enabled):
        return finding(
            "mongo.server_journal",
            "error",
            "the server runs without a journal (--nojournal, storage.journal.enabled: false)",
            "saves reach the disk only at checkpoints (every 60 s by default): a crash of "
            "the server loses the acknowledged saves since the last one",
            "remove --nojournal (storage.journal.enabled: true) and restart; MongoDB 6.1 "
            "and later always journal",
        )
    replicated = hello.get("setName") is not None
    majority = _section(readings.config, "writeConcernMajorityJournalDefault")
    if replicated and _false(majority) and concern.get("j") is not True:
        return finding(
            "mongo.server_journal",
            "warning",
            "replica set with writeConcernMajorityJournalDefault: false",
            "a w=majority save is acknowledged once a majority of members hold it in "
            "memory: a crash of that majority at once (a power cut) loses it",
            "rs.reconfig() with writeConcernMajorityJournalDefault: true, or put "
            "journal=true in the URL",
        )
    if readings.version is not None and readings.version[:2] >= _ALWAYS_JOURNALED:
        said = "journal on (always, since MongoDB 6.1)"
    elif readings.options is None:
        return finding(
            "mongo.server_journal",
            "info",
            "getCmdLineOpts was refused: whether the server journals could not be read",
            "a server started with --nojournal (before MongoDB 6.1) loses the saves since "
            "its last checkpoint on a crash",
            _ROLE.format("getCmdLineOpts"),
        )
    else:
        said = "journal on" + (" (the server's default)" if enabled is None else "")
    if not replicated or concern.get("j") is True:
        return finding("mongo.server_journal", "ok", said)
    if majority is None:
        return finding(
            "mongo.server_journal",
            "info",
            f"{said}; replSetGetConfig was refused: writeConcernMajorityJournalDefault "
            "could not be read",
            "if an administrator set it to false, a w=majority save is acknowledged "
            "before it is in any journal",
            _ROLE.format("replSetGetConfig") + ", or put journal=true in the URL",
        )
    return finding(
        "mongo.server_journal", "ok", f"{said}; writeConcernMajorityJournalDefault: true"
    )


def server_encryption(readings: Readings, hello: Mapping[str, Any], client_side: bool) -> Finding:
    """``mongo.encryption_at_rest``: the Encrypted Storage Engine, or the client's encryption."""
    section = _section(readings.status, "encryptionAtRest")
    started = _section(readings.options, "security", "enableEncryption")
    on: bool | None
    fix = (
        "run MongoDB Enterprise (or Percona Server for MongoDB) with --enableEncryption "
        "and a KMIP-held key"
    )
    if isinstance(section, Mapping) and section.get("encryptionEnabled") is True:
        cipher = section.get("encryptionCipherMode", "?")
        on, found = True, f"the server encrypts its files (encryptionAtRest, {cipher})"
    elif started is True or started == "true":
        on, found = True, "the server was started with security.enableEncryption"
    elif hello.get("msg") == "isdbgrid":
        on, found = None, "a mongos: the shards' encryption at rest is not read through it"
        fix = "run the doctor against each shard's replica set"
    elif readings.status is None and readings.options is None:
        on, found = None, "serverStatus and getCmdLineOpts were refused: not read"
        fix = _ROLE.format("serverStatus and getCmdLineOpts")
    else:
        on, found = False, "the server does not encrypt its files (no encryptionAtRest)"
    return encryption_at_rest("mongo.encryption_at_rest", client_side, on, found, fix)


def replica_set(hello: Mapping[str, Any]) -> Finding:
    """``mongo.replica_set``: what the URL reaches, from the ``hello`` reply."""
    name = hello.get("setName")
    if name is None:
        if hello.get("msg") == "isdbgrid":
            return finding("mongo.replica_set", "ok", "a sharded cluster (mongos)")
        return finding(
            "mongo.replica_set",
            "info",
            "a standalone server (no replica set)",
            "the sessions live on one server: its loss loses what its backups lack",
            "run a replica set of three members",
        )
    if not hello.get("isWritablePrimary", hello.get("ismaster", False)):
        return finding(
            "mongo.replica_set",
            "error",
            f"replica set {name!r}: the member reached is not the primary",
            "writes are refused until a primary is elected",
            "list every member in the URL (or use mongodb+srv://) so the driver finds the primary",
        )
    members = len(hello.get("hosts", []))
    if members < 3:
        return finding(
            "mongo.replica_set",
            "warning",
            f"replica set {name!r} with {members} data-bearing members",
            "with fewer than three, losing one member leaves no majority: writes with "
            "w=majority stop, and a failover may not happen",
            "add members up to three (or an arbiter, at the cost of majority writes)",
        )
    return finding("mongo.replica_set", "ok", f"replica set {name!r}, {members} members")


def write_concern(document: Mapping[str, Any], hello: Mapping[str, Any]) -> Finding:
    """``mongo.write_concern``: whether an acknowledged save survives a failover."""
    w = document.get("w")
    replicated = hello.get("setName") is not None or hello.get("msg") == "isdbgrid"
    found = f"write concern {dict(document) or '(server default)'}"
    if not replicated:
        return finding(
            "mongo.write_concern", "ok", found + " on a standalone server: nothing to replicate"
        )
    if w is None:
        return finding(
            "mongo.write_concern",
            "info",
            found,
            "the server's default applies: majority since MongoDB 5.0, unless an "
            "administrator changed it (setDefaultRWConcern)",
            "put w=majority in the URL to make it explicit",
        )
    if w == "majority" or (isinstance(w, int) and w > len(hello.get("hosts", [])) // 2):
        return finding("mongo.write_concern", "ok", found)
    return finding(
        "mongo.write_concern",
        "error",
        found,
        "a save is acknowledged once the primary alone has it: a failover rolls back "
        "acknowledged saves, and the sessions lose them",
        "put w=majority in the URL",
    )


def journal(
    document: Mapping[str, Any], hello: Mapping[str, Any], commit_interval: int | None
) -> Finding:
    """``mongo.journal``: whether the write concern waits for the journal.

    *commit_interval* is the server's ``journalCommitInterval`` in milliseconds (None:
    unread), how long an acknowledged but unjournaled save may wait for the disk.
    """
    if document.get("j") is False:
        return finding(
            "mongo.journal",
            "warning",
            "the write concern has j=false",
            "with w=1, a save is acknowledged before it is in the journal: a crash of the "
            "primary loses it",
            "remove j=false from the URL (or set journal=true)",
        )
    if document.get("j") is True:
        return finding("mongo.journal", "ok", "journaled: j=true")
    w = document.get("w")
    replicated = hello.get("setName") is not None or hello.get("msg") == "isdbgrid"
    if w == 1 or (w is None and not replicated):
        interval = (
            f"journalCommitInterval = {commit_interval} ms"
            if commit_interval is not None
            else "journalCommitInterval unread, 100 ms by default"
        )
        return finding(
            "mongo.journal",
            "info",
            f"w=1 without j: a save is acknowledged before the journal's next flush ({interval})",
            "a crash of the server loses the saves acknowledged since the last flush",
            "put journal=true in the URL (each save then waits for its journal flush)",
        )
    said = f"w={w}" if w is not None else "the server's default write concern"
    return finding(
        "mongo.journal",
        "ok",
        f"{said} without j: whether it waits for the journal is the server's setting "
        "(mongo.server_journal)",
    )


def ttl_index(indexes: Sequence[Mapping[str, Any]]) -> Finding:
    """``mongo.ttl_index``: the index that makes the server remove expired sessions."""
    for index in indexes:
        keys = dict(index.get("key", {}))
        if list(keys) == ["expires_at"] and "expireAfterSeconds" in index:
            return finding(
                "mongo.ttl_index", "ok", f"TTL index {index.get('name', '?')!r} on expires_at"
            )
    return finding(
        "mongo.ttl_index",
        "warning",
        "no TTL index on the sessions collection's expires_at",
        "expired sessions stay invisible but are never reclaimed: the collection grows "
        "until purge_expired() is run",
        "reconnect with this release (it creates the index on open) or run purge_expired() "
        "as upkeep",
    )


async def _read(link: Link, command: str | dict[str, Any]) -> dict[str, Any] | None:
    """The reply to *command*, or None if the server refused it (privilege, or unknown)."""
    try:
        reply: dict[str, Any] = await link.client.admin.command(command)
    except OperationFailure as exc:
        if exc.timeout:
            raise  # the server is slow, not refusing: the call's deadline decides
        return None
    return reply


async def read(link: Link, hello: Mapping[str, Any]) -> Readings:
    """The server's readings the checks judge, each None where refused."""
    status = await _read(link, "serverStatus")
    options = await _read(link, "getCmdLineOpts")
    config = await _read(link, "replSetGetConfig") if hello.get("setName") else None
    build = await _read(link, "buildInfo")
    version = _section(build, "versionArray")
    parameter = await _read(link, {"getParameter": 1, "journalCommitInterval": 1})
    interval = _section(parameter, "journalCommitInterval")
    return Readings(
        status,
        _section(options, "parsed") if options is not None else None,
        _section(config, "config"),
        tuple(int(part) for part in version) if isinstance(version, list) else None,
        int(interval) if isinstance(interval, (int, float)) else None,
    )


async def diagnose(link: Link, client_side: bool) -> list[Finding]:
    """Every MongoDB check, through the event loop's *link*; *client_side*: the manager
    encrypts before writing."""
    admin = link.client.admin
    before = datetime.now(timezone.utc)
    hello: dict[str, Any] = await admin.command("hello")
    after = datetime.now(timezone.utc)
    concern = link.sessions.write_concern.document
    indexes = [dict(index) async for index in await link.sessions.list_indexes()]
    readings = await read(link, hello)
    out = [
        replica_set(hello),
        write_concern(concern, hello),
        journal(concern, hello, readings.commit_interval),
        storage_engine(readings, hello),
        server_journal(readings, concern, hello),
        server_encryption(readings, hello, client_side),
        ttl_index(indexes),
    ]
    local = hello.get("localTime")
    if isinstance(local, datetime):
        out.append(clock_skew(before, local.astimezone(timezone.utc), after))
    return out
