"""The options of a mysql URL (``?max_pool_size=20&lock_wait_timeout=5&ssl_ca=/ca.pem``)."""

from __future__ import annotations

from typing import Any

from agentsessions import InvalidOptionError
from agentsessions.backend import (
    MAX_POOL_SIZE,
    ManagerOptions,
    OptionConflict,
    PoolSize,
    Timeout,
    parse_server_url,
)
from pydantic import Field, model_validator

__all__ = ["DEFAULT_PORT", "MySQLOptions", "connect_arguments"]

DEFAULT_PORT = 3306


class MySQLOptions(ManagerOptions):
    """Options of the MySQL/MariaDB backend, on top of ``ttl``, ``namespace`` and ``timeout``."""

    min_pool_size: int = Field(
        default=1, ge=0, le=MAX_POOL_SIZE, description="connections kept open"
    )
    max_pool_size: PoolSize = Field(default=10, description="connections at most")
    connect_timeout: Timeout = Field(
        default=10.0, description="seconds to wait for a new connection (never past timeout)"
    )
    lock_wait_timeout: int = Field(
        default=5,
        ge=1,
        le=86400,
        description="seconds a statement waits for a row lock (innodb_lock_wait_timeout) "
        "before the write is retried or fails",
    )
    ssl: bool = Field(default=False, description="require TLS (implied by any ssl_* option)")
    ssl_ca: str | None = Field(
        default=None, min_length=1, description="CA bundle that verifies the server"
    )
    ssl_cert: str | None = Field(default=None, min_length=1, description="client certificate")
    ssl_key: str | None = Field(default=None, min_length=1, description="client key")
    ssl_verify: bool = Field(
        default=True, description="verify the server's certificate and host name"
    )

    @model_validator(mode="after")
    def _bounds(self) -> MySQLOptions:
        if self.min_pool_size > self.max_pool_size:
            raise OptionConflict(
                ("min_pool_size", "max_pool_size"),
                f"min_pool_size ({self.min_pool_size}) is larger than "
                f"max_pool_size ({self.max_pool_size})",
            )
        if (self.ssl_cert is None) != (self.ssl_key is None):
            raise OptionConflict(
                ("ssl_cert", "ssl_key"), "ssl_cert and ssl_key go together: give both or neither"
            )
        return self

    @property
    def uses_tls(self) -> bool:
        return self.ssl or any(
            value is not None for value in (self.ssl_ca, self.ssl_cert, self.ssl_key)
        )


def connect_arguments(url: str) -> dict[str, Any]:
    """asyncmy's ``connect()`` arguments for *url* (host, port, user, password, db).

    Every part is checked here, at `connect()`, before any I/O: one host, a port from 1
    to 65535, a database name (MySQL's limit is 64 characters, no NUL), no query
    parameter of the driver's own (options are ours, validated by `MySQLOptions`).
    """
    parts = parse_server_url(url)
    (host, port), *_ = parts.hosts
    if parts.query:
        name = sorted(parts.query)[0]
        raise InvalidOptionError(f"URL query parameter {name!r}: not an option of this backend")
    database = parts.path
    if not database:
        raise InvalidOptionError("URL path: name the database (mysql://user@host/DATABASE)")
    if "/" in database or "\x00" in database or len(database) > 64:
        raise InvalidOptionError(
            "URL path: a database name is 1 to 64 characters, without '/' or NUL"
        )
    return {
        "host": host or "127.0.0.1",
        "port": DEFAULT_PORT if port is None else port,
        "user": parts.username or "root",
        "password": parts.password or "",
        "db": database,
    }
