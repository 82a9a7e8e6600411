"""Backend selection by URL scheme, through entry points and pluggy."""

from __future__ import annotations

import subprocess
import sys

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
    empty = _registry._Registry()
    empty._claims = {}  # as if no backend distribution were installed
    monkeypatch.setattr(_registry, "_registry", empty)
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
