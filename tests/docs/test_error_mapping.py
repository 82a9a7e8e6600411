"""The guide's table of engine errors is each backend's `driver_errors`, rule by rule.

docs/backend-authors.md ("Which engine error becomes which error") lists, per backend
and in order, the exception types of each `ErrorRule`, whether it has a condition, and
the error it becomes. These tests read the table and check every row against the rule
it describes: the very exception types (resolved from their dotted names), the
condition, and the error classes, which must exist and be what the rule produces
(its ``kind``, or what its ``build`` returns for sample exceptions).
"""

from __future__ import annotations

import builtins
import importlib
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import agentsessions
import pytest
from agentsessions import MemorySessionManager, SessionManager, connect
from agentsessions.backend import ErrorRule, SchemaTooNewError

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "backend-authors.md"
URLS = {
    "sqlite": "sqlite:///:memory:",
    "postgres": "postgresql://app@127.0.0.1:5432/db",
    "redis": "redis://127.0.0.1:6379/0",
    "mongo": "mongodb://127.0.0.1:27017/db",
    "mysql": "mysql://app@127.0.0.1:3306/db",
}


def _samples() -> dict[str, list[BaseException]]:
    """Exceptions to feed each ``build`` function, covering every error it can return."""
    from bson.errors import InvalidDocument
    from pymongo.errors import BulkWriteError, DocumentTooLarge

    return {
        "_locked": [sqlite3.OperationalError("database is locked")],
        "_too_large": [DocumentTooLarge("BSON document too large")],
        "_refused_document": [InvalidDocument("key '$x' must not start with '$'")],
        "_refused_write": [
            BulkWriteError({"writeErrors": [{"code": 17419, "errmsg": "too large"}]}),
            BulkWriteError({"writeErrors": [{"code": 2, "errmsg": "bad value"}]}),
        ],
    }


def _table() -> dict[str, list[list[str]]]:
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("### Which engine error becomes which error", 1)[1]
    rows: dict[str, list[list[str]]] = {}
    for line in section.splitlines():
        if not line.startswith("| ") or line.startswith("| Backend"):
            continue
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.setdefault(cells[0], []).append(cells[1:])
    return rows


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    if len(parts) == 1:
        return getattr(builtins, dotted)
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise LookupError(dotted)


def _produced(rule: ErrorRule, manager: SessionManager) -> set[str]:
    if rule.build is None:
        return {rule.kind.__name__}
    build: Callable[[Any, Any], Any] = rule.build
    samples = _samples().get(getattr(build, "__name__", ""))
    assert samples, f"no sample exceptions for the build function {build!r}: add some"
    return {type(build(manager, exc)).__name__ for exc in samples}


def test_the_table_names_every_backend_and_only_them() -> None:
    assert set(_table()) == set(URLS)


@pytest.mark.parametrize("backend", sorted(URLS))
def test_each_row_is_the_rule_it_describes(backend: str) -> None:
    manager = connect(URLS[backend])
    rules = type(manager).driver_errors
    rows = _table()[backend]
    assert len(rows) == len(rules), f"{backend}: {len(rows)} rows for {len(rules)} rules"
    for number, (row, rule) in enumerate(zip(rows, rules, strict=True), 1):
        where = f"{backend} row {number}"
        engine, when, becomes = row
        named = [_resolve(name) for name in re.findall(r"`([\w.]+)`", engine)]
        assert named == list(rule.types), f"{where}: {engine} is not {rule.types}"
        unconditional = rule.when is None and rule.raised_in is None
        assert (when == "—") == unconditional, f"{where}: condition column {when!r}"
        classes = set(re.findall(r"`(\w+Error)`", becomes))
        for name in classes:
            assert issubclass(getattr(agentsessions, name), agentsessions.SessionError), name
        assert classes == _produced(rule, manager), f"{where}: {becomes}"


@pytest.mark.parametrize("backend", sorted(URLS))
def test_a_schema_from_a_newer_release_is_unavailable_everywhere(backend: str) -> None:
    error = connect(URLS[backend])._translate(SchemaTooNewError(9, 2))
    assert isinstance(error, agentsessions.BackendUnavailableError)
    assert "upgrade" in str(error)


def test_the_memory_backend_declares_no_rule() -> None:
    assert MemorySessionManager.driver_errors == ()
