"""The options of a Redis URL (``?namespace=app&socket_timeout=2``) and the driver's own."""

from __future__ import annotations

from agentsessions.backend import ManagerOptions, PoolSize, Timeout
from pydantic import Field, field_validator

__all__ = ["DRIVER_QUERY_PARAMS", "RedisOptions", "parse_address_map"]

#: redis-py's own URL parameters: they stay in the URL, parsed as redis-py documents them.
DRIVER_QUERY_PARAMS = frozenset(
    {
        "db",
        "username",
        "password",
        "client_name",
        "health_check_interval",
        "socket_keepalive",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
        # The Sentinels' own credentials (redis+sentinel:// only), see _client.
        "sentinel_username",
        "sentinel_password",
    }
)


class RedisOptions(ManagerOptions):
    """Options of the Redis backend (query string or keyword arguments)."""

    socket_timeout: Timeout | None = Field(
        default=None,
        description="seconds to wait for one reply before giving up (default: the timeout)",
    )
    connect_timeout: Timeout | None = Field(
        default=None,
        description="seconds to wait for one connection (default: the timeout)",
    )
    max_connections: PoolSize | None = Field(
        default=None, description="connection pool size (per node in a cluster)"
    )
    retries: int = Field(
        default=3,
        ge=0,
        le=100,
        description="reconnect-and-resend attempts after a dropped connection, all within "
        "the call's timeout",
    )
    wait_replicas: int = Field(
        default=0,
        ge=0,
        le=100,
        description="replicas that must acknowledge every write (Redis WAIT) before it "
        "returns; fewer within wait_timeout raise BackendUnavailableError (not in a cluster)",
    )
    wait_timeout: Timeout = Field(
        default=1.0,
        description="seconds a write waits for wait_replicas acknowledgements (at most "
        "what is left of the call's timeout)",
    )
    address_map: str | None = Field(
        default=None,
        description="announced=reachable host:port pairs, comma-separated: where to reach "
        "a node a Cluster or the Sentinels announce under another address (NAT, a proxy); "
        "redis+cluster:// and redis+sentinel:// only",
    )

    @field_validator("address_map")
    @classmethod
    def _check_address_map(cls, value: str | None) -> str | None:
        if value is not None:
            parse_address_map(value)
        return value


def _address(text: str) -> tuple[str, int]:
    host, colon, port = text.strip().rpartition(":")
    host = host.strip("[]")
    if not colon or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise ValueError(f"{text.strip()!r} is not host:port")
    return host, int(port)


def parse_address_map(text: str) -> dict[tuple[str, int], tuple[str, int]]:
    """``"10.0.0.5:6379=127.0.0.1:16379,..."`` as {announced: reachable}."""
    pairs: dict[tuple[str, int], tuple[str, int]] = {}
    for item in text.split(","):
        announced, equals, reachable = item.partition("=")
        if not equals:
            raise ValueError(f"{item.strip()!r} is not announced=reachable (host:port=host:port)")
        pairs[_address(announced)] = _address(reachable)
    return pairs
