"""Entry point of agentsessions-mongo: names the manager without importing pymongo.

`connect("memory://")` loads every plugin module to learn the schemes, so this module
stays light; the manager (and pymongo with it) is imported only for a MongoDB URL.
"""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            schemes=("mongodb", "mongodb+srv"),
            manager="agentsessions_mongo._manager:MongoSessionManager",
        )
    ]
