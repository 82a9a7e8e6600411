"""Entry point of agentsessions-sqlite: declares ``sqlite://`` without importing aiosqlite."""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl

from ._version import __version__


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("sqlite",),
            manager="agentsessions_sqlite._manager:SQLiteSessionManager",
            distribution="agentsessions-sqlite",
            version=__version__,
        )
    ]
