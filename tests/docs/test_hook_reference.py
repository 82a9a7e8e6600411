"""The backend reference documents exactly the hooks surface; each hook's docstring is complete.

The surface is declared once, in `agentsessions._hooks` (`HOOKS`, what a backend
implements; `HELPERS`, what it may set, read or call); docs/backend-reference.md
renders that list (tests/docs/test_backend_reference.py keeps it generated), and these
tests fail when the two drift apart or a hook is declared on the class without being
listed.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from agentsessions import _hooks
from agentsessions.backend import SessionManager

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "backend-reference.md"
HOOKS = list(_hooks.HOOKS)
# What the hooks class defines for the core alone (not part of the surface).
CORE_PRIVATE = {"_prepared", "_opened", "_per_loop", "_codec", "_abc_impl"}


def _rendered_surface() -> list[str]:
    """The ``SessionManager.X`` headings of the reference's two surface sections."""
    text = REFERENCE.read_text(encoding="utf-8")
    start = text.index("\n## What a backend sets, reads and calls\n")
    end = text.index("\n## Construction\n")
    return re.findall(r"^### `SessionManager\.(\w+)`$", text[start:end], re.MULTILINE)


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


def test_the_reference_renders_exactly_the_surface() -> None:
    rendered = _rendered_surface()
    assert rendered == [*_hooks.HELPERS, *_hooks.HOOKS], (
        "docs/backend-reference.md's surface differs from agentsessions._hooks.HELPERS + "
        "HOOKS: regenerate it (uv run python -m agentsessions._reference "
        "docs/backend-reference.md)"
    )


def test_the_manager_body_adds_no_hook() -> None:
    # A public method or core-private name may live on SessionManager; a hook may not.
    own = {name for name in vars(SessionManager) if name.startswith("_")}
    assert not own & set(HOOKS)


@pytest.mark.parametrize("hook", HOOKS)
def test_the_reference_renders_the_hook(hook: str) -> None:
    assert hook in _rendered_surface(), (
        f"docs/backend-reference.md does not render SessionManager.{hook}"
    )


@pytest.mark.parametrize("hook", HOOKS)
def test_the_hook_says_what_it_may_raise(hook: str) -> None:
    doc = inspect.getdoc(getattr(SessionManager, hook)) or ""
    assert len(doc.splitlines()) >= 3, f"{hook} has no real docstring"
    assert "Raises:" in doc or hook == "_close", f"{hook} does not say what it may raise"
