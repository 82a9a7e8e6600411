"""Entry point of agentsessions-mongo (placeholder until the backend lands)."""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return []
