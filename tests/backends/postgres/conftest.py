"""Fixtures for the PostgreSQL backend tests: a fresh schema per test, dropped after.

Every test gets its own randomly named schema on the server from ``postgres_url``, so
tests never see each other's rows and nothing is left behind on a shared server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
import pytest_asyncio
from agentsessions_postgres._schema import quote_ident


@pytest_asyncio.fixture
async def schema(postgres_url: str) -> AsyncIterator[str]:
    """A fresh schema name (not created: the manager creates it), dropped after the test."""
    name = f"as_test_{uuid.uuid4().hex[:16]}"
    yield name
    # (pg_helpers is not importable from here: conftest loads before the folder is on
    # sys.path.)
    connection = await asyncpg.connect(postgres_url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {quote_ident(name)} CASCADE")
    finally:
        await connection.close()


@pytest.fixture
def schema_url(postgres_url: str, schema: str) -> str:
    """``postgres_url`` with ``schema=`` the test's own schema."""
    return f"{postgres_url}{'&' if '?' in postgres_url else '?'}schema={schema}"
