"""Entry point of agentsessions-sqlite: declares ``sqlite://`` without importing aiosqlite."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from agentsessions.backend import BackendSpec, hookimpl


def _version() -> str:
    try:
        return version("agentsessions-sqlite")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return ""


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("sqlite",),
            manager="agentsessions_sqlite._manager:SQLiteSessionManager",
            distribution="agentsessions-sqlite",
            version=_version(),
            description="a SQLite file (WAL; several processes may share it) or :memory:",
        )
    ]
