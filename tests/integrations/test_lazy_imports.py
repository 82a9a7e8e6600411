"""The frameworks are imported by their adapter module only, never by the package."""

from __future__ import annotations

import subprocess
import sys

import pytest

FRAMEWORKS = ("agents", "openai", "google.adk", "google.genai", "langgraph", "langchain_core")


def modules_after(statement: str) -> set[str]:
    script = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    return set(result.stdout.split())


def test_importing_agentsessions_and_its_integrations_package_loads_no_framework() -> None:
    loaded = modules_after("import agentsessions, agentsessions.integrations")
    assert "agentsessions.integrations" in loaded
    assert not {
        name
        for name in loaded
        for framework in FRAMEWORKS
        if name == framework or name.startswith(framework + ".")
    }


@pytest.mark.parametrize(
    ("module", "framework", "other"),
    [
        ("agentsessions.integrations.openai_agents", "agents", "google.adk"),
        ("agentsessions.integrations.adk", "google.adk", "agents"),
        ("agentsessions.integrations.langgraph", "langgraph", "agents"),
    ],
)
def test_each_adapter_loads_its_own_framework_only(module: str, framework: str, other: str) -> None:
    pytest.importorskip(framework)
    loaded = modules_after(f"import {module}")
    assert framework in loaded
    assert other not in loaded
