"""The MongoDB doctor on the test server (TTL index, journaling), on private SecantusDB
servers in memory and on disk (the storage engine, encryption at rest both ways through
the client's encryption, a user without the clusterMonitor role), and on recorded
replies for what SecantusDB cannot be made to report: replica sets of three,
``--nojournal``, ``writeConcernMajorityJournalDefault: false``, the Encrypted Storage
Engine, ``getCmdLineOpts`` refused on a server that could still run without a journal.

The recorded replies are shaped as MongoDB's manual and server source give them (only
the fields the checks read, and their neighbours)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from agentsessions import Diagnosis, Finding, connect
from agentsessions_mongo._diagnosis import (
    Readings,
    journal,
    replica_set,
    server_encryption,
    server_journal,
    storage_engine,
    write_concern,
)
from agentsessions_testservers import ManagedServer, ServerUnavailable, start_mongo
from pymongo import AsyncMongoClient

THREE = {"setName": "rs0", "isWritablePrimary": True, "hosts": ["a:1", "b:1", "c:1"]}
STANDALONE = {"isWritablePrimary": True}

# serverStatus().storageEngine of a mongod on WiredTiger, and of MongoDB Enterprise's
# in-memory engine.
WIRED_TIGER = {
    "storageEngine": {
        "name": "wiredTiger",
        "supportsCommittedReads": True,
        "oldestRequiredTimestampForCrashRecovery": 0,
        "supportsPendingDrops": True,
        "dropPendingIdents": 0,
        "supportsSnapshotReadConcern": True,
        "readOnly": False,
        "persistent": True,
        "backupCursorOpen": False,
    }
}
IN_MEMORY = {
    "storageEngine": {**WIRED_TIGER["storageEngine"], "name": "inMemory", "persistent": False}
}
# serverStatus().encryptionAtRest of the Encrypted Storage Engine (Enterprise, Percona).
ENCRYPTED = {
    **WIRED_TIGER,
    "encryptionAtRest": {
        "encryptionEnabled": True,
        "encryptionKeyId": "local",
        "encryptionCipherMode": "AES256-GCM",
    },
}
# getCmdLineOpts().parsed: a 4.4 mongod started with --nojournal, the Debian package's
# mongod.conf (journal enabled), and a mongod started with --enableEncryption.
NOJOURNAL = {"storage": {"dbPath": "/data/db", "journal": {"enabled": False}}}
PACKAGED = {
    "config": "/etc/mongod.conf",
    "net": {"bindIp": "127.0.0.1", "port": 27017},
    "storage": {"dbPath": "/var/lib/mongodb", "journal": {"enabled": True}},
    "systemLog": {"destination": "file", "logAppend": True, "path": "/var/log/mongodb/mongod.log"},
}
ENABLE_ENCRYPTION = {
    "security": {"enableEncryption": True, "encryptionKeyFile": "/etc/mongodb-keyfile"},
    "storage": {"dbPath": "/data/db"},
}
# replSetGetConfig().config of a three-member set; the same with majority writes
# acknowledged before the journal.
RS_CONFIG = {
    "_id": "rs0",
    "version": 3,
    "term": 1,
    "protocolVersion": 1,
    "writeConcernMajorityJournalDefault": True,
    "members": [{"_id": i, "host": f"{h}:1"} for i, h in enumerate("abc")],
    "settings": {"chainingAllowed": True, "electionTimeoutMillis": 10000},
}
RS_UNJOURNALED = {**RS_CONFIG, "writeConcernMajorityJournalDefault": False}


def _start(*, persistent: bool) -> ManagedServer:
    try:
        return start_mongo(persistent=persistent)
    except ServerUnavailable as exc:  # pragma: no cover - SecantusDB installs from PyPI
        pytest.skip(f"no SecantusDB to start: {exc}")


@pytest.fixture(scope="module")
def in_memory() -> Iterator[ManagedServer]:
    with _start(persistent=False) as started:
        yield started


@pytest.fixture(scope="module")
def on_disk() -> Iterator[ManagedServer]:
    with _start(persistent=True) as started:
        yield started


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


async def test_the_ttl_index_missing_and_present(mongo_url: str) -> None:
    namespace = f"d{uuid.uuid4().hex[:10]}"
    found = by_check(await diagnose(mongo_url, namespace=namespace))
    assert found["mongo.ttl_index"].severity == "ok"
    assert found["mongo.journal"].severity == "ok"
    assert found["common.clock_skew"].severity == "ok"
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(mongo_url)
    try:
        database = client.get_default_database()
        async with connect(mongo_url, namespace=namespace) as manager:
            from agentsessions_mongo._diagnosis import diagnose as run

            # The hook alone: a new manager's open() would create the index again.
            await manager.open()
            await database[f"{namespace}_sessions"].drop_index("expires_at_1")
            checks = {f.check: f for f in await run(manager._links.current(), False)}  # type: ignore[attr-defined]
        assert checks["mongo.ttl_index"].severity == "warning"
    finally:
        for suffix in ("sessions", "events", "archive"):
            await client.get_default_database().drop_collection(f"{namespace}_{suffix}")
        await client.close()


async def test_journaling_turned_off_is_a_warning(mongo_url: str) -> None:
    sep = "&" if "?" in mongo_url else "?"
    found = by_check(await diagnose(f"{mongo_url}{sep}journal=false"))
    assert found["mongo.journal"].severity == "warning"


async def test_w1_without_j_waits_for_no_journal_flush(mongo_url: str) -> None:
    sep = "&" if "?" in mongo_url else "?"
    found = by_check(await diagnose(f"{mongo_url}{sep}w=1"))["mongo.journal"]
    assert found.severity == "info"
    # SecantusDB answers getParameter without the value: the default is named instead.
    assert "journalCommitInterval" in found.found
    found = by_check(await diagnose(f"{mongo_url}{sep}w=1&journal=true"))["mongo.journal"]
    assert (found.severity, found.found) == ("ok", "journaled: j=true")


def test_journal_on_recorded_readings() -> None:
    standalone = journal({}, STANDALONE, 100)
    assert standalone.severity == "info"
    assert "journalCommitInterval = 100 ms" in standalone.found
    assert journal({}, THREE, None).severity == "ok"  # the default: majority since 5.0
    assert journal({"w": "majority"}, THREE, 100).severity == "ok"
    assert journal({"w": 1}, THREE, 50).severity == "info"


def test_write_concern_on_recorded_replica_sets() -> None:
    assert write_concern({"w": 1}, THREE).severity == "error"
    assert write_concern({"w": "majority"}, THREE).severity == "ok"
    assert write_concern({"w": 2}, THREE).severity == "ok"
    assert write_concern({}, THREE).severity == "info"
    assert write_concern({"w": 1}, {"isWritablePrimary": True}).severity == "ok"  # standalone
    assert replica_set(THREE).severity == "ok"
    assert replica_set({**THREE, "isWritablePrimary": False}).severity == "error"
    assert replica_set({**THREE, "hosts": ["a:1", "b:1"]}).severity == "warning"
    assert replica_set({"isWritablePrimary": True}).severity == "info"


async def test_a_server_keeping_sessions_in_memory_only_is_an_error(
    in_memory: ManagedServer, on_disk: ManagedServer
) -> None:
    # Both real: SecantusDB on ":memory:" reports storageEngine.persistent false.
    found = by_check(await diagnose(in_memory.url))["mongo.storage_engine"]
    assert found.severity == "error"
    assert "persistent: false" in found.found
    found = by_check(await diagnose(on_disk.url))["mongo.storage_engine"]
    assert (found.severity, found.found) == ("ok", "storage engine 'wiredTiger', on disk")


def test_storage_engine_on_recorded_replies() -> None:
    assert storage_engine(Readings(WIRED_TIGER, PACKAGED, None, (7, 0, 14)), THREE).severity == "ok"
    memory = storage_engine(Readings(IN_MEMORY, {}, None, (7, 0, 14)), THREE)
    assert (memory.severity, "'inMemory'" in memory.found) == ("error", True)
    refused = storage_engine(Readings(None, None, None, None), THREE)
    assert (refused.severity, "clusterMonitor" in refused.fix) == ("info", True)
    mongos = storage_engine(
        Readings({"process": "mongos"}, {}, None, (7, 0, 14)), {"msg": "isdbgrid"}
    )
    assert (mongos.severity, "mongos" in mongos.found) == ("info", True)


async def test_server_journaling_as_secantusdb_reports_it(on_disk: ManagedServer) -> None:
    # SecantusDB says it is 8.2 (journaling cannot be turned off since 6.1) and does not
    # implement replSetGetConfig: the majority journaling default is reported unread.
    found = by_check(await diagnose(on_disk.url))["mongo.server_journal"]
    assert found.severity == "info"
    assert "since MongoDB 6.1" in found.found
    assert "writeConcernMajorityJournalDefault could not be read" in found.found
    sep = "&" if "?" in on_disk.url else "?"
    found = by_check(await diagnose(f"{on_disk.url}{sep}journal=true"))["mongo.server_journal"]
    assert found.severity == "ok"  # j=true journals each save whatever the set says


def test_server_journaling_on_recorded_replies() -> None:
    def judge(readings: Readings, concern: dict[str, Any], hello: dict[str, Any]) -> Finding:
        return server_journal(readings, concern, hello)

    nojournal = judge(Readings(WIRED_TIGER, NOJOURNAL, None, (4, 4, 29)), {}, STANDALONE)
    assert (nojournal.severity, "--nojournal" in nojournal.found) == ("error", True)
    # An older server may echo the option as the string it parsed.
    as_text = {"storage": {"journal": {"enabled": "false"}}}
    assert (
        judge(Readings(WIRED_TIGER, as_text, None, (4, 2, 0)), {}, STANDALONE).severity == "error"
    )
    packaged = judge(Readings(WIRED_TIGER, PACKAGED, None, (5, 0, 31)), {}, STANDALONE)
    assert (packaged.severity, packaged.found) == ("ok", "journal on")
    default = judge(Readings(WIRED_TIGER, {"storage": {}}, None, (6, 0, 0)), {}, STANDALONE)
    assert default.found == "journal on (the server's default)"
    majority = {"w": "majority"}
    unjournaled = judge(Readings(WIRED_TIGER, {}, RS_UNJOURNALED, (7, 0, 14)), majority, THREE)
    assert unjournaled.severity == "warning"
    assert "writeConcernMajorityJournalDefault: false" in unjournaled.found
    with_j = judge(
        Readings(WIRED_TIGER, {}, RS_UNJOURNALED, (7, 0, 14)), {**majority, "j": True}, THREE
    )
    assert with_j.severity == "ok"
    fine = judge(Readings(WIRED_TIGER, {}, RS_CONFIG, (7, 0, 14)), majority, THREE)
    assert (fine.severity, "since MongoDB 6.1" in fine.found) == ("ok", True)
    # Refused: getCmdLineOpts on a server that could still run --nojournal; replSetGetConfig.
    refused = judge(Readings(None, None, None, (5, 0, 31)), {}, STANDALONE)
    assert (refused.severity, "getCmdLineOpts" in refused.found) == ("info", True)
    unread = judge(Readings(WIRED_TIGER, PACKAGED, None, (5, 0, 31)), majority, THREE)
    assert (unread.severity, "replSetGetConfig" in unread.found) == ("info", True)
    mongos = judge(Readings({"process": "mongos"}, {}, None, (7, 0, 14)), {}, {"msg": "isdbgrid"})
    assert (mongos.severity, "mongos" in mongos.found) == ("info", True)


async def test_encryption_at_rest_from_both_sides(on_disk: ManagedServer) -> None:
    # Real: SecantusDB has no Encrypted Storage Engine; the client's encryption covers it.
    found = by_check(await diagnose(on_disk.url))["mongo.encryption_at_rest"]
    assert (found.severity, "no encryptionAtRest" in found.found) == ("info", True)
    assert "--enableEncryption" in found.fix
    encryption = pytest.importorskip("agentsessions.encryption")
    keyring = encryption.Keyring({"k1": bytes(range(32))})
    found = by_check(await diagnose(on_disk.url, encryption=keyring))["mongo.encryption_at_rest"]
    assert (found.severity, found.found.startswith("client-side encryption is on")) == ("ok", True)


def test_encryption_at_rest_on_recorded_replies() -> None:
    def judge(readings: Readings, hello: dict[str, Any] = THREE) -> Finding:
        return server_encryption(readings, hello, client_side=False)

    on = judge(Readings(ENCRYPTED, {}, None, (7, 0, 14)))
    assert (on.severity, "AES256-GCM" in on.found) == ("ok", True)
    assert judge(Readings(None, ENABLE_ENCRYPTION, None, (7, 0, 14))).severity == "ok"
    off = judge(Readings(WIRED_TIGER, PACKAGED, None, (7, 0, 14)))
    assert (off.severity, off.consequence.startswith("the server's data files")) == ("info", True)
    unread = judge(Readings(None, None, None, None))
    assert (unread.severity, "refused" in unread.found) == ("info", True)
    assert "cannot be read" in unread.consequence
    assert "clusterMonitor" in unread.fix
    mongos = judge(Readings({"process": "mongos"}, {}, None, (7, 0, 14)), {"msg": "isdbgrid"})
    assert (mongos.severity, "mongos" in mongos.found) == ("info", True)


async def _add_user(url: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(url)
    try:
        roles = ["readWrite"]  # enough for sessions, not for serverStatus & co.
        await client.get_default_database().command("createUser", "app", pwd="apppw", roles=roles)
    finally:
        await client.close()


def test_a_user_refused_the_monitoring_commands_gets_info_not_a_crash() -> None:
    # Real: SecantusDB with --auth enforces MongoDB's roles. The user is made before
    # auth is on (SecantusDB has no localhost exception), then the server restarts.
    with _start(persistent=True) as started:
        asyncio.run(_add_user(started.url))
        started.stop()
        started.processes[0].argv.append("--auth")  # type: ignore[attr-defined]
        started.start()
        url = started.url.replace("mongodb://", "mongodb://app:apppw@", 1)
        found = by_check(asyncio.run(diagnose(url)))
    engine = found["mongo.storage_engine"]
    assert (engine.severity, engine.found) == (
        "info",
        "serverStatus was refused: the storage engine could not be read",
    )
    assert "clusterMonitor" in engine.fix
    encrypted = found["mongo.encryption_at_rest"]
    assert (encrypted.severity, "were refused" in encrypted.found) == ("info", True)
    journaled = found["mongo.server_journal"]
    assert (journaled.severity, "replSetGetConfig was refused" in journaled.found) == ("info", True)
    assert found["mongo.ttl_index"].severity == "ok"  # the rest of the run went on
