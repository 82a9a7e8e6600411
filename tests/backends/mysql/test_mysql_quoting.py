"""The backend's own quoting of statement parameters gives asyncmy's text exactly, and
what it quotes reaches the server byte for byte."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import agentsessions
import asyncmy
import pytest
import pytest_asyncio
from agentsessions_mysql import MySQLSessionManager
from agentsessions_mysql._options import connect_arguments
from agentsessions_mysql._quoting import escape, literal, quote
from asyncmy.converters import escape_string
from hypothesis import given
from hypothesis import strategies as st

pytestmark = pytest.mark.mysql

#: Every character asyncmy escapes, beside ordinary and non-ASCII ones.
SPECIAL = "\\'\"\0\n\r\032"
_TEXTS = st.text(alphabet=st.sampled_from(SPECIAL) | st.characters(), max_size=200)


@given(_TEXTS)
def test_escape_is_asyncmy_escape_string(text: str) -> None:
    assert escape(text) == escape_string(text)


def test_a_backslash_before_a_quote_is_escaped_once_each() -> None:
    # The order matters: escaping the quote first would double the backslash it adds.
    assert escape("\\'") == "\\\\\\'"
    assert escape(SPECIAL) == "\\\\\\'\\\"\\0\\n\\r\\Z"


@pytest_asyncio.fixture
async def connection(database_url: str) -> AsyncIterator[Any]:
    # The manager's own connection settings (sql_mode) are what `literal` assumes.
    manager = agentsessions.connect(database_url)
    assert isinstance(manager, MySQLSessionManager)
    async with manager:
        pass  # migrated; the connection below is a plain one of the same server
    found = await asyncmy.connect(**connect_arguments(database_url), autocommit=True)
    try:
        yield found
    finally:
        found.close()


_VALUES: list[Any] = [
    "plain",
    SPECIAL * 3,
    "ünï \u00a0 \U0001f600 ' \\",
    b"\x00\x01\x80\xff'\\\"\n\r\x1a",
    "",
    b"",
    0,
    -(2**63),
    2**64 - 1,
    None,
    True,
    1.5,
]


async def test_literal_is_asyncmy_literal(connection: Any) -> None:
    for value in _VALUES:
        assert literal(connection, value) == connection.literal(value), value
    cursor = connection.cursor()
    sql = "SELECT %s, %s, %s"
    assert quote(connection, sql, _VALUES[:3]) == cursor.mogrify(sql, tuple(_VALUES[:3]))


#: Every byte, every special character alone and in runs, and text beyond ASCII.
_SENT: list[str | bytes] = [
    bytes(range(256)),
    bytes(range(255, -1, -1)) * 3,
    *SPECIAL,
    SPECIAL * 50,
    "".join(reversed(SPECIAL)) + "ünï \u00a0 \U0001f600",
    "\\\\'\\'",
    '{"a": "b\\"c", "d": "\\u0000"}',
]


async def test_a_quoted_value_reaches_the_server_unchanged(connection: Any) -> None:
    for value in _SENT:
        async with connection.cursor() as cursor:
            await cursor.execute(quote(connection, "SELECT CAST(%s AS BINARY)", [value]))
            (stored,) = (await cursor.fetchall())[0]
        expected = value.encode() if isinstance(value, str) else value
        assert bytes(stored) == expected, value


async def test_a_state_of_every_special_character_round_trips(database_url: str) -> None:
    text = "".join(SPECIAL) + " ünï \U0001f600"
    async with agentsessions.connect(database_url) as manager:
        session = await manager.create("quoted")
        session.state["text"] = text
        session.add_event("user", {"text": text})
        await manager.save(session)
        again = await manager.get("quoted")
    assert again.state["text"] == text
    assert again.events[0].content == {"text": text}


async def test_without_backslash_escapes_the_quoting_is_asyncmys(connection: Any) -> None:
    async with connection.cursor() as cursor:
        await cursor.execute("SET SESSION sql_mode = 'NO_BACKSLASH_ESCAPES'")
    assert literal(connection, "a'b\\c") == connection.literal("a'b\\c") == "'a''b\\c'"
    async with connection.cursor() as cursor:
        await cursor.execute(quote(connection, "SELECT CAST(%s AS BINARY)", ["a'b\\c"]))
        assert bytes((await cursor.fetchall())[0][0]) == b"a'b\\c"
