"""Instrumentation: a pluggy hook around every public manager operation, free when off.

An instrumented manager gets, in its own instance dictionary, a wrapper for each
operation in `OPERATIONS` (and for the write hooks, to count what each write stores);
the class's methods are untouched. A manager nobody instruments has no wrapper at all,
so switching instrumentation off costs nothing on any call: no flag is even checked.

Each wrapped call becomes an `Operation`, handed to the plugins' hooks
``agentsessions_operation_started`` and ``agentsessions_operation_finished``. The
OpenTelemetry plugin (`agentsessions.otel`) is one such plugin; a Prometheus exporter
or an audit log implements the same two hooks. Plugins are turned on explicitly, for
every manager (`instrument`) or for one (``connect(url, instrument=...)``).

The same wrappers watch a manager whose connection was lost, until a call succeeds
again, so that the recovery can be logged (see `_log`) without any cost while healthy.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

import pluggy

from . import _log
from ._errors import (
    InvalidInputError,
    SessionConflictError,
    SessionExistsError,
    SessionNotFoundError,
    SessionOwnershipError,
)

if TYPE_CHECKING:
    from ._manager import SessionManager

__all__ = [
    "ENTRY_POINT_GROUP",
    "OPERATIONS",
    "Operation",
    "backend_attributes",
    "connection_failed",
    "connection_lost",
    "connection_opened",
    "deadline_exceeded",
    "inherit",
    "instrument",
    "instrumented",
    "track",
    "uninstrument",
]

#: The public operations that are observed, by their method names.
OPERATIONS = (
    "open",
    "create",
    "restore",
    "get",
    "save",
    "update",
    "delete",
    "delete_user",
    "list_sessions",
    "purge_expired",
    "compact",
)
#: Entry points naming instrumentation plugins, so ``instrument("name")`` finds them.
ENTRY_POINT_GROUP = "agentsessions.instrumentation"
_BUILTIN = {"otel": "agentsessions.otel:OpenTelemetry"}
# The errors that prove the backend answered (a lost connection is back).
_ANSWERS = (SessionConflictError, SessionExistsError, SessionNotFoundError, SessionOwnershipError)

_hookspec = pluggy.HookspecMarker("agentsessions")
_hookimpl = pluggy.HookimplMarker("agentsessions")


@dataclass(eq=False)
class Operation:
    """One call of a public manager operation, as instrumentation plugins see it.

    Set when it starts: ``name`` (one of `OPERATIONS`), ``manager``, ``parent`` (the
    operation this one runs inside, e.g. the ``get`` and ``save`` of an ``update``),
    ``session_id`` / ``user_id`` when the call names them, ``tail_read`` for a read
    (whether ``last_events`` was given) and ``backend`` (the semantic-convention
    attributes of the manager, see `backend_attributes`).

    Set when it finishes: ``duration`` (seconds), ``error`` (the exception it raised,
    if any) and what it did: ``events_read``, ``events_written``, ``events_removed``
    and ``bytes_written`` (the encoded events and state; an operation counts its
    children's too), ``version`` (of the session afterwards), ``found`` (``get``),
    ``sessions`` (listed, deleted or purged), ``conflicts`` (the stale saves inside an
    ``update``) and ``retries`` (how often the ``update`` went round again).

    ``data`` is scratch space for plugins, keyed by the plugin.
    """

    name: str
    manager: SessionManager
    parent: Operation | None = None
    backend: Mapping[str, str | int] = field(default_factory=dict)
    session_id: str | None = None
    user_id: str | None = None
    tail_read: bool | None = None
    started: float = 0.0
    duration: float | None = None
    error: BaseException | None = None
    events_read: int = 0
    events_written: int = 0
    events_removed: int = 0
    bytes_written: int = 0
    version: int | None = None
    found: bool | None = None
    sessions: int | None = None
    conflicts: int = 0
    retries: int = 0
    data: dict[object, Any] = field(default_factory=dict)


class _HookSpecs:
    @_hookspec
    def agentsessions_operation_started(self, operation: Operation) -> None:
        """A manager operation is about to run (its span starts here)."""

    @_hookspec
    def agentsessions_operation_finished(self, operation: Operation) -> None:
        """A manager operation returned or raised (``operation.error``)."""


_current: contextvars.ContextVar[Operation | None] = contextvars.ContextVar(
    "agentsessions_operation", default=None
)


def _str(value: object) -> str | None:
    return value if type(value) is str else None


def _count_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


# -- what each operation's arguments and result say ----------------------------------


def _start_session(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    op.session_id = _str(args[0] if args else kwargs.get("session_id"))
    op.user_id = _str(kwargs.get("user_id"))


def _start_create(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    _start_session(op, args, kwargs)
    op.user_id = _str(args[1] if len(args) > 1 else kwargs.get("user_id"))


def _start_read(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    _start_session(op, args, kwargs)
    op.tail_read = kwargs.get("last_events") is not None


def _start_save(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    session = args[0] if args else kwargs.get("session")
    op.session_id = _str(getattr(session, "session_id", None))
    op.user_id = _str(getattr(session, "user_id", None))


def _start_user(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    op.user_id = _str(args[0] if args else kwargs.get("user_id"))


def _start_listing(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    op.user_id = _str(kwargs.get("user_id"))


def _start_nothing(op: Operation, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    pass


def _end_session(op: Operation, result: Any) -> None:
    if op.name == "get":
        op.found = result is not None
        if result is not None:
            op.events_read = len(result.events)
    if result is not None:
        op.version = result.version


def _end_count(op: Operation, result: Any) -> None:
    op.sessions = int(result)


def _end_listing(op: Operation, result: Any) -> None:
    op.sessions = len(result.items)


def _end_nothing(op: Operation, result: Any) -> None:
    pass


_Start = Callable[[Operation, tuple[Any, ...], dict[str, Any]], None]
_End = Callable[[Operation, Any], None]
_DESCRIBE: dict[str, tuple[_Start, _End]] = {
    "open": (_start_nothing, _end_nothing),
    "create": (_start_create, _end_session),
    "restore": (_start_save, _end_session),
    "get": (_start_read, _end_session),
    "save": (_start_save, _end_nothing),
    "update": (_start_read, _end_session),
    "delete": (_start_session, _end_count),
    "delete_user": (_start_user, _end_count),
    "list_sessions": (_start_listing, _end_listing),
    "purge_expired": (_start_nothing, _end_count),
    "compact": (_start_save, _end_nothing),
}


def _finish(op: Operation) -> None:
    """Settle the counts that depend on how the call ended, and add them to the parent."""
    if op.name == "update":
        op.retries = max(0, op.conflicts - isinstance(op.error, SessionConflictError))
    parent = op.parent
    if parent is None:
        return
    parent.events_read += op.events_read
    parent.events_written += op.events_written
    parent.events_removed += op.events_removed
    parent.bytes_written += op.bytes_written
    if op.name == "save" and isinstance(op.error, SessionConflictError):
        parent.conflicts += 1


# -- the wrappers ---------------------------------------------------------------------


class _Hooks:
    """The plugins one manager reports to, behind one pluggy plugin manager."""

    def __init__(self, plugins: Iterable[object], backend: Mapping[str, str | int]) -> None:
        self.plugins = list(plugins)
        self.backend = backend
        pm = pluggy.PluginManager("agentsessions")
        pm.add_hookspecs(_HookSpecs)
        for plugin in self.plugins:
            pm.register(plugin)
        self._started = pm.hook.agentsessions_operation_started
        self._finished = pm.hook.agentsessions_operation_finished

    def started(self, op: Operation) -> None:
        try:
            self._started(operation=op)
        except Exception:  # a broken plugin must not fail the application's call
            _log.plugin_failed(op.manager, "agentsessions_operation_started")

    def finished(self, op: Operation) -> None:
        try:
            self._finished(operation=op)
        except Exception:
            _log.plugin_failed(op.manager, "agentsessions_operation_finished")


def _wrap_operation(manager: SessionManager, name: str, hooks: _Hooks) -> Callable[..., Any]:
    original = getattr(type(manager), name).__get__(manager)
    start, end = _DESCRIBE[name]

    @functools.wraps(original)
    async def call(*args: Any, **kwargs: Any) -> Any:
        op = Operation(name, manager, _current.get(), hooks.backend)
        start(op, args, kwargs)
        token = _current.set(op)
        hooks.started(op)
        op.started = time.perf_counter()
        try:
            result = await original(*args, **kwargs)
        except BaseException as exc:
            op.error = exc
            raise
        else:
            end(op, result)
            return result
        finally:
            op.duration = time.perf_counter() - op.started
            _current.reset(token)
            _finish(op)
            hooks.finished(op)

    return call


def _written(op: Operation, record: Any, events: Any) -> None:
    op.events_written += len(events)
    op.bytes_written += _count_bytes(record.state) + sum(_count_bytes(e.data) for e in events)


def _count_create(op: Operation, record: Any, now: Any) -> None:
    _written(op, record, ())


def _count_save(op: Operation, request: Any, now: Any) -> None:
    _written(op, request.record, request.new_events)
    op.events_removed += request.stored_event_count - request.keep
    op.version = request.record.version


def _count_restore(op: Operation, record: Any, events: Any, now: Any) -> None:
    _written(op, record, events)


def _count_compact(op: Operation, request: Any, now: Any) -> None:
    op.events_written += len(request.new_events)
    op.bytes_written += sum(_count_bytes(e.data) for e in request.new_events)
    op.events_removed += request.replaced
    op.version = request.version


# The backend hooks that write, and what each call of one wrote (counted once it returned).
_WRITE_HOOKS: dict[str, Callable[..., None]] = {
    "_create": _count_create,
    "_save": _count_save,
    "_restore": _count_restore,
    "_compact": _count_compact,
}
_WRAPPED = (*OPERATIONS, *_WRITE_HOOKS)


def _wrap_write_hook(manager: SessionManager, name: str) -> Callable[..., Any]:
    original = getattr(type(manager), name).__get__(manager)
    count = _WRITE_HOOKS[name]

    @functools.wraps(original)
    async def hook(*args: Any, **kwargs: Any) -> None:
        await original(*args, **kwargs)
        op = _current.get()
        if op is not None:
            count(op, *args, **kwargs)

    return hook


def _install(manager: SessionManager, hooks: _Hooks) -> None:
    attributes = vars(manager)
    for name in OPERATIONS:
        attributes[name] = _wrap_operation(manager, name, hooks)
    for name in _WRITE_HOOKS:
        attributes[name] = _wrap_write_hook(manager, name)


def _uninstall(manager: SessionManager) -> None:
    attributes = vars(manager)
    for name in _WRAPPED:
        attributes.pop(name, None)


# -- which plugins each manager reports to -------------------------------------------

_lock = threading.RLock()
_live: weakref.WeakSet[SessionManager] = weakref.WeakSet()
_global: list[object] = []
_local: weakref.WeakKeyDictionary[SessionManager, list[object]] = weakref.WeakKeyDictionary()
_installed: weakref.WeakKeyDictionary[SessionManager, _Hooks] = weakref.WeakKeyDictionary()
_outages: weakref.WeakKeyDictionary[SessionManager, _Outage] = weakref.WeakKeyDictionary()
_named: dict[str, object] = {}


@dataclass
class _Outage:
    since: float
    failures: int = 1


class _RecoveryWatch:
    """Installed only while a manager's connection is lost: logs the first success."""

    @_hookimpl
    def agentsessions_operation_finished(self, operation: Operation) -> None:
        if operation.parent is not None:
            return
        error = operation.error
        if error is None or isinstance(error, _ANSWERS):
            _recovered(operation.manager)


_RECOVERY_WATCH = _RecoveryWatch()


def _refresh(manager: SessionManager) -> None:
    with _lock:
        plugins = [*_global, *_local.get(manager, ())]
        if manager in _outages:
            plugins.append(_RECOVERY_WATCH)
        if not plugins:
            _installed.pop(manager, None)
            _uninstall(manager)
            return
        current = _installed.get(manager)
        if current is not None and current.plugins == plugins:
            return
        hooks = _Hooks(plugins, backend_attributes(manager))
        _installed[manager] = hooks
        _install(manager, hooks)


def track(manager: SessionManager) -> None:
    """Called by every new manager: instrument it if `instrument` was called globally."""
    with _lock:
        _live.add(manager)
        if _global:
            _refresh(manager)


def inherit(source: SessionManager, target: SessionManager) -> None:
    """*target* (a ``with_options`` copy of *source*) reports to *source*'s own plugins."""
    with _lock:
        plugins = _local.get(source)
        if plugins:
            _local[target] = list(plugins)
            _refresh(target)


def instrumented(manager: SessionManager) -> list[object]:
    """The plugins *manager* reports to (its own and the global ones)."""
    with _lock:
        hooks = _installed.get(manager)
        return [] if hooks is None else [p for p in hooks.plugins if p is not _RECOVERY_WATCH]


def _resolve(plugin: object) -> object:
    """A plugin object from what `instrument` was given: an object, or a name."""
    if plugin is True or plugin is None:
        plugin = "otel"
    if not isinstance(plugin, str):
        return plugin
    with _lock:
        if plugin in _named:
            return _named[plugin]
    target = _BUILTIN.get(plugin)
    if target is None:
        found = entry_points(group=ENTRY_POINT_GROUP, name=plugin)
        if not found:
            raise InvalidInputError(
                f"no instrumentation plugin named {plugin!r} (entry points in "
                f"{ENTRY_POINT_GROUP!r}; built in: {', '.join(sorted(_BUILTIN))})"
            )
        loaded = next(iter(found)).load()
    else:
        import importlib

        module, _, attr = target.partition(":")
        loaded = getattr(importlib.import_module(module), attr)
    instance = loaded() if isinstance(loaded, type) else loaded
    with _lock:
        return _named.setdefault(plugin, instance)


def _plugins(given: Iterable[object]) -> list[object]:
    plugins = [_resolve(p) for p in given]
    return plugins or [_resolve("otel")]


def instrument(*plugins: object, manager: SessionManager | None = None) -> list[object]:
    """Turn instrumentation on: every manager (existing and future) or only *manager*.

    Each plugin is an object implementing the ``agentsessions_operation_*`` hooks, or
    the name of one: ``"otel"`` (the default, `agentsessions.otel.OpenTelemetry` with
    the global tracer and meter providers; needs ``agentsessions[otel]``) or an entry
    point in the group ``agentsessions.instrumentation``. Calling it again with the same
    plugin changes nothing. Returns the plugins now reporting for that scope.
    """
    resolved = _plugins(plugins)
    with _lock:
        if manager is None:
            scope = _global
            targets: Iterable[SessionManager] = list(_live)
        else:
            scope = _local.setdefault(manager, [])
            targets = [manager]
        for plugin in resolved:
            if not any(plugin is known for known in scope):
                scope.append(plugin)
        for target in targets:
            _refresh(target)
        return list(scope)


def uninstrument(*plugins: object, manager: SessionManager | None = None) -> None:
    """Undo `instrument`: remove *plugins* (all when none are given) from that scope.

    The managers left with no plugin lose their wrappers and cost nothing again.
    """
    with _lock:
        scope = _global if manager is None else _local.get(manager, [])
        removing = [_resolve(p) for p in plugins] if plugins else list(scope)
        scope[:] = [p for p in scope if not any(p is r for r in removing)]
        for target in list(_live) if manager is None else [manager]:
            _refresh(target)
        # A named plugin nobody uses any more is built afresh by the next instrument(),
        # with the providers of that moment.
        in_use = [*_global, *(p for plugins in _local.values() for p in plugins)]
        for name, plugin in list(_named.items()):
            if not any(plugin is p for p in in_use):
                del _named[name]


# -- connection health, for the operator's log ----------------------------------------


def connection_opened(manager: SessionManager) -> None:
    """`open` succeeded: log it, and the end of an outage if there was one."""
    _log.connection_opened(manager)
    if manager in _outages:
        _recovered(manager)


def connection_failed(manager: SessionManager, error: BaseException) -> None:
    """`open` failed: log the first failure of an outage, count the others."""
    _outage(manager, error, _log.connection_failed)


def connection_lost(manager: SessionManager, error: BaseException) -> None:
    """A call on an open manager found the backend unreachable."""
    _outage(manager, error, _log.connection_lost)


def deadline_exceeded(manager: SessionManager, error: BaseException) -> None:
    """A call ran out of time: the backend is as good as unreachable until one succeeds."""
    if manager._opened:
        connection_lost(manager, error)
    else:
        connection_failed(manager, error)


def _outage(
    manager: SessionManager,
    error: BaseException,
    first: Callable[[SessionManager, BaseException], None],
) -> None:
    with _lock:
        outage = _outages.get(manager)
        if outage is not None:
            outage.failures += 1
            _log.still_unavailable(manager, error, outage.failures)
            return
        _outages[manager] = _Outage(time.monotonic())
        _refresh(manager)
    first(manager, error)


def _recovered(manager: SessionManager) -> None:
    with _lock:
        outage = _outages.pop(manager, None)
        if outage is None:
            return
        _refresh(manager)
    _log.connection_recovered(manager, time.monotonic() - outage.since, outage.failures)


# -- what the backend is, in semantic-convention attributes ---------------------------


def _server(url: str) -> tuple[str | None, int | None, str | None]:
    """The first host, its port and the path's database name in a server URL.

    Parsed by hand because a multi-host MongoDB URL (``h1:1,h2:2``) or a bracketed
    IPv6 host make `urllib` raise; the user-info part (the password) is dropped first.
    """
    rest = url.partition("://")[2].split("?", 1)[0].split("#", 1)[0]
    netloc, _, path = rest.partition("/")
    host = netloc.rpartition("@")[2].split(",", 1)[0]
    port: int | None = None
    if host.startswith("["):
        inside, _, after = host[1:].partition("]")
        host, port_text = inside, after[1:] if after.startswith(":") else ""
    else:
        host, _, port_text = host.partition(":")
    if port_text.isdigit():
        port = int(port_text)
    database = path.strip("/") or None
    return host or None, port, database


def backend_attributes(manager: SessionManager) -> dict[str, str | int]:
    """``db.system.name``, ``server.address``, ``server.port`` and ``db.namespace`` of
    *manager* (the last three for server backends), and our ``agentsessions.namespace``.

    A backend declares only `SessionManager.db_system` and, for a server,
    `SessionManager.default_port`; the rest comes from its URL, never its password.
    """
    cls = type(manager)
    url: str = manager._url
    attributes: dict[str, str | int] = {
        "db.system.name": cls.db_system or url.partition("://")[0].lower()
    }
    if cls.default_port is not None:
        host, port, database = _server(url)
        if host:  # (a Unix socket has none, and its path is no database name)
            attributes["server.address"] = host
            attributes["server.port"] = port or cls.default_port
            if database:
                attributes["db.namespace"] = database
    namespace = manager.options.namespace
    if namespace:
        attributes["agentsessions.namespace"] = namespace
    return attributes
