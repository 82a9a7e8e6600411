"""Ids: what makes a session or user id valid, and the random tokens and lineages writes carry."""

from __future__ import annotations

import os
import secrets

from ._errors import InvalidSessionIdError

__all__ = ["MAX_ID_LENGTH", "new_lineage", "new_token", "optional_id", "validate_id"]

MAX_ID_LENGTH = 255


def validate_id(value: object, what: str = "session_id") -> str:
    """Return *value* if it is a usable id, else raise `InvalidSessionIdError`.

    Any non-empty, non-blank string of at most 255 characters is an id, however many
    quote, brace, dollar or slash characters it holds: backends store ids as data,
    never splice them into queries. NUL and unpaired surrogates are refused because
    no engine stores them faithfully.
    """
    if type(value) is not str:
        raise InvalidSessionIdError(f"{what} must be a str, not {type(value).__name__}")
    if not value or value.isspace():
        raise InvalidSessionIdError(f"{what} must not be empty or blank")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidSessionIdError(
            f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH}"
        )
    if "\x00" in value:
        raise InvalidSessionIdError(f"{what} must not contain NUL characters")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidSessionIdError(f"{what} holds an unpaired surrogate") from None
    return value


def optional_id(value: object, what: str) -> str | None:
    """`validate_id`, letting None through (an absent user id)."""
    return None if value is None else validate_id(value, what)


def new_token() -> str:
    """A save's unique token: 128 random bits as 32 hex characters."""
    return os.urandom(16).hex()  # secrets.token_hex(16), minus two calls on every save


def new_lineage() -> str:
    """A new `SessionRecord.lineage`: 64 random bits as 16 hex characters."""
    return secrets.token_hex(8)
