"""Entry point of agentsessions-postgres: names the manager without importing asyncpg.

`connect("memory://")` loads every plugin module to learn the schemes, so this module
stays light; the manager (and asyncpg with it) is imported only for a postgres URL.
"""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("postgresql", "postgres"),
            manager="agentsessions_postgres._manager:PostgresSessionManager",
        )
    ]
