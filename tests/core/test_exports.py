"""The public surface is explicit: every exported name exists and nothing public is missing."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import types
from pathlib import Path

import agentsessions
import agentsessions.backend
import agentsessions.runtime
import agentsessions.sync
import pytest

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_MODULES = [agentsessions, agentsessions.backend, agentsessions.runtime, agentsessions.sync]
# Distributions built on core: they must need nothing that lives only in a private module.
DEPENDENTS = [
    "backends",
    "cli/src",
    "conformance/src",
    "bench/agentsessions_bench",
    "tools/testservers/src",
]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_names_exist(module: types.ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_all_is_complete(module: types.ModuleType) -> None:
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith("agentsessions")
    }
    assert public - set(module.__all__) == set()


def _core_imports() -> list[tuple[str, str, str]]:
    """(file, module, name) of every ``from agentsessions... import name`` outside core."""
    found = []
    for top in DEPENDENTS:
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    if node.module.split(".")[0] == "agentsessions":
                        found += [
                            (str(path.relative_to(ROOT)), node.module, a.name) for a in node.names
                        ]
                elif isinstance(node, ast.Import):
                    found += [
                        (str(path.relative_to(ROOT)), a.name, "")
                        for a in node.names
                        if a.name.split(".")[0] == "agentsessions"
                    ]
    return found


def _exported(module: str) -> tuple[str, ...]:
    """*module*'s ``__all__``, read from its source when importing it needs an optional
    dependency that is not installed (the adapters need their framework; the bench imports
    them only where it compares them), so the check runs in every install."""
    try:
        return tuple(getattr(importlib.import_module(module), "__all__", ()))
    except ImportError as exc:
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ModuleNotFoundError):
            cause = cause.__cause__ or cause.__context__
        if cause is None or (cause.name or "agentsessions").split(".")[0] == "agentsessions":
            raise
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return tuple(ast.literal_eval(node.value))
    return ()


def test_backends_and_tools_use_only_public_names_of_core() -> None:
    imports = _core_imports()
    assert len({file for file, _, _ in imports}) >= 10  # the scan found the dependents
    private = [i for i in imports if any(part.startswith("_") for part in i[1].split("."))]
    assert private == []
    unexported = [
        (file, module, name)
        for file, module, name in imports
        if name and name not in _exported(module)
    ]
    assert unexported == []


def test_every_error_derives_from_session_error() -> None:
    errors = [
        value
        for name, value in vars(agentsessions).items()
        if inspect.isclass(value) and issubclass(value, Exception)
    ]
    assert len(errors) >= 14
    assert all(issubclass(error, agentsessions.SessionError) for error in errors)


def test_hierarchy_is_drawn_in_the_errors_docstring() -> None:
    from agentsessions import _errors

    doc = _errors.__doc__ or ""
    for name in _errors.__all__:
        assert name in doc, f"{name} is not drawn in the hierarchy"


def test_input_errors_are_value_errors() -> None:
    assert issubclass(agentsessions.InvalidSessionIdError, ValueError)
    assert issubclass(agentsessions.InvalidOptionError, ValueError)
    assert issubclass(agentsessions.SessionSerializationError, ValueError)
