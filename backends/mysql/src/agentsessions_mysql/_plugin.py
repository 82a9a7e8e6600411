"""Entry point of agentsessions-mysql: names the manager without importing asyncmy.

`connect("memory://")` loads every plugin module to learn the schemes, so this module
stays light; the manager (and asyncmy with it) is imported only for a mysql URL.
"""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("mysql", "mariadb"),
            manager="agentsessions_mysql._manager:MySQLSessionManager",
        )
    ]
