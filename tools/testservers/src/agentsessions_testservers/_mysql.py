"""A private MariaDB (or MySQL) server from the installed ``mariadbd``, on loopback.

Its data directory is made by ``mariadb-install-db`` in a private temporary folder,
and it runs with ``--skip-grant-tables`` (any user, no password, as every server here
is trust-authenticated) and one database, ``agentsessions_test``. Commits are durable
(``innodb_flush_log_at_trx_commit=1``), so a restart, even after SIGKILL, keeps every
acknowledged write: the fault tests rely on it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ._process import (
    LOOPBACK,
    ManagedServer,
    Process,
    ProcessServer,
    ServerUnavailable,
    free_port,
    make_workdir,
    run_checked,
    start_with_port_retry,
    tcp_accepts,
)

__all__ = ["DATABASE", "start_mysql"]

DATABASE = "agentsessions_test"


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name) or (
            f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None
        )
        if found:
            return found
    raise ServerUnavailable(f"none of {', '.join(names)} found")


def _build(
    server_bin: str, install_bin: str, start_timeout: float, extra: Sequence[str]
) -> ProcessServer:
    workdir = make_workdir("mysql")
    datadir = workdir / "data"
    port = free_port()
    as_root = ["--user=root"] if os.geteuid() == 0 else []
    run_checked(
        [
            install_bin,
            "--no-defaults",
            f"--datadir={datadir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *as_root,
        ],
        log_path=workdir / "install.log",
        what="mariadb-install-db",
        timeout=start_timeout,
    )
    (datadir / DATABASE).mkdir()  # a database is a directory: no client needed
    process = Process(
        name=f"mariadbd :{port}",
        port=port,
        argv=[
            server_bin,
            "--no-defaults",
            f"--datadir={datadir}",
            f"--port={port}",
            f"--bind-address={LOOPBACK}",
            f"--socket={workdir / 'mysqld.sock'}",
            f"--pid-file={workdir / 'mysqld.pid'}",
            "--skip-grant-tables",
            "--skip-name-resolve",
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=16M",
            "--max-allowed-packet=16M",
            *extra,
            *as_root,
        ],
        log_path=workdir / "server.log",
        ready=lambda: tcp_accepts(port),
        cwd=workdir,
    )
    return ProcessServer(
        kind="mysql",
        url=f"mysql://root@{LOOPBACK}:{port}/{DATABASE}",
        workdir=workdir,
        processes=[process],
        start_timeout=start_timeout,
    )


def start_mysql(*, start_timeout: float = 60.0, args: Sequence[str] = ()) -> ManagedServer:
    """Start a private MariaDB server on a free loopback port and return it running;
    *args* (``--name=value`` options) are added to its command line."""
    server_bin = _binary("mariadbd", "mysqld")
    install_bin = _binary("mariadb-install-db", "mysql_install_db")
    return start_with_port_retry(
        lambda: _build(server_bin, install_bin, start_timeout, tuple(args))
    )
