"""The options of a postgres URL (``?schema=app&max_pool_size=20&pgbouncer=true``)."""

from __future__ import annotations

import warnings

from agentsessions import InvalidOptionError
from agentsessions.backend import (
    MAX_POOL_SIZE,
    ManagerOptions,
    OptionConflict,
    PoolSize,
    Timeout,
    parse_server_url,
)
from pydantic import Field, field_validator, model_validator

__all__ = ["DRIVER_QUERY_PARAMS", "PostgresOptions", "check_url"]

#: libpq-style parameters asyncpg itself reads from the DSN; they stay in the URL so
#: asyncpg parses them exactly as users know them from psql. ``application_name`` and
#: ``options`` are passed on by asyncpg as startup parameters, as libpq does.
DRIVER_QUERY_PARAMS = frozenset(
    {
        "host",
        "port",
        "user",
        "password",
        "passfile",
        "dbname",
        "database",
        "service",
        "sslmode",
        "sslcert",
        "sslkey",
        "sslrootcert",
        "sslcrl",
        "sslpassword",
        "sslnegotiation",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "target_session_attrs",
        "krbsrvname",
        "gsslib",
        "application_name",
        "options",
    }
)


# The option is called ``schema`` because that is PostgreSQL's word for it. The name
# shadows pydantic's deprecated ``BaseModel.schema()``, which nobody calls on options;
# pydantic's warning about it is silenced here, for this class only.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message='Field name "schema"', category=UserWarning)

    class PostgresOptions(ManagerOptions):
        """Options of the PostgreSQL backend, on top of ``ttl`` and ``namespace``."""

        schema: str = Field(  # type: ignore[assignment]
            default="public",
            max_length=63,
            pattern=r"^[a-z_][a-z0-9_]*$",
            description="PostgreSQL schema holding the tables (created if missing); lower case "
            "so that it reads the same quoted or not in psql",
        )
        min_pool_size: int = Field(
            default=1, ge=0, le=MAX_POOL_SIZE, description="connections kept open"
        )
        max_pool_size: PoolSize = Field(default=10, description="connections at most")
        statement_timeout: Timeout | None = Field(
            default=None,
            description="seconds a statement may run before it is cancelled "
            "(server-side; client-side with pgbouncer)",
        )
        connect_timeout: Timeout = Field(
            default=10.0, description="seconds to wait for a new connection"
        )
        pgbouncer: bool = Field(
            default=False,
            description="running behind a transaction-pooling proxy such as PgBouncer: no "
            "named prepared statements, no startup parameters",
        )

        @field_validator("schema")
        @classmethod
        def _not_reserved(cls, schema: str) -> str:
            if schema.startswith("pg_"):
                raise ValueError("names starting with pg_ are reserved")
            return schema

        @model_validator(mode="after")
        def _pool_bounds(self) -> PostgresOptions:
            if self.min_pool_size > self.max_pool_size:
                raise OptionConflict(
                    ("min_pool_size", "max_pool_size"),
                    f"min_pool_size ({self.min_pool_size}) is larger than "
                    f"max_pool_size ({self.max_pool_size})",
                )
            return self


def check_url(url: str) -> None:
    """Parse every part of a postgres URL now, as `asyncpg` would at first use."""
    parts = parse_server_url(url, multi_host=True)
    for port in parts.query.get("port", "").split(","):
        if port and not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
            raise InvalidOptionError("URL port (in the query): not a number from 1 to 65535")
    if "\x00" in parts.path:
        raise InvalidOptionError("URL path: the database name must not contain NUL")
