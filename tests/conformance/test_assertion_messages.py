"""Every assertion of the kit says what was expected and what was found: a failing
clause names the operation and the rule for a backend author, not only a bare assert."""

from __future__ import annotations

import ast
from pathlib import Path

import agentsessions_conformance

KIT = Path(agentsessions_conformance.__file__).parent


def _bare_asserts() -> list[str]:
    found: list[str] = []
    for path in sorted(KIT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert) and node.msg is None:
                found.append(f"{path.relative_to(KIT)}:{node.lineno}: {ast.unparse(node.test)}")
    return found


def test_every_assert_of_the_kit_has_a_message() -> None:
    bare = _bare_asserts()
    assert not bare, "asserts without a message:\n" + "\n".join(bare)


def test_the_check_sees_the_clause_modules() -> None:
    clauses = list((KIT / "_suite").glob("_tests_*.py"))
    assert len(clauses) >= 30, f"expected the kit's clause modules under {KIT}, found {clauses}"
    asserts = sum(
        isinstance(node, ast.Assert)
        for path in clauses
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
    )
    assert asserts > 500, f"expected the clause modules' asserts to be parsed, found {asserts}"
