"""What the numbers were measured on: machine, Python, package and server versions, date."""

from __future__ import annotations

import os
import platform
import sys
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

__all__ = ["describe_machine", "server_versions"]

_PACKAGES = (
    "agentsessions",
    "agentsessions-sqlite",
    "agentsessions-postgres",
    "agentsessions-redis",
    "agentsessions-mongo",
    "agentsessions-mysql",
    "pydantic",
    "pydantic-core",
    "aiosqlite",
    "asyncpg",
    "redis",
    "pymongo",
    "asyncmy",
    "hiredis",
    "openai-agents",
    "google-adk",
    "sqlalchemy",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def describe_machine() -> dict[str, Any]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": f"{platform.python_implementation()} {sys.version.split()[0]}",
        "packages": versions,
    }


async def server_versions(servers: dict[str, str]) -> dict[str, str]:
    """Best effort: the version each server reports (a failure just leaves it out)."""
    found: dict[str, str] = {}
    for engine, url in servers.items():
        try:
            found[engine] = await _version_of(engine, url)
        except Exception:  # informative only; never fails a run
            continue
    try:
        import sqlite3

        found["sqlite"] = sqlite3.sqlite_version
    except ImportError:
        pass
    return found


async def _version_of(engine: str, url: str) -> str:
    if engine == "postgres":
        import asyncpg  # type: ignore[import-untyped,unused-ignore]

        conn = await asyncpg.connect(url)
        try:
            return str(await conn.fetchval("SHOW server_version"))
        finally:
            await conn.close()
    if engine in ("redis", "redis-cluster"):
        import redis.asyncio as aioredis

        client = aioredis.from_url("redis://" + url.partition("://")[2])
        try:
            info = await client.info("server")
            return f"Redis {info['redis_version']}"
        finally:
            await client.aclose()
    if engine == "mongo":
        from pymongo import AsyncMongoClient

        mongo: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(
            url, serverSelectionTimeoutMS=3000
        )
        try:
            build = await mongo.admin.command("buildInfo")
            return f"{build.get('version', '?')} (wire-compatible server)"
        finally:
            await mongo.close()
    if engine == "mysql":
        from agentsessions import connect
        from agentsessions_mysql import MySQLSessionManager

        manager = connect(url)
        assert isinstance(manager, MySQLSessionManager)
        async with manager, manager._connection() as connection:
            return str(connection.get_server_info())
    return "?"
