"""Fixtures for the MySQL/MariaDB backend tests: a fresh database per test, dropped after.

Every test gets its own randomly named database beside the one ``mysql_url`` names
(``<database>_t<hex>``), so tests never see each other's rows and nothing is left
behind on a shared server.
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
async def database_url(mysql_url: str) -> AsyncIterator[str]:
    """``mysql_url`` with a fresh database of the test's own, dropped after the test."""
    base, _, query = mysql_url.partition("?")
    root, _, database = base.rpartition("/")
    name = f"{database}_t{uuid.uuid4().hex[:12]}"
    await server_execute(mysql_url, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield f"{root}/{name}" + (f"?{query}" if query else "")
    await server_execute(mysql_url, f"DROP DATABASE IF EXISTS `{name}`")
