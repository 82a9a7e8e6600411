"""What a backend author needs: subclass `SessionManager`, implement its ``_`` hooks.

A backend moves the records defined here in and out of its engine; the manager's
public methods have already validated ids and options, checked that values are JSON,
encoded them and worked out what a save changed, and they check ownership themselves.
Register the backend with an entry point in the group ``agentsessions.backends`` (one
entry per URL scheme, pointing at a light module whose `hookimpl` returns
`BackendSpec`s), or in code with `agentsessions.register_backend`. Check it with the
conformance kit (``agentsessions-conformance``).

What every hook may rely on, and must honour:

- **Called on an open manager.** The public methods call `SessionManager._open`
  first (once, lazily) and never call a hook after `SessionManager.close`.
- **"now"** is the reading of the manager's `SessionManager.clock` (the system UTC
  clock unless set with ``connect(url, clock=...)``) for the public call that reached
  the hook: a timezone-aware UTC `datetime`, taken once per call and passed to every
  hook that needs it. Compare expiry against it, never against the engine's own clock
  or `datetime.now`, so that one call sees one instant and a test clock rules them all.
- **Expiry.** With the ``ttl`` option a written record has
  ``expires_at = now + ttl`` (`SessionManager._expiry`), else None. A session is
  expired when ``expires_at is not None and expires_at <= now``; an expired session is
  absent to every hook (not loaded, listed, counted or saved), whether or not the
  engine has removed it yet. `SessionManager._purge_expired` reclaims it.
- **Atomic.** A create, save or delete lands whole or not at all, and a concurrent
  reader, in any process, sees the state before it or after it, never in between.
- **Errors.** Contract errors (`agentsessions.SessionExistsError`,
  `agentsessions.SessionConflictError`, `agentsessions.SessionNotFoundError`) are raised
  by the hooks as documented on each; a failure of the engine or the network is raised
  as `agentsessions.BackendUnavailableError`: declare the driver's exceptions in
  `SessionManager.driver_errors` and let them propagate (the base class translates
  them, password masked), or build one with `SessionManager._unavailable`.
- **Any event loop, any thread.** A manager is shared by every event loop and thread of
  the process. Connections a driver binds to one event loop live in
  `SessionManager.per_loop` (opened per loop, released when that loop shuts down); a
  lock shared by all loops is a `LoopLock`, never an ``asyncio.Lock``.
"""

from ._branching import fork_by_copy
from ._deadline import ErrorRule
from ._diagnosis import (
    Finding,
    Severity,
    clock_skew,
    encryption_at_rest,
    finding,
    schema_version,
)
from ._driven import in_driven_loop
from ._loops import LoopLock, PerLoop
from ._manager import (
    MAX_LAST_EVENTS,
    MAX_POOL_SIZE,
    MAX_TIMEOUT,
    MAX_TTL,
    ManagerOptions,
    OptionConflict,
    PoolSize,
    SchemaTooNewError,
    SessionManager,
    Timeout,
    validate_id,
)
from ._records import (
    TOKENS_KEPT,
    Capabilities,
    CompactRequest,
    EventRecord,
    ForkRequest,
    LoadedSession,
    RewindRequest,
    SaveRequest,
    SessionRecord,
    decode_cursor,
    decode_events,
    decode_record,
    decode_summary,
    encode_cursor,
    encode_record,
    expiry_millis,
    fork_fields,
    fork_origin,
    from_micros,
    refused,
    stamp_lineage,
    to_micros,
    unstamp_lineage,
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
    "CompactRequest",
    "ErrorRule",
    "EventRecord",
    "Finding",
    "ForkRequest",
    "LoadedSession",
    "LoopLock",
    "ManagerOptions",
    "OptionConflict",
    "PerLoop",
    "PoolSize",
    "RewindRequest",
    "SaveRequest",
    "SchemaTooNewError",
    "ServerURL",
    "SessionManager",
    "SessionRecord",
    "Severity",
    "TOKENS_KEPT",
    "Timeout",
    "clock_skew",
    "encryption_at_rest",
    "decode_cursor",
    "decode_events",
    "decode_record",
    "decode_summary",
    "encode_cursor",
    "encode_record",
    "expiry_millis",
    "finding",
    "fork_by_copy",
    "fork_fields",
    "fork_origin",
    "from_micros",
    "in_driven_loop",
    "hookimpl",
    "hookspec",
    "mask_url",
    "parse_server_url",
    "refused",
    "schema_version",
    "scrub_secret",
    "split_url",
    "stamp_lineage",
    "to_micros",
    "unstamp_lineage",
    "validate_id",
]
