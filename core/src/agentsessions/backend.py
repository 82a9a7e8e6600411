"""What a backend author needs: subclass `SessionManager`, implement its ``_`` hooks.

A backend moves these records in and out of its engine; the manager's public
methods have already validated ids, checked JSON and worked out what changed.
Register it with an entry point in the group ``agentsessions.backends`` (one entry
per URL scheme, pointing at a light module whose `hookimpl` returns `BackendSpec`s),
or in code with `agentsessions.register_backend`. Check it with the conformance kit.

A manager is used from any event loop and thread. A driver whose connections belong
to one event loop keeps them in `SessionManager.per_loop`; a lock shared by all loops
is a `LoopLock`, never an ``asyncio.Lock``.
"""

from ._loops import LoopLock, PerLoop
from ._manager import ManagerOptions, SessionManager, validate_id
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
from ._urls import mask_url, scrub_secret, split_url

__all__ = [
    "BackendSpec",
    "Capabilities",
    "EventRecord",
    "LoadedSession",
    "LoopLock",
    "ManagerOptions",
    "PerLoop",
    "SaveRequest",
    "SessionManager",
    "SessionRecord",
    "decode_cursor",
    "decode_events",
    "encode_cursor",
    "from_micros",
    "hookimpl",
    "hookspec",
    "mask_url",
    "scrub_secret",
    "split_url",
    "to_micros",
    "validate_id",
]
