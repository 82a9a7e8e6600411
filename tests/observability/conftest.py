"""Fixtures for the instrumentation tests: SDK providers with in-memory exporters, and
one store per backend (memory, embedded SQLite, a PostgreSQL server).

Each test gets its own providers, so spans and cumulative metrics never leak between
tests, and every test leaves the global instrumentation switched off.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import agentsessions
import pytest
import pytest_asyncio
from agentsessions.otel import OpenTelemetry

# The SDK is a test dependency (nox installs it): a missing one fails, never skips.
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Telemetry:
    """What one test's providers collected."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    tracer_provider: TracerProvider
    meter_provider: MeterProvider

    def plugin(self, **kwargs: Any) -> OpenTelemetry:
        return OpenTelemetry(
            tracer_provider=self.tracer_provider, meter_provider=self.meter_provider, **kwargs
        )

    def spans(self) -> list[ReadableSpan]:
        """Finished spans in the order they started."""
        return sorted(self.exporter.get_finished_spans(), key=lambda s: s.start_time or 0)

    def roots(self) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.parent is None]

    def children(self, span: ReadableSpan) -> list[ReadableSpan]:
        assert span.context is not None
        return [
            s
            for s in self.spans()
            if s.parent is not None and s.parent.span_id == span.context.span_id
        ]

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """(attributes, data point) of every point of the metric *name*."""
        data = self.reader.get_metrics_data()
        found: list[tuple[dict[str, Any], Any]] = []
        if data is None:
            return found
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found += [(dict(p.attributes or {}), p) for p in metric.data.data_points]
        return found

    def total(self, name: str, **attributes: Any) -> float:
        """The sum of a counter's points whose attributes include *attributes*."""
        return sum(
            point.value
            for attrs, point in self.points(name)
            if all(attrs.get(k) == v for k, v in attributes.items())
        )


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Telemetry(exporter, reader, tracer_provider, meter_provider)
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture(autouse=True)
def _global_instrumentation_off() -> Iterator[None]:
    yield
    agentsessions.uninstrument()


def closed_loopback_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def lose_the_race(rival: agentsessions.SessionManager, session_id: str) -> None:
    """Save *session_id* through *rival*, so that any copy loaded before is now stale."""
    other = await rival.get(session_id)
    assert other is not None
    await rival.save(other)


@dataclass
class Store:
    """A URL that two managers can share, and what instrumentation should report for it."""

    url: str
    backend: dict[str, Any]
    name: str


@pytest_asyncio.fixture(params=["memory", "sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    kind = request.param
    if kind == "memory":
        yield Store(f"memory://otel-{uuid.uuid4().hex}", {"db.system.name": "memory"}, kind)
        return
    if kind == "sqlite":
        yield Store(f"sqlite:///{tmp_path / 'otel.db'}", {"db.system.name": "sqlite"}, kind)
        return
    import asyncpg

    postgres_url: str = request.getfixturevalue("postgres_url")
    schema = f"as_otel_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in postgres_url else "?"
    parts = urlsplit(postgres_url)
    backend: dict[str, Any] = {
        "db.system.name": "postgresql",
        "server.address": parts.hostname,
        "server.port": parts.port or 5432,
    }
    if parts.path.strip("/"):
        backend["db.namespace"] = parts.path.strip("/")
    yield Store(f"{postgres_url}{sep}schema={schema}", backend, kind)
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await connection.close()
