"""The manager stays a façade: small core modules, and only the codec knows about encryption."""

from __future__ import annotations

import ast
from pathlib import Path

import agentsessions
from agentsessions import _codec, connect

CORE = Path(agentsessions.__file__).resolve().parent
MAX_LINES = 700


def test_no_core_module_is_over_700_lines() -> None:
    sizes = {
        str(path.relative_to(CORE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in CORE.rglob("*.py")
    }
    assert sizes, "no core module found"
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"split these modules (one concern each): {over}"


def test_the_manager_module_names_encryption_only_in_the_option() -> None:
    tree = ast.parse((CORE / "_manager.py").read_text(encoding="utf-8"))
    users = sorted(
        {
            node.name
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and "encryption" in ast.unparse(node).replace(ast.get_docstring(node) or "", "")
        }
    )
    assert users == ["encryption"], f"these mention encryption beyond the option: {users}"


def test_a_manager_without_a_keyring_uses_the_plain_codec() -> None:
    manager = connect("memory://")
    assert manager._codec is _codec.PLAIN
    assert manager.encryption is None
    assert manager.with_options(ttl=60)._codec is _codec.PLAIN


def test_the_manager_class_stays_a_facade() -> None:
    # A third of the 1,433 lines the class body had before it became a façade: new
    # operations bring a module of their own and a thin wrapper here.
    tree = ast.parse((CORE / "_manager.py").read_text(encoding="utf-8"))
    (manager,) = [
        node
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name == "SessionManager"
    ]
    lines = (manager.end_lineno or manager.lineno) - manager.lineno + 1
    assert lines <= 1433 // 3, f"SessionManager's body is {lines} lines"
