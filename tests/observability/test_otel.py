"""The OpenTelemetry plugin: a span per operation with the semantic-convention and our own
attributes, errors recorded with their type, and the metrics, on memory, SQLite and
PostgreSQL (the SDK's in-memory exporter and metric reader read them back)."""

from __future__ import annotations

import asyncio
from typing import Any

import agentsessions
import pytest
from agentsessions import BackendUnavailableError, Session, SessionConflictError, _json, connect
from opentelemetry.trace import SpanKind, StatusCode

from .conftest import Store, Telemetry, closed_loopback_port, lose_the_race


def _type_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _written_bytes(session: Session, new_events: int) -> int:
    """What a save of *session* writes: the state and the newest *new_events* events."""
    events = session.events[len(session.events) - new_events :] if new_events else []
    return len(_json.dumps(session.state).encode()) + sum(
        len(event.model_dump_json().encode()) for event in events
    )


def _span_name(operation: str, store: Store) -> str:
    backend = store.backend
    if "db.namespace" in backend:
        return f"{operation} {backend['db.namespace']}"
    if "server.address" in backend:
        return f"{operation} {backend['server.address']}:{backend['server.port']}"
    return operation


async def test_every_operation_is_a_client_span_with_its_attributes(
    store: Store, telemetry: Telemetry
) -> None:
    async with connect(store.url, instrument=telemetry.plugin()) as manager:
        session = await manager.create("s1", "ada", state={"topic": "tea"})
        session.add_event("user", "hello")
        session.add_event("assistant", "hi there")
        await manager.save(session)
        full = await manager.get("s1")
        tail = await manager.get("s1", last_events=1)
        assert await manager.get("nobody") is None
        updated = await manager.update("s1", lambda s: s.add_event("user", "more"))
        page = await manager.list_sessions(user_id="ada")
        await manager.create("s2", "ada")
        assert await manager.delete("s1")
        assert await manager.delete_user("ada") == 1
        purged = await manager.purge_expired()
        moved = await manager.restore(full.model_copy(update={"session_id": "moved"}))
    assert full is not None and tail is not None

    roots = telemetry.roots()
    assert [span.name for span in roots] == [
        _span_name(op, store)
        for op in (
            "open",
            "create",
            "save",
            "get",
            "get",
            "get",
            "update",
            "list_sessions",
            "create",
            "delete",
            "delete_user",
            "purge_expired",
            "restore",
        )
    ]
    for span in telemetry.spans():
        assert span.kind is SpanKind.CLIENT
        attributes = dict(span.attributes or {})
        for key, value in store.backend.items():
            assert attributes[key] == value, (span.name, key)
        assert attributes["db.operation.name"] == span.name.split(" ")[0]
        assert span.status.status_code is StatusCode.UNSET
        # Off by default: no ids.
        assert "agentsessions.session_id" not in attributes
        assert "agentsessions.user_id" not in attributes

    by_op: dict[str, list[dict[str, Any]]] = {}
    for span in roots:
        by_op.setdefault(span.name.split(" ")[0], []).append(dict(span.attributes or {}))
    created = by_op["create"][0]
    assert created["agentsessions.version"] == 1
    assert created["agentsessions.events.written"] == 0
    assert created["agentsessions.bytes.written"] == len(b'{"topic":"tea"}')
    saved = by_op["save"][0]
    assert saved["agentsessions.version"] == 2
    assert saved["agentsessions.events.written"] == 2
    assert saved["agentsessions.bytes.written"] == _written_bytes(full, 2)
    read_full, read_tail, read_missing = by_op["get"]
    assert read_full["agentsessions.events.read"] == 2
    assert read_full["agentsessions.tail_read"] is False
    assert read_full["agentsessions.found"] is True
    assert read_full["agentsessions.version"] == 2
    assert read_tail["agentsessions.events.read"] == 1
    assert read_tail["agentsessions.tail_read"] is True
    assert read_missing["agentsessions.found"] is False
    assert "agentsessions.events.read" not in read_missing
    update = by_op["update"][0]
    assert update["agentsessions.version"] == updated.version == 3
    assert update["agentsessions.events.read"] == 2
    assert update["agentsessions.events.written"] == 1
    assert update["agentsessions.bytes.written"] == _written_bytes(updated, 1)
    assert update["agentsessions.update.conflicts"] == 0
    assert update["agentsessions.update.retries"] == 0
    assert by_op["list_sessions"][0]["agentsessions.sessions"] == len(page.items) == 1
    assert by_op["delete"][0]["agentsessions.sessions"] == 1
    assert by_op["delete_user"][0]["agentsessions.sessions"] == 1
    assert by_op["purge_expired"][0]["agentsessions.sessions"] == purged
    restored = by_op["restore"][0]
    assert restored["agentsessions.version"] == moved.version == 2
    assert restored["agentsessions.events.written"] == 2
    assert restored["agentsessions.bytes.written"] == _written_bytes(moved, 2)

    # update() runs a get and a save inside its own span.
    update_span = next(s for s in roots if s.name.startswith("update"))
    assert [s.name.split(" ")[0] for s in telemetry.children(update_span)] == ["get", "save"]

    # The duration histogram: one point per (operation, backend), counting every call.
    durations = {
        attrs["db.operation.name"]: point
        for attrs, point in telemetry.points("db.client.operation.duration")
        if attrs["db.system.name"] == store.backend["db.system.name"]
    }
    assert durations["get"].count == 3 + 1  # the three reads and update's
    assert durations["save"].count == 1 + 1
    assert durations["create"].count == 2
    assert set(durations) >= {"open", "update", "list_sessions", "delete", "delete_user"}
    assert all(point.sum > 0 for point in durations.values())
    system = store.backend["db.system.name"]
    assert telemetry.total("agentsessions.events.written", **{"db.system.name": system}) == 5
    assert telemetry.total("agentsessions.bytes.written", **{"db.system.name": system}) == (
        created["agentsessions.bytes.written"]
        + saved["agentsessions.bytes.written"]
        + update["agentsessions.bytes.written"]
        + by_op["create"][1]["agentsessions.bytes.written"]
        + restored["agentsessions.bytes.written"]
    )


