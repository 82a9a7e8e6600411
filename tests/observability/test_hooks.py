"""The instrumentation hook: any plugin sees every operation; nothing is installed, and
so nothing costs, while instrumentation is off."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import agentsessions
import pytest
from agentsessions import InvalidInputError, SessionManager, connect
from agentsessions.instrumentation import (
    OPERATIONS,
    Operation,
    hookimpl,
    instrument,
    instrumented,
    uninstrument,
)

WRITE_HOOKS = ("_create", "_save", "_restore", "_compact")


class Recorder:
    """A plugin, as a Prometheus exporter or an audit log would be."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.finished: list[Operation] = []

    @hookimpl
    def agentsessions_operation_started(self, operation: Operation) -> None:
        self.started.append(operation.name)

    @hookimpl
    def agentsessions_operation_finished(self, operation: Operation) -> None:
        self.finished.append(operation)


class FinishedOnly:
    def __init__(self) -> None:
        self.names: list[str] = []

    @hookimpl
    def agentsessions_operation_finished(self, operation: Operation) -> None:
        self.names.append(operation.name)


def _wrapped(manager: SessionManager) -> set[str]:
    return {name for name in (*OPERATIONS, *WRITE_HOOKS) if name in vars(manager)}


async def test_off_by_default_means_nothing_is_installed() -> None:
    manager = connect("memory://")
    assert _wrapped(manager) == set()
    assert manager.get.__func__ is SessionManager.get  # type: ignore[attr-defined]
    assert instrumented(manager) == []
    async with manager:
        await manager.create("s")
    assert _wrapped(manager) == set()


async def test_a_plugin_sees_every_operation_with_what_it_did() -> None:
    recorder = Recorder()
    async with connect("memory://", instrument=recorder) as manager:
        assert _wrapped(manager) == {*OPERATIONS, *WRITE_HOOKS}
        session = await manager.create("s", "ada")
        session.add_event("user", "hi")
        await manager.save(session)
        await manager.get("s", last_events=5)
        await manager.update("s", lambda s: s.add_event("user", "again"))
        await manager.list_sessions()
        await manager.delete("s")
        await manager.delete_user("ada")
        await manager.purge_expired()
        copy = session.model_copy(update={"session_id": "copy"})
        await manager.restore(copy)
        restored = await manager.get("copy", last_events=5)
        assert restored is not None
        await manager.compact(restored, restored.events[0].id, [])
    names = [op.name for op in recorder.finished]
    assert recorder.started == [
        "open",
        "create",
        "save",
        "get",
        "update",
        "get",
        "save",
        "list_sessions",
        "delete",
        "delete_user",
        "purge_expired",
        "restore",
        "get",
        "compact",
    ]
    assert sorted(names) == sorted(recorder.started)
    by_name = {op.name: op for op in recorder.finished if op.parent is None}
    assert set(by_name) == set(OPERATIONS)
    assert by_name["create"].session_id == "s"
    assert by_name["create"].user_id == "ada"
    assert by_name["save"].events_written == 1
    assert by_name["save"].version == 2
    assert by_name["get"].tail_read is True
    assert by_name["get"].events_read == 1
    assert by_name["update"].events_written == 1
    assert by_name["delete"].sessions == 1
    assert by_name["delete_user"].sessions == 0
    assert (by_name["restore"].session_id, by_name["restore"].user_id) == ("copy", "ada")
    assert by_name["compact"].session_id == "copy"
    assert by_name["compact"].events_removed == 1
    assert by_name["compact"].version == 3
    assert (by_name["restore"].events_written, by_name["restore"].version) == (1, 2)
    assert by_name["restore"].bytes_written == len(copy.events[0].model_dump_json()) + len("{}")
    assert all(op.duration is not None and op.duration >= 0 for op in recorder.finished)
    nested = [op for op in recorder.finished if op.parent is not None]
    assert {op.parent.name for op in nested if op.parent} == {"update"}


async def test_several_plugins_each_implementing_what_they_need() -> None:
    first, second = Recorder(), FinishedOnly()
    async with connect("memory://", instrument=[first, second]) as manager:
        await manager.create("s")
    assert first.started == ["open", "create"]
    assert second.names == ["open", "create"]


