"""With encryption on, no PostgreSQL table holds the plaintext of content, metadata or state."""

from __future__ import annotations

import asyncpg
import pytest
from agentsessions import connect
from agentsessions_postgres._schema import quote_ident
from encryption_params import assert_no_plaintext, make_keyring, write_secrets

pytestmark = pytest.mark.postgres


async def test_postgres_tables_hold_no_plaintext(
    schema_url: str, schema: str, postgres_url: str
) -> None:
    async with connect(schema_url, encryption=make_keyring()) as manager:
        ids = await write_secrets(manager)
    connection = await asyncpg.connect(postgres_url)
    try:
        tables = await connection.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", schema
        )
        dump = []
        for row in tables:
            table = f"{quote_ident(schema)}.{quote_ident(row[0])}"
            dump += [repr(dict(r)) for r in await connection.fetch(f"SELECT * FROM {table}")]
    finally:
        await connection.close()
    assert len(tables) >= 2
    assert_no_plaintext("\n".join(dump), ids)
