"""The public surface is explicit: every exported name exists and nothing public is missing."""

from __future__ import annotations

import inspect
import types

import agentsessions
import agentsessions.backend
import agentsessions.sync
import pytest


@pytest.mark.parametrize("module", [agentsessions, agentsessions.backend, agentsessions.sync])
def test_all_names_exist(module: types.ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("module", [agentsessions, agentsessions.backend, agentsessions.sync])
def test_all_is_complete(module: types.ModuleType) -> None:
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(value) or inspect.isfunction(value))
        and getattr(value, "__module__", "").startswith("agentsessions")
    }
    assert public - set(module.__all__) == set()


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
