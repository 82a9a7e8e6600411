"""Every public error is importable from agentsessions, named so, and documented."""

from __future__ import annotations

import pickle
from pathlib import Path

import agentsessions
import pytest
from agentsessions import _errors

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


@pytest.mark.parametrize("name", _errors.__all__)
def test_public_error_is_shown_as_agentsessions_name(name: str) -> None:
    cls = getattr(_errors, name)
    assert getattr(agentsessions, name) is cls
    assert cls.__module__ == "agentsessions"
    assert f"{cls.__module__}.{cls.__qualname__}" == f"agentsessions.{name}"
    assert f"`{name}`" in README, f"README.md does not list {name}"


def test_the_traceback_names_the_public_path() -> None:
    error = agentsessions.SessionConflictError("s", 3)
    assert repr(type(error)) == "<class 'agentsessions.SessionConflictError'>"
    assert pickle.loads(pickle.dumps(agentsessions.ManagerClosedError("closed"))).args == (
        "closed",
    )
