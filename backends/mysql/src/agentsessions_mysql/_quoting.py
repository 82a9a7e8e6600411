"""Statement parameters quoted into SQL text, as asyncmy quotes them, only faster.

asyncmy escapes a ``str`` or ``bytes`` value with ``str.translate`` over a table, which
costs a dictionary look-up per character; the JSON texts this backend stores always
hold characters to escape (every ``"``), so every state and event paid that, megabytes
of it for a large value. `literal` builds the very same text with one C-level
``replace`` per special character present (checked against asyncmy's own quoting by
`tests/backends/mysql/test_mysql_quoting.py`). Values of other types, and every value
on a connection whose server has ``NO_BACKSLASH_ESCAPES`` set (a quote is then doubled
instead), are left to asyncmy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncmy import Connection

__all__ = ["escape", "literal", "quote"]

#: The server status bit that turns backslash escapes off (asyncmy's constant).
_NO_BACKSLASH_ESCAPES = 512

# Backslash first, so that the backslashes the later replacements add stay single.
_SPECIAL = (
    ("\\", "\\\\"),
    ("'", "\\'"),
    ('"', '\\"'),
    ("\0", "\\0"),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\032", "\\Z"),
)


def escape(text: str) -> str:
    """*text* escaped for a single-quoted literal, exactly as asyncmy's ``escape_string``."""
    for char, escaped in _SPECIAL:
        if char in text:
            text = text.replace(char, escaped)
    return text


def literal(connection: Connection, value: Any) -> str:
    """*value* as the SQL literal asyncmy's ``Connection.literal`` gives."""
    # asyncmy's stubs declare neither server_status nor literal's types.
    driver: Any = connection
    kind = type(value)
    if kind is str or kind is bytes:
        if driver.server_status & _NO_BACKSLASH_ESCAPES:
            return str(driver.literal(value))
        if kind is str:
            return "'" + escape(value) + "'"
        return "_binary'" + escape(value.decode("ascii", "surrogateescape")) + "'"
    if kind is int:
        return str(value)
    if value is None:
        return "NULL"
    return str(driver.literal(value))


def quote(connection: Connection, sql: str, args: Sequence[Any]) -> str:
    """*sql* with its ``%s`` placeholders replaced by *args* as literals (asyncmy's
    ``Cursor.mogrify``)."""
    return sql % tuple([literal(connection, value) for value in args])