async def test_global_instrument_reaches_existing_and_new_managers_until_undone() -> None:
    recorder = Recorder()
    before = connect("memory://")
    assert instrument(recorder) == [recorder]
    assert instrument(recorder) == [recorder]  # once is enough
    after = connect("memory://")
    await before.create("a")
    await after.create("b")
    uninstrument()
    await before.create("c")
    assert [op.name for op in recorder.finished if op.parent is None] == ["create", "create"]
    assert _wrapped(before) == _wrapped(after) == set()


async def test_a_managers_own_plugins_follow_it_into_with_options() -> None:
    recorder = Recorder()
    manager = connect("memory://shared-hooks", instrument=recorder)
    other = manager.with_options(namespace="other")
    await other.create("s")
    assert [op.name for op in recorder.finished] == ["open", "create"]
    assert recorder.finished[-1].backend == {
        "db.system.name": "memory",
        "agentsessions.namespace": "other",
    }
    uninstrument(manager=other)
    assert _wrapped(other) == set()
    assert instrumented(manager) == [recorder]


async def test_a_broken_plugin_is_logged_and_never_fails_the_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Broken:
        @hookimpl
        def agentsessions_operation_finished(self, operation: Operation) -> None:
            raise RuntimeError("plugin bug")

    caplog.set_level(logging.ERROR, logger="agentsessions")
    async with connect("memory://", instrument=Broken()) as manager:
        session = await manager.create("s")
    assert session.version == 1
    failures = [r for r in caplog.records if getattr(r, "event", None) == "plugin_failed"]
    assert failures
    assert "RuntimeError: plugin bug" in failures[0].getMessage()


def test_an_unknown_plugin_name_is_a_clear_error() -> None:
    with pytest.raises(InvalidInputError, match="no-such-plugin"):
        connect("memory://", instrument="no-such-plugin")


def test_nothing_of_opentelemetry_is_imported_unless_asked() -> None:
    code = (
        "import sys, asyncio, agentsessions\n"
        "async def main():\n"
        "    async with agentsessions.connect('memory://') as m:\n"
        "        await m.create('s')\n"
        "asyncio.run(main())\n"
        "assert not [n for n in sys.modules if n.startswith('opentelemetry')], 'imported'\n"
        "assert 'agentsessions._otel' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_the_public_names() -> None:
    assert agentsessions.instrument is instrument
    assert agentsessions.uninstrument is uninstrument
    from agentsessions.backend import hookimpl as backend_hookimpl

    assert hookimpl is backend_hookimpl  # one marker for every hook of the project


def test_without_opentelemetry_installed_turning_it_on_says_what_to_install() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None  # as if opentelemetry-api were not installed\n"
        "import agentsessions\n"
        "manager = agentsessions.connect('memory://')\n"
        "try:\n"
        "    agentsessions.instrument()\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
        "assert not vars(manager).get('get'), 'half-instrumented'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert 'pip install "agentsessions[otel]"' in done.stdout


async def test_a_plugin_published_as_an_entry_point_is_found_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib.metadata import EntryPoint

    from agentsessions import _instrumentation

    (tmp_path / "audit_plugin.py").write_text(
        "from agentsessions.instrumentation import hookimpl\n"
        "class Audit:\n"
        "    seen = []\n"
        "    @hookimpl\n"
        "    def agentsessions_operation_finished(self, operation):\n"
        "        Audit.seen.append(operation.name)\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    published = EntryPoint("audit", "audit_plugin:Audit", _instrumentation.ENTRY_POINT_GROUP)

    def fake_entry_points(*, group: str, name: str) -> list[EntryPoint]:
        return [published] if (group, name) == (published.group, "audit") else []

    monkeypatch.setattr(_instrumentation, "entry_points", fake_entry_points)
    async with connect("memory://", instrument="audit") as manager:
        await manager.delete("nobody")
    import audit_plugin  # type: ignore[import-not-found]

    assert audit_plugin.Audit.seen == ["open", "delete"]
