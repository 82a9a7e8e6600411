"""The backend guide documents exactly the hooks surface; each hook's docstring is complete.

The surface is declared once, in `agentsessions._hooks` (`HOOKS`, what a backend
implements; `HELPERS`, what it may set, read or call); the guide's reference renders
that list, and these tests fail when the two drift apart or a hook is declared on the
class without being listed.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from agentsessions import _hooks
from agentsessions.backend import SessionManager

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "backend-authors.md"
HOOKS = list(_hooks.HOOKS)
# What the hooks class defines for the core alone (not part of the surface).
CORE_PRIVATE = {"_prepared", "_opened", "_per_loop", "_codec", "_abc_impl"}


def _rendered_surface() -> list[str]:
    """The member list of the guide's ``::: agentsessions.backend.SessionManager`` block
    under "The manager and its hooks"."""
    text = GUIDE.read_text(encoding="utf-8")
    section = text.split("### The manager and its hooks", 1)[1].split("\n### ", 1)[0]
    block = section.split("::: agentsessions.backend.SessionManager", 1)[1]
    members = block.split("members:", 1)[1]
    return re.findall(r"^\s+- (\w+)$", members.split("\n\n", 1)[0], re.MULTILINE)


def test_the_hooks_are_found() -> None:
    assert {"_open", "_create", "_load", "_save", "_list"} <= set(HOOKS)


def test_every_abstract_hook_is_declared() -> None:
    abstract = set(getattr(SessionManager, "__abstractmethods__", ()))
    assert abstract, "SessionManager declares no abstract hook"
    assert abstract <= set(HOOKS), f"abstract but not in HOOKS: {sorted(abstract - set(HOOKS))}"


def test_everything_the_hooks_class_defines_is_declared() -> None:
    defined = {name for name in vars(_hooks.BackendHooks) if not name.startswith("__")}
    defined |= set(_hooks.BackendHooks.__annotations__)
    undeclared = defined - set(_hooks.HOOKS) - set(_hooks.HELPERS) - CORE_PRIVATE
    assert not undeclared, f"BackendHooks defines {sorted(undeclared)} outside HOOKS/HELPERS"
    missing = (set(_hooks.HOOKS) | set(_hooks.HELPERS)) - defined
    assert not missing, f"HOOKS/HELPERS name {sorted(missing)}, which BackendHooks lacks"


def test_the_guide_renders_exactly_the_surface() -> None:
    rendered = _rendered_surface()
    assert rendered == [*_hooks.HELPERS, *_hooks.HOOKS], (
        "docs/backend-authors.md's 'The manager and its hooks' list differs from "
        "agentsessions._hooks.HELPERS + HOOKS"
    )


def test_the_manager_body_adds_no_hook() -> None:
    # A public method or core-private name may live on SessionManager; a hook may not.
    own = {name for name in vars(SessionManager) if name.startswith("_")}
    assert not own & set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_the_guide_renders_the_hook(hook: str) -> None:
    members = re.findall(r"^\s+- (_\w+)$", GUIDE.read_text(encoding="utf-8"), re.MULTILINE)
    assert hook in members, f"docs/backend-authors.md does not list SessionManager.{hook}"


@pytest.mark.parametrize("hook", HOOKS)
def test_the_hook_says_what_it_may_raise(hook: str) -> None:
    doc = inspect.getdoc(getattr(SessionManager, hook)) or ""
    assert len(doc.splitlines()) >= 3, f"{hook} has no real docstring"
    assert "Raises:" in doc or hook == "_close", f"{hook} does not say what it may raise"
