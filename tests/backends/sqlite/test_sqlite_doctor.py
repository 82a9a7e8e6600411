"""The SQLite doctor on real files (permissions, synchronous, :memory:), and on recorded
mount tables for what cannot be produced here (a network filesystem)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from agentsessions import Diagnosis, Finding, connect
from agentsessions_sqlite._diagnosis import (
    disk_space,
    filesystem,
    filesystem_of,
    journal_mode,
    synchronous,
)

# Lines of /proc/self/mountinfo as recorded on a machine with an NFS home directory.
MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:35 / /home rw,relatime shared:20 - nfs4 fileserver:/home rw,vers=4.2
41 40 0:36 / /home/ada/local rw,relatime shared:21 - tmpfs tmpfs rw
42 22 0:37 / /mnt/my\\040share rw,relatime - cifs //nas/share rw
"""


async def diagnose(url: str, **options: Any) -> Diagnosis:
    async with connect(url, **options) as manager:
        return await manager.diagnose()


def by_check(report: Diagnosis) -> dict[str, Finding]:
    return {f.check: f for f in report.findings}


async def test_a_file_other_users_can_read_is_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}"
    async with connect(url) as manager:
        await manager.create("a")
    os.chmod(path, 0o644)
    found = by_check(await diagnose(url))["sqlite.permissions"]
    assert found.severity == "warning"
    assert "0644" in found.found
    os.chmod(path, 0o640)
    assert by_check(await diagnose(url))["sqlite.permissions"].severity == "info"
    os.chmod(path, 0o600)
    assert by_check(await diagnose(url))["sqlite.permissions"].severity == "ok"


async def test_a_well_configured_file_reports_nothing_above_info(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    url = f"sqlite:///{path}?synchronous=full"
    async with connect(url):
        pass
    os.chmod(path, 0o600)
    report = await diagnose(url)
    assert report.at_least("warning") == (), report.at_least("warning")
    found = by_check(report)
    assert found["sqlite.journal_mode"].severity == "ok"
    assert found["sqlite.synchronous"].severity == "ok"
    assert found["sqlite.schema_version"].severity == "ok"
    assert found["sqlite.disk_space"].severity in ("ok", "warning")
    # The temp directory is on a local disk, as Linux's mount table says (elsewhere the
    # table is missing and the check says it could not tell).
    assert found["sqlite.filesystem"].severity == ("ok" if sys.platform == "linux" else "info")
    normal = by_check(await diagnose(f"sqlite:///{path}"))["sqlite.synchronous"]
    assert normal.severity == "info"


async def test_memory_database_is_a_warning() -> None:
    found = by_check(await diagnose("sqlite:///:memory:"))
    assert found["sqlite.memory"].severity == "warning"


def test_network_filesystems_from_a_recorded_mount_table() -> None:
    assert filesystem_of("/home/ada/s.db", MOUNTINFO) == "nfs4"
    assert filesystem_of("/home/ada/local/s.db", MOUNTINFO) == "tmpfs"
    assert filesystem_of("/homework/s.db", MOUNTINFO) == "ext4"
    assert filesystem_of("/mnt/my share/s.db", MOUNTINFO) == "cifs"
    assert filesystem("nfs4", "/home/ada/s.db").severity == "critical"
    assert filesystem("cifs", "x").severity == "critical"
    assert filesystem("ext4", "x").severity == "ok"
    assert filesystem(None, "x").severity == "info"


def test_recorded_pragmas_and_disk_space() -> None:
    assert journal_mode("delete").severity == "error"
    assert journal_mode("WAL").severity == "ok"
    assert synchronous(0).severity == "error"
    gib = 1 << 30
    assert disk_space(50 << 20, 100 * gib, "/d").severity == "error"
    assert disk_space(gib // 2, 100 * gib, "/d").severity == "warning"
    assert disk_space(3 * gib, 100 * gib, "/d").severity == "warning"  # under 5 %
    assert disk_space(30 * gib, 100 * gib, "/d").severity == "ok"


async def test_encryption_at_rest_is_the_clients_to_give(tmp_path: Path) -> None:
    # SQLite cannot encrypt its own files: off, the finding says so and names the
    # disk; the client's encryption, on, makes it ok.
    url = f"sqlite:///{tmp_path / 's.db'}"
    found = by_check(await diagnose(url))["sqlite.encryption_at_rest"]
    assert found.severity == "info"
    assert found.found.startswith("SQLite does not encrypt the database file")
    assert "encrypt the disk" in found.fix and "Keyring" in found.fix
    keyring = pytest.importorskip("agentsessions.encryption").Keyring({"k1": bytes(range(32))})
    found = by_check(await diagnose(url, encryption=keyring))["sqlite.encryption_at_rest"]
    assert found.severity == "ok"
    assert found.found.startswith("client-side encryption is on")
