"""The SQLite doctor's checks: journal mode, ``synchronous``, the filesystem under the file,
free disk space and the file's permissions, each judged from readings passed in."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

from agentsessions.backend import Finding, Severity, encryption_at_rest, finding, schema_version

from ._schema import SCHEMA_VERSION, stored_version

__all__ = [
    "NETWORK_FILESYSTEMS",
    "diagnose_file",
    "disk_space",
    "encryption",
    "filesystem",
    "filesystem_of",
    "journal_mode",
    "permissions",
    "pragmas",
    "synchronous",
]

#: Filesystem types whose locking does not support WAL's shared memory (or SQLite's
#: locks at all, reliably): several writers corrupt the database.
NETWORK_FILESYSTEMS = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smbfs",
        "smb3",
        "9p",
        "afs",
        "ceph",
        "glusterfs",
        "lustre",
        "fuse.sshfs",
        "fuse.s3fs",
        "fuse.rclone",
        "fuse.gcsfuse",
        "davfs",
        "fuse.davfs2",
    }
)
#: Free space below which a write may soon fail; and below which it is urgent.
LOW_SPACE = 1 << 30
VERY_LOW_SPACE = 100 << 20


def journal_mode(mode: str) -> Finding:
    """``sqlite.journal_mode``: the backend's concurrency rests on WAL."""
    if mode.lower() == "wal":
        return finding("sqlite.journal_mode", "ok", "journal_mode = wal")
    return finding(
        "sqlite.journal_mode",
        "error",
        f"journal_mode = {mode}",
        "readers block behind writers, and several processes on the file time out "
        "(BackendUnavailableError) under load",
        "let the backend set WAL: put the file on a local filesystem that supports it",
    )


def synchronous(level: int) -> Finding:
    """``sqlite.synchronous`` from ``PRAGMA synchronous`` (0 off, 1 normal, 2 full, 3 extra)."""
    name = {0: "off", 1: "normal", 2: "full", 3: "extra"}.get(level, str(level))
    if level >= 2:
        return finding("sqlite.synchronous", "ok", f"synchronous = {name}")
    if level == 1:
        return finding(
            "sqlite.synchronous",
            "info",
            "synchronous = normal (the option's default)",
            "an application crash loses nothing; a power loss or an OS crash can lose the "
            "last saves acknowledged before it (never corrupting the file)",
            "connect with ?synchronous=full to survive power loss too, at an fsync per save",
        )
    return finding(
        "sqlite.synchronous",
        "error",
        f"synchronous = {name}",
        "a power loss or an OS crash can corrupt the database",
        "connect with ?synchronous=full (or normal)",
    )


def filesystem_of(path: str, mountinfo: str) -> str | None:
    """The filesystem type under *path*, from the text of ``/proc/self/mountinfo``.

    The mount whose mount point is the longest prefix of *path* wins (the last one
    listed, for mounts stacked on one point), as the kernel resolves it.
    """
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        point = fields[4].replace("\\040", " ")
        fstype = line.split(" - ", 1)[1].split()[0]
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= best[0]):
            best = (len(point), fstype)
    return None if best is None else best[1]


def filesystem(fstype: str | None, where: str) -> Finding:
    """``sqlite.filesystem``: a network filesystem breaks SQLite's locking."""
    if fstype is None:
        return finding(
            "sqlite.filesystem",
            "info",
            f"the filesystem under {where} could not be determined (no /proc/self/mountinfo)",
            "on a network filesystem, several writers would corrupt the database",
            "keep the file on a local disk",
        )
    if fstype.lower() in NETWORK_FILESYSTEMS:
        return finding(
            "sqlite.filesystem",
            "critical",
            f"{where} is on a network filesystem ({fstype})",
            "WAL's shared memory and SQLite's locks do not work across machines: concurrent "
            "writers corrupt the database, and a reader can see a save half applied",
            "keep the file on a local disk, or use a server backend (PostgreSQL, Redis)",
        )
    return finding("sqlite.filesystem", "ok", f"{where} is on a local filesystem ({fstype})")


def disk_space(free: int, total: int, where: str) -> Finding:
    """``sqlite.disk_space``: free bytes where the database and its WAL grow."""
    found = f"{free / (1 << 30):.2f} GiB free of {total / (1 << 30):.2f} GiB under {where}"
    severity: Severity
    if free < VERY_LOW_SPACE:
        severity = "error"
    elif free < LOW_SPACE or free < total // 20:
        severity = "warning"
    else:
        return finding("sqlite.disk_space", "ok", found)
    return finding(
        "sqlite.disk_space",
        severity,
        found,
        "when the disk fills, saves fail (BackendUnavailableError: database or disk is "
        "full) and the WAL cannot be checkpointed",
        "free space or move the database to a larger disk",
    )


def permissions(mode: int, where: str) -> Finding:
    """``sqlite.permissions``: a file readable by other users exposes every session."""
    bits = stat.S_IMODE(mode)
    found = f"{where} has mode {bits:04o}"
    if bits & 0o007:
        return finding(
            "sqlite.permissions",
            "warning",
            found + " (other users may read or write it)",
            "every user of the machine can read the conversations (or alter them)",
            f"chmod 600 {where} (and its -wal and -shm files), or set a umask of 077",
        )
    if bits & 0o070:
        return finding(
            "sqlite.permissions",
            "info",
            found + " (its group may read or write it)",
            "every member of the file's group can read the conversations",
            f"chmod 600 {where} unless the group is meant to share it",
        )
    return finding("sqlite.permissions", "ok", found + " (its owner only)")


def pragmas(conn: sqlite3.Connection) -> tuple[str, int, int]:
    """journal_mode, synchronous and the stored schema version (the connection's thread)."""
    mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    level = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    return mode, level, stored_version(conn)


def diagnose_file(path: str, mode: str, level: int, stored: int) -> list[Finding]:
    """Every SQLite check of the database file at *path*, given its pragmas' readings."""
    out = [
        journal_mode(mode),
        synchronous(level),
        schema_version("sqlite.schema_version", stored or None, SCHEMA_VERSION),
    ]
    real = os.path.realpath(path)
    try:
        mountinfo: str | None = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    except OSError:
        mountinfo = None
    out.append(filesystem(None if mountinfo is None else filesystem_of(real, mountinfo), path))
    usage = shutil.disk_usage(os.path.dirname(real))
    out.append(disk_space(usage.free, usage.total, os.path.dirname(real)))
    out.append(permissions(os.stat(real).st_mode, path))
    return out


def encryption(client_side: bool) -> Finding:
    """``sqlite.encryption_at_rest``: the engine does not encrypt its files; the client can."""
    return encryption_at_rest(
        "sqlite.encryption_at_rest",
        client_side,
        False,
        "SQLite does not encrypt the database file nor its -wal file: whether the "
        "disk under them is encrypted is not checked",
    )
