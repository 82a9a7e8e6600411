"""The backend author's guide documents every hook, and each hook's docstring is complete."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from agentsessions.backend import SessionManager

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "backend-authors.md"
ABSTRACT = sorted(
    name
    for name, value in vars(SessionManager).items()
    if name.startswith("_")
    and not name.startswith("__")
    and getattr(value, "__isabstractmethod__", False)
)
# The hooks with a default: engines that expire data, keep per-loop connections, or
# do not compact or branch.
HOOKS = [
    *ABSTRACT,
    "_open",
    "_close",
    "_purge_expired",
    "_compact",
    "_archived",
    "_fork",
    "_rewind",
    "_list_forks",
]


def test_the_hooks_are_found() -> None:
    assert {"_open", "_create", "_load", "_save", "_list"} <= set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_the_guide_renders_the_hook(hook: str) -> None:
    members = re.findall(r"^\s+- (_\w+)$", GUIDE.read_text(encoding="utf-8"), re.MULTILINE)
    assert hook in members, f"docs/backend-authors.md does not list SessionManager.{hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_the_hook_says_what_it_may_raise(hook: str) -> None:
    doc = inspect.getdoc(getattr(SessionManager, hook)) or ""
    assert len(doc.splitlines()) >= 3, f"{hook} has no real docstring"
    assert "Raises:" in doc or hook == "_close", f"{hook} does not say what it may raise"
