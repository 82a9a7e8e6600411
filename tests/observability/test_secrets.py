"""A password in the URL never reaches a span, a metric or a log line: not on success,
not when the server is unreachable, not when a driver's own error message quotes the URL,
not even with ``record_ids=True`` (which puts exception messages on spans)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import pytest
from agentsessions import (
    BackendUnavailableError,
    MemorySessionManager,
    SessionManager,
    connect,
    register_backend,
    unregister_backend,
)
from agentsessions.backend import LoadedSession

from .conftest import Telemetry, closed_loopback_port

PASSWORD = "pw-S3CRET-41x"


def _everything(telemetry: Telemetry, caplog: pytest.LogCaptureFixture) -> str:
    """Every string the application's telemetry and log handlers received."""
    texts: list[str] = []
    for span in telemetry.spans():
        texts += [span.name, str(span.status.description), repr(dict(span.attributes or {}))]
        for event in span.events:
            texts += [event.name, repr(dict(event.attributes or {}))]
    data = telemetry.reader.get_metrics_data()
    if data is not None:
        texts.append(data.to_json())
    for record in caplog.records:
        texts += [record.getMessage(), repr(vars(record))]
        if record.exc_info:
            texts.append(logging.Formatter().formatException(record.exc_info))
    return "\n".join(texts)


async def _every_operation(manager: SessionManager) -> None:
    async with manager:
        session = await manager.create("s", "ada", state={"k": 1})
        session.add_event("user", "hi")
        await manager.save(session)
        await manager.get("s", last_events=1)
        await manager.update("s", lambda s: s.add_event("user", "more"))
        await manager.list_sessions(user_id="ada")
        await manager.delete("s")
        await manager.delete_user("ada")
        await manager.purge_expired()


async def test_a_password_never_leaves_on_a_working_server(
    postgres_url: str, telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("agentsessions_postgres")
    # The private test server trusts loopback, so any password is accepted and ignored.
    head, _, rest = postgres_url.partition("://")
    user_host = rest.split("/", 1)[0]
    if ":" in user_host.split("@")[0] or "@" not in user_host:
        pytest.skip("this PostgreSQL URL already carries its own credentials")
    url = f"{head}://{rest.replace('@', f':{PASSWORD}@', 1)}"
    url += ("&" if "?" in url else "?") + "namespace=secrets"
    caplog.set_level(logging.DEBUG, logger="agentsessions")
    manager = connect(url, instrument=telemetry.plugin(record_ids=True))
    await _every_operation(manager)
    everything = _everything(telemetry, caplog)
    assert len(telemetry.spans()) >= 10
    assert "connection_opened" in everything
    assert PASSWORD not in everything


async def test_a_password_never_leaves_when_the_server_is_unreachable(
    telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("agentsessions_postgres")
    caplog.set_level(logging.DEBUG, logger="agentsessions")
    url = f"postgresql://app:{PASSWORD}@127.0.0.1:{closed_loopback_port()}/db?connect_timeout=2"
    manager = connect(url, instrument=telemetry.plugin(record_ids=True))
    try:
        for _ in range(2):
            with pytest.raises(BackendUnavailableError):
                await manager.get("s")
    finally:
        await manager.close()
    everything = _everything(telemetry, caplog)
    assert "BackendUnavailableError" in everything
    assert "connection_failed" in everything
    assert PASSWORD not in everything


class Leaky(MemorySessionManager):
    """A backend whose driver quotes the whole URL, password included, in its errors."""

    default_port = 9

    async def _load(
        self, session_id: str, last_events: int | None, now: datetime
    ) -> LoadedSession | None:
        if session_id == "raw":
            raise RuntimeError(f"driver failed talking to {self._url}")
        raise self._unavailable(OSError(f"cannot reach {self._url} (password {PASSWORD})"))


async def test_a_password_quoted_by_a_driver_is_scrubbed_everywhere(
    telemetry: Telemetry, caplog: pytest.LogCaptureFixture
) -> None:
    register_backend("leaky", Leaky)
    caplog.set_level(logging.DEBUG, logger="agentsessions")
    try:
        manager = connect(
            f"leaky://app:{PASSWORD}@db.internal:9/x", instrument=telemetry.plugin(record_ids=True)
        )
        async with manager:
            for session_id in ("raw", "unavailable", "unavailable"):
                with pytest.raises((RuntimeError, BackendUnavailableError)):
                    await manager.get(session_id)
    finally:
        unregister_backend("leaky")
    spans: list[Any] = telemetry.spans()
    messages = [
        dict(event.attributes or {}).get("exception.message", "")
        for span in spans
        for event in span.events
    ]
    assert any("driver failed talking to leaky://app:***@db.internal" in m for m in messages)
    assert dict(spans[-1].attributes or {})["server.address"] == "db.internal"
    everything = _everything(telemetry, caplog)
    assert "connection_lost" in everything
    assert PASSWORD not in everything