async def test_update_records_the_conflicts_and_retries_it_went_through(
    store: Store, telemetry: Telemetry
) -> None:
    rival = connect(store.url)  # not instrumented: its writes are not ours to count
    manager = connect(store.url, instrument=telemetry.plugin())
    try:
        await manager.create("hot", None)
        calls = 0

        async def add_after_a_rival_wrote(session: Session) -> None:
            nonlocal calls
            calls += 1
            if calls <= 2:  # the first two attempts each lose the race, on purpose
                other = await rival.get("hot")
                assert other is not None
                other.add_event("rival", calls)
                await rival.save(other)
            session.add_event("user", "mine")

        result = await manager.update("hot", add_after_a_rival_wrote)
        assert calls == 3
        assert [e.author for e in result.events] == ["rival", "rival", "user"]
    finally:
        await manager.close()
        await rival.close()
    update = next(s for s in telemetry.roots() if s.name.startswith("update"))
    attributes = dict(update.attributes or {})
    assert attributes["agentsessions.update.conflicts"] == 2
    assert attributes["agentsessions.update.retries"] == 2
    assert attributes["agentsessions.version"] == 4
    children = telemetry.children(update)
    # One full read, then each retry extends the copy it holds inside the update's own span
    # (`_load_since`, no child span of its own) before saving again.
    assert [s.name.split(" ")[0] for s in children] == ["get", "save", "save", "save"]
    failed = [s for s in children if s.status.status_code is StatusCode.ERROR]
    assert len(failed) == 2
    assert all(
        dict(s.attributes or {})["error.type"] == _type_name(SessionConflictError) for s in failed
    )
    system = {"db.system.name": store.backend["db.system.name"]}
    assert telemetry.total("agentsessions.conflicts", **system) == 2
    assert telemetry.total("agentsessions.update.retries", **system) == 2


async def test_update_that_gives_up_counts_its_last_conflict_as_no_retry(
    telemetry: Telemetry,
) -> None:
    url = "memory://otel-give-up"
    rival = connect(url)
    async with connect(url, instrument=telemetry.plugin()) as manager:
        await manager.create("hot")

        async def always_lose(session: Session) -> None:
            await lose_the_race(rival, "hot")

        with pytest.raises(SessionConflictError):
            await manager.update("hot", always_lose, retries=1)
    update = next(s for s in telemetry.roots() if s.name == "update")
    attributes = dict(update.attributes or {})
    assert attributes["agentsessions.update.conflicts"] == 2
    assert attributes["agentsessions.update.retries"] == 1
    assert attributes["error.type"] == _type_name(SessionConflictError)
    assert update.status.status_code is StatusCode.ERROR


