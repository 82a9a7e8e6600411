"""Backend selection by URL scheme, through entry points and pluggy."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import EntryPoint
from typing import Any

import agentsessions
import pytest
from agentsessions import (
    BackendConflictError,
    InvalidInputError,
    InvalidOptionError,
    MemorySessionManager,
    UnknownBackendError,
    _registry,
    connect,
    installed_backends,
    register_backend,
    unregister_backend,
)


def test_memory_is_registered_through_core_entry_point() -> None:
    spec = installed_backends()["memory"]
    assert spec.distribution == "agentsessions"
    assert isinstance(spec.manager, str)
    assert isinstance(connect("memory://"), MemorySessionManager)


def test_connect_validates_query_and_keyword_options() -> None:
    manager = connect("memory://?ttl=60", namespace="app1")
    assert manager.options.ttl == 60
    assert manager.options.namespace == "app1"
    with pytest.raises(InvalidOptionError, match="unknown option 'tll'"):
        connect("memory://?tll=60")
    with pytest.raises(InvalidOptionError, match="option 'ttl'"):
        connect("memory://", ttl="soon")
    with pytest.raises(InvalidOptionError, match="option 'namespace'"):
        connect("memory://?namespace=has space")
    with pytest.raises(InvalidOptionError, match="both in the URL and as an argument"):
        connect("memory://?ttl=1", ttl=2)


def test_unknown_scheme_lists_installed_ones() -> None:
    with pytest.raises(UnknownBackendError) as info:
        connect("nosuch://x")
    assert "'nosuch'" in str(info.value)
    assert "memory" in str(info.value)


def test_our_own_uninstalled_scheme_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_registry._registry, "_discovered", {})
    monkeypatch.setattr(_registry._registry, "_broken", {})
    with pytest.raises(UnknownBackendError, match="pip install agentsessions-redis"):
        connect("redis://:pw@localhost/0")


def test_not_a_url_is_invalid_input() -> None:
    with pytest.raises(InvalidInputError, match="not a URL"):
        connect("sessions.db")


def test_register_backend_in_code() -> None:
    class Private(MemorySessionManager):
        pass

    register_backend("private", Private)
    try:
        assert isinstance(connect("private://x"), Private)
        with pytest.raises(BackendConflictError):
            register_backend("private", Private)
        register_backend("private", Private, replace=True)
    finally:
        unregister_backend("private")
    with pytest.raises(UnknownBackendError):
        connect("private://x")


class _FakeDist:
    def __init__(self, name: str) -> None:
        self.name = name


def _entry_point(name: str, value: str, dist: str) -> EntryPoint:
    ep = EntryPoint(name=name, value=value, group=_registry.ENTRY_POINT_GROUP)
    # EntryPoint is immutable; _for() is how importlib.metadata itself attaches a dist.
    return ep._for(_FakeDist(dist))  # type: ignore[arg-type]


def test_two_distributions_claiming_one_scheme_is_an_error_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eps = [
        _entry_point("memory", "agentsessions._memory_plugin", "agentsessions"),
        _entry_point("memory", "agentsessions._memory_plugin", "someone-elses-memory"),
    ]

    def fake_entry_points(**kwargs: Any) -> list[EntryPoint]:
        return eps

    monkeypatch.setattr(_registry, "entry_points", fake_entry_points)
    with pytest.raises(BackendConflictError) as info:
        _registry._Registry().all()
    assert "agentsessions" in str(info.value)
    assert "someone-elses-memory" in str(info.value)


def test_a_scheme_declared_but_not_provided_does_not_break_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    eps = [
        _entry_point("memory", "agentsessions._memory_plugin", "agentsessions"),
        _entry_point("ghost", "agentsessions._memory_plugin", "agentsessions-ghost"),
    ]
    monkeypatch.setattr(_registry, "entry_points", lambda **kwargs: eps)
    registry = _registry._Registry()
    monkeypatch.setattr(_registry, "_registry", registry)
    assert set(registry.all()) == {"memory"}
    with pytest.raises(UnknownBackendError, match="agentsessions-ghost declares it"):
        connect("ghost://x")


def test_connect_memory_imports_no_database_driver() -> None:
    code = (
        "import sys, agentsessions\n"
        "agentsessions.connect('memory://')\n"
        "agentsessions.installed_backends()\n"
        "drivers = {'aiosqlite', 'asyncpg', 'redis', 'pymongo'} & set(sys.modules)\n"
        "print(sorted(drivers))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_repr_and_errors_mask_the_password() -> None:
    manager = MemorySessionManager("memory://user:hunter2@x")
    assert "hunter2" not in repr(manager)
    error = manager._unavailable(OSError("connect to memory://user:hunter2@x failed"))
    assert "hunter2" not in str(error)
    assert agentsessions.mask_url(manager._url) in str(error)
