"""What a backend author needs: subclass `SessionManager`, implement its ``_`` hooks.

A backend moves these records in and out of its engine; the manager's public
methods have already validated ids, checked JSON and worked out what changed.
Register it with an entry point in the group ``agentsessions.backends`` (one entry
per URL scheme, pointing at a light module whose `hookimpl` returns `BackendSpec`s),
or in code with `agentsessions.register_backend`. Check it with the conformance kit.
"""

from ._manager import (
    MAX_LAST_EVENTS,
    MAX_POOL_SIZE,
    MAX_TIMEOUT,
    MAX_TTL,
    ManagerOptions,
    PoolSize,
    SessionManager,
    Timeout,
    validate_id,
)
from ._records import (
    Capabilities,
    EventRecord,
    LoadedSession,
    SaveRequest,
    SessionRecord,
    decode_cursor,
    decode_events,
    encode_cursor,
    from_micros,
    to_micros,
)
from ._registry import BackendSpec, hookimpl, hookspec
from ._urls import (
    PERCENT_ENCODING_HINT,
    ServerURL,
    mask_url,
    parse_server_url,
    scrub_secret,
    split_url,
)

__all__ = [
    "MAX_LAST_EVENTS",
    "MAX_POOL_SIZE",
    "MAX_TIMEOUT",
    "MAX_TTL",
    "PERCENT_ENCODING_HINT",
    "BackendSpec",
    "Capabilities",
    "EventRecord",
    "LoadedSession",
    "ManagerOptions",
    "PoolSize",
    "SaveRequest",
    "ServerURL",
    "SessionManager",
    "SessionRecord",
    "Timeout",
    "decode_cursor",
    "decode_events",
    "encode_cursor",
    "from_micros",
    "hookimpl",
    "hookspec",
    "mask_url",
    "parse_server_url",
    "scrub_secret",
    "split_url",
    "to_micros",
    "validate_id",
]
