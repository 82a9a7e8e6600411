"""Instrumentation plugins: observe every manager operation, at no cost when off.

A plugin is any object with `hookimpl`-marked methods for one or both hooks::

    from agentsessions.instrumentation import Operation, hookimpl

    class AuditLog:
        @hookimpl
        def agentsessions_operation_finished(self, operation: Operation) -> None:
            if operation.name in ("delete", "delete_user") and operation.error is None:
                audit.write(operation.name, operation.user_id, operation.sessions)

    agentsessions.instrument(AuditLog())            # every manager
    connect(url, instrument=AuditLog())             # one manager

``agentsessions_operation_started(operation)`` runs before the call,
``agentsessions_operation_finished(operation)`` after it returned or raised, in the
caller's task (a plugin may keep per-call state in ``operation.data[self]``). A plugin
that raises is logged and does not fail the call. A distribution can publish a plugin
as an entry point in the group ``agentsessions.instrumentation``, so that
``instrument("its-name")`` finds it. The OpenTelemetry plugin is `agentsessions.otel`.
"""

from ._instrumentation import (
    ENTRY_POINT_GROUP,
    OPERATIONS,
    Operation,
    backend_attributes,
    instrument,
    instrumented,
    uninstrument,
)
from ._registry import hookimpl

__all__ = [
    "ENTRY_POINT_GROUP",
    "OPERATIONS",
    "Operation",
    "backend_attributes",
    "hookimpl",
    "instrument",
    "instrumented",
    "uninstrument",
]
