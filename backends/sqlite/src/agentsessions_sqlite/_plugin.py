"""Entry point of agentsessions-sqlite: declares ``sqlite://`` without importing aiosqlite."""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("sqlite",),
            manager="agentsessions_sqlite._manager:SQLiteSessionManager",
        )
    ]
