"""Fixtures for the MySQL/MariaDB backend tests: databases of their own, dropped after.

``fresh_database_url`` is a new, empty, randomly named database beside the one
``mysql_url`` names (``<database>_t<hex>``). ``database_url`` is one such database per
test session whose tables are emptied after every test: DDL costs a durable commit
per statement, and the kit runs hundreds of tests. Nothing is left on the server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncmy
import pytest_asyncio
from agentsessions_mysql._options import connect_arguments


async def server_execute(url: str, sql: str) -> None:
    """Run *sql* on the server of *url*, without selecting a database."""
    args = connect_arguments(url)
    del args["db"]
    connection = await asyncmy.connect(**args, autocommit=True)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute(sql)
    finally:
        connection.close()


@pytest_asyncio.fixture
async def fresh_database_url(mysql_url: str) -> AsyncIterator[str]:
    """``mysql_url`` with a fresh database of the test's own, dropped after the test."""
    base, _, query = mysql_url.partition("?")
    root, _, database = base.rpartition("/")
    name = f"{database}_t{uuid.uuid4().hex[:12]}"
    await server_execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield f"{root}/{name}" + (f"?{query}" if query else "")
    await server_execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


_TABLES = ("agentsessions_sessions", "agentsessions_events", "agentsessions_archive")


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def _shared_database(mysql_url: str) -> AsyncIterator[str]:
    base, _, query = mysql_url.partition("?")
    root, _, database = base.rpartition("/")
    name = f"{database}_t{uuid.uuid4().hex[:12]}"
    await server_execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield f"{root}/{name}" + (f"?{query}" if query else "")
    await server_execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")


@pytest_asyncio.fixture
async def database_url(_shared_database: str) -> AsyncIterator[str]:
    """The session's database, its tables emptied after the test (see the module)."""
    yield _shared_database
    args = connect_arguments(_shared_database)
    connection = await asyncmy.connect(**args, autocommit=False)
    try:
        async with connection.cursor() as cursor:
            await cursor.execute("SHOW TABLES")
            present = {row[0] for row in await cursor.fetchall()}
            for table in _TABLES:
                if table in present:
                    await cursor.execute(f"DELETE FROM {table}")
        await connection.commit()
    finally:
        connection.close()
