"""OpenTelemetry instrumentation: ``pip install "agentsessions[otel]"``.

``agentsessions.instrument()`` turns it on for every manager, with the global tracer
and meter providers; ``connect(url, instrument=OpenTelemetry(...))`` for one manager.
See docs/observability.md for the spans, attributes and metrics.
"""

try:
    from ._otel import OpenTelemetry
except ImportError as exc:  # pragma: no cover - exercised without opentelemetry-api
    raise ImportError(
        'agentsessions.otel needs opentelemetry-api: pip install "agentsessions[otel]"'
    ) from exc

__all__ = ["OpenTelemetry"]
