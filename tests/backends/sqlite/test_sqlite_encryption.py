"""With encryption on, nothing SQLite stores holds the plaintext of content, metadata or state."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import agentsessions
from encryption_params import assert_no_plaintext, make_keyring, write_secrets


async def test_sqlite_file_holds_no_plaintext(
    db_url: str, db_path: Path, raw: sqlite3.Connection
) -> None:
    async with agentsessions.connect(db_url, encryption=make_keyring()) as manager:
        ids = await write_secrets(manager)
    tables = [row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    dump = repr({table: raw.execute(f'SELECT * FROM "{table}"').fetchall() for table in tables})
    assert_no_plaintext(dump, ids)
    # The write-ahead log was checkpointed at close; the file's bytes hold nothing either.
    assert_no_plaintext(_file_text(db_path), ids)


def _file_text(path: Path) -> str:
    return path.read_bytes().decode("latin-1")
