"""Entry point of agentsessions-redis: names the manager without importing redis.

`connect()` loads this module for every installed scheme, so it must stay light;
the manager (and redis-py with it) is imported only when a Redis URL is used.
"""

from __future__ import annotations

from agentsessions.backend import BackendSpec, hookimpl

__all__ = ["agentsessions_backends"]


@hookimpl
def agentsessions_backends() -> list[BackendSpec]:
    return [
        BackendSpec(
            # "unix" is the deprecated name of "redis+unix" (a generic name that other
            # engines' plugins may claim too); it keeps working, with a warning.
            schemes=(
                "redis",
                "rediss",
                "redis+unix",
                "unix",
                "redis+cluster",
                "rediss+cluster",
                "redis+sentinel",
                "rediss+sentinel",
            ),
            manager="agentsessions_redis._manager:RedisSessionManager",
        )
    ]