async def test_an_error_is_recorded_with_its_type_and_no_message_by_default(
    telemetry: Telemetry,
) -> None:
    async with connect("memory://", instrument=telemetry.plugin()) as manager:
        first = await manager.create("secret-session-id")
        stale = await manager.get("secret-session-id")
        assert stale is not None
        await manager.save(first)
        with pytest.raises(SessionConflictError):
            await manager.save(stale)
    span = telemetry.roots()[-1]
    assert span.name == "save"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == _type_name(SessionConflictError)
    (event,) = span.events
    assert event.name == "exception"
    attributes = dict(event.attributes or {})
    assert attributes["exception.type"] == _type_name(SessionConflictError)
    assert "exception.message" not in attributes  # ours name the session
    assert "secret-session-id" not in str(attributes)
    assert "save" in str(attributes["exception.stacktrace"])


async def test_ids_and_messages_only_when_the_application_opts_in(
    telemetry: Telemetry,
) -> None:
    plugin = telemetry.plugin(record_ids=True)
    async with connect("memory://", instrument=plugin) as manager:
        session = await manager.create("chat-1", "ada")
        await manager.save(session)
        with pytest.raises(agentsessions.SessionOwnershipError):
            await manager.get("chat-1", user_id="bob")
    create, save, get = telemetry.roots()[1:]
    assert dict(create.attributes or {})["agentsessions.session_id"] == "chat-1"
    assert dict(create.attributes or {})["agentsessions.user_id"] == "ada"
    assert dict(save.attributes or {})["agentsessions.user_id"] == "ada"
    assert dict(get.attributes or {})["agentsessions.user_id"] == "bob"
    message = dict(get.events[0].attributes or {})["exception.message"]
    assert "chat-1" in str(message)


async def test_an_unreachable_server_is_counted_once_per_call(telemetry: Telemetry) -> None:
    pytest.importorskip("agentsessions_postgres")
    port = closed_loopback_port()
    manager = connect(
        f"postgresql://app@127.0.0.1:{port}/agents?connect_timeout=2",
        instrument=telemetry.plugin(),
    )
    try:
        for _ in range(2):
            with pytest.raises(BackendUnavailableError):
                await asyncio.wait_for(manager.get("s"), 30)
    finally:
        await manager.close()
    roots = telemetry.roots()
    assert [s.name for s in roots] == ["get agents", "get agents"]
    for root in roots:
        (open_span,) = telemetry.children(root)
        assert open_span.name == "open agents"
        for span in (root, open_span):
            attributes = dict(span.attributes or {})
            assert attributes["error.type"] == _type_name(BackendUnavailableError)
            assert attributes["server.address"] == "127.0.0.1"
            assert attributes["server.port"] == port
    counted = telemetry.points("agentsessions.unavailable")
    assert len(counted) == 1
    attributes, point = counted[0]
    assert point.value == 2  # two calls, not four spans
    assert attributes["error.type"] == _type_name(BackendUnavailableError)
    failed_gets = [
        point.count
        for attrs, point in telemetry.points("db.client.operation.duration")
        if attrs["db.operation.name"] == "get" and "error.type" in attrs
    ]
    assert failed_gets == [2]


async def test_global_instrument_uses_the_global_providers(telemetry: Telemetry) -> None:
    from opentelemetry import metrics, trace

    trace_mod: Any = trace
    metrics_mod: Any = metrics
    # The API refuses to replace a global provider once set, so point its getters at
    # the test's providers for the duration of the test.
    saved = (trace_mod.get_tracer_provider, metrics_mod.get_meter_provider)
    trace_mod.get_tracer_provider = lambda: telemetry.tracer_provider
    metrics_mod.get_meter_provider = lambda: telemetry.meter_provider
    try:
        existing = connect("memory://")
        (plugin,) = agentsessions.instrument()
        assert agentsessions.instrument() == [plugin]  # again: no second plugin
        later = connect("memory://")
        await existing.create("a")
        await later.create("b")
        await existing.close()
        await later.close()
    finally:
        trace_mod.get_tracer_provider, metrics_mod.get_meter_provider = saved
        agentsessions.uninstrument()
    roots = telemetry.roots()
    assert [s.name for s in roots] == ["create", "create"]
    assert [[c.name for c in telemetry.children(root)] for root in roots] == [["open"], ["open"]]
