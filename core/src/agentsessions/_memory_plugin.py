"""Core's own entry point: registers ``memory://`` exactly as a backend distribution would."""

from __future__ import annotations

from ._registry import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("memory",),
            manager="agentsessions._memory:MemorySessionManager",
        )
    ]
