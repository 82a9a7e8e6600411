"""Entry point of agentsessions-sqlite (placeholder until the backend lands)."""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return []
