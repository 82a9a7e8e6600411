"""The MongoDB doctor's checks: write concern and journaling against the replica set's
state, and the TTL index, read from ``hello`` and the collection's indexes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from agentsessions.backend import Finding, clock_skew, finding

from ._layout import Link

__all__ = ["diagnose", "journal", "replica_set", "ttl_index", "write_concern"]


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


def journal(document: Mapping[str, Any]) -> Finding:
    """``mongo.journal``: ``j=false`` acknowledges writes before they reach the journal."""
    if document.get("j") is False:
        return finding(
            "mongo.journal",
            "warning",
            "the write concern has j=false",
            "with w=1, a save is acknowledged before it is in the journal: a crash of the "
            "primary loses it",
            "remove j=false from the URL (or set journal=true)",
        )
    return finding(
        "mongo.journal",
        "ok",
        "journaled: j=true" if document.get("j") else "the server's journaling default",
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


async def diagnose(link: Link) -> list[Finding]:
    """Every MongoDB check, through the event loop's *link*."""
    admin = link.client.admin
    before = datetime.now(timezone.utc)
    hello: dict[str, Any] = await admin.command("hello")
    after = datetime.now(timezone.utc)
    concern = link.sessions.write_concern.document
    indexes = [dict(index) async for index in await link.sessions.list_indexes()]
    out = [replica_set(hello), write_concern(concern, hello), journal(concern), ttl_index(indexes)]
    local = hello.get("localTime")
    if isinstance(local, datetime):
        out.append(clock_skew(before, local.astimezone(timezone.utc), after))
    return out
