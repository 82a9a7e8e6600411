"""The OpenTelemetry plugin: a CLIENT span and metrics for every manager operation.

Follows the database client semantic conventions where they fit: span name
``{db.operation.name} {target}`` (the target is ``db.namespace``, else
``server.address:server.port``, else nothing, for embedded backends), the attributes
``db.system.name``, ``db.operation.name``, ``db.namespace``, ``server.address``,
``server.port``, ``error.type``, and the ``db.client.operation.duration`` histogram.
Our own attributes are under ``agentsessions.``. Only opentelemetry-api is imported:
the application brings the SDK and its exporters.

Secrets and identities stay out: attributes are built from the masked URL's parts,
never the password; session and user ids, and exception messages (ours name the
session), are recorded only with ``record_ids=True``, and then with the password
scrubbed from the message.
"""

from __future__ import annotations

import traceback
from typing import Any

from opentelemetry import context, metrics, trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from ._errors import BackendUnavailableError, SessionConflictError
from ._instrumentation import Operation, _hookimpl
from ._urls import scrub_secret
from ._version import __version__

__all__ = ["OpenTelemetry"]

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.33.0"
# The buckets the semantic conventions advise for db.client.operation.duration.
_DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
_WRITES = frozenset({"create", "restore", "save", "compact"})
_METRIC_KEYS = ("db.system.name", "server.address", "server.port", "db.namespace")


def _error_type(error: BaseException) -> str:
    cls = type(error)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


class OpenTelemetry:
    """Spans and metrics through the OpenTelemetry API.

    ``tracer_provider`` / ``meter_provider``: the providers to use (default: the global
    ones, set by the application's SDK setup). ``record_ids``: put
    ``agentsessions.session_id`` / ``agentsessions.user_id`` on spans and exception
    messages in exception events; off by default, as ids may identify people.
    """

    def __init__(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
        record_ids: bool = False,
    ) -> None:
        self.record_ids = record_ids
        self._tracer = trace.get_tracer(
            "agentsessions", __version__, tracer_provider, schema_url=_SCHEMA_URL
        )
        meter = metrics.get_meter(
            "agentsessions", __version__, meter_provider, schema_url=_SCHEMA_URL
        )
        self._duration = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of agentsessions manager operations.",
            explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
        )
        self._conflicts = meter.create_counter(
            "agentsessions.conflicts",
            unit="{conflict}",
            description="Saves refused because another save landed since the load.",
        )
        self._retries = meter.create_counter(
            "agentsessions.update.retries",
            unit="{retry}",
            description="Times update() reloaded and applied its function again.",
        )
        self._unavailable = meter.create_counter(
            "agentsessions.unavailable",
            unit="{error}",
            description="Operations that failed because the backend was unreachable or timed out.",
        )
        self._events_written = meter.create_counter(
            "agentsessions.events.written", unit="{event}", description="Events written."
        )
        self._bytes_written = meter.create_counter(
            "agentsessions.bytes.written",
            unit="By",
            description="Encoded bytes of events and state written.",
        )

    def __repr__(self) -> str:
        return f"<OpenTelemetry record_ids={self.record_ids}>"

    @_hookimpl
    def agentsessions_operation_started(self, operation: Operation) -> None:
        backend = operation.backend
        attributes: dict[str, Any] = {**backend, "db.operation.name": operation.name}
        if self.record_ids:
            if operation.session_id is not None:
                attributes["agentsessions.session_id"] = operation.session_id
            if operation.user_id is not None:
                attributes["agentsessions.user_id"] = operation.user_id
        target = backend.get("db.namespace")
        if target is None and "server.address" in backend:
            target = f"{backend['server.address']}:{backend['server.port']}"
        name = operation.name if target is None else f"{operation.name} {target}"
        span = self._tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)
        token = context.attach(trace.set_span_in_context(span))
        operation.data[self] = (span, token)

    @_hookimpl
    def agentsessions_operation_finished(self, operation: Operation) -> None:
        started = operation.data.pop(self, None)
        if started is None:
            return
        span, token = started
        context.detach(token)
        error = operation.error
        if span.is_recording():
            span.set_attributes(self._outcome(operation))
            if error is not None:
                self._record_error(span, operation, error)
        span.end()
        self._measure(operation, error)

    def _outcome(self, op: Operation) -> dict[str, Any]:
        attributes: dict[str, Any] = {}
        if op.tail_read is not None:
            attributes["agentsessions.tail_read"] = op.tail_read
        if op.found is not None:
            attributes["agentsessions.found"] = op.found
        if op.version is not None:
            attributes["agentsessions.version"] = op.version
        if op.events_read:
            attributes["agentsessions.events.read"] = op.events_read
        if op.events_written or op.name in _WRITES:
            attributes["agentsessions.events.written"] = op.events_written
            attributes["agentsessions.bytes.written"] = op.bytes_written
        if op.events_removed:
            attributes["agentsessions.events.removed"] = op.events_removed
        if op.sessions is not None:
            attributes["agentsessions.sessions"] = op.sessions
        if op.name == "update":
            attributes["agentsessions.update.conflicts"] = op.conflicts
            attributes["agentsessions.update.retries"] = op.retries
        return attributes

    def _record_error(self, span: trace.Span, op: Operation, error: BaseException) -> None:
        error_type = _error_type(error)
        span.set_attribute("error.type", error_type)
        event: dict[str, Any] = {
            "exception.type": error_type,
            # The frames only: the last line of a formatted exception is its message.
            "exception.stacktrace": scrub_secret(
                "".join(traceback.format_tb(error.__traceback__)), op.manager._url
            ),
        }
        description = error_type
        if self.record_ids:
            message = scrub_secret(str(error), op.manager._url)
            event["exception.message"] = message
            description = f"{error_type}: {message}"
        span.add_event("exception", event)
        span.set_status(Status(StatusCode.ERROR, description))

    def _measure(self, op: Operation, error: BaseException | None) -> None:
        backend = op.backend
        common = {key: backend[key] for key in _METRIC_KEYS if key in backend}
        attributes: dict[str, Any] = {**common, "db.operation.name": op.name}
        if error is not None:
            attributes["error.type"] = _error_type(error)
        if op.duration is not None:
            self._duration.record(op.duration, attributes)
        if op.name in _WRITES and error is None:
            written = {**common, "db.operation.name": op.name}
            self._events_written.add(op.events_written, written)
            self._bytes_written.add(op.bytes_written, written)
        if op.name == "save" and isinstance(error, SessionConflictError):
            self._conflicts.add(1, common)
        if op.name == "update" and op.retries:
            self._retries.add(op.retries, common)
        # Counted once per call of the application's: an update whose get fails raises
        # the same error, and so does the get whose open failed.
        if isinstance(error, BackendUnavailableError) and op.parent is None:
            self._unavailable.add(1, {**common, "error.type": _error_type(error)})
