"""How a ciphertext sits in what a backend stores, known to every manager.

`agentsessions.encryption` writes a sealed state as the JSON object ``{MARKER: "kid:…"}``
and a sealed event with null content and that object as its metadata. This module
needs no cryptography, so a manager without encryption can still tell that a session
it reads is encrypted, and say so instead of returning ciphertext as if it were data.
"""

from __future__ import annotations

import pydantic_core

__all__ = ["MARKER", "envelope_of", "envelope_of_text"]

#: The one key of the JSON object that holds a ciphertext.
MARKER = "agentsessions.encrypted"
_PREFIX = '{"' + MARKER + '":'


def envelope_of(value: object) -> object | None:
    """The ciphertext of a sealed JSON object (``{MARKER: ...}``), else None."""
    if type(value) is dict and len(value) == 1:
        return value.get(MARKER)
    return None


def envelope_of_text(stored: str) -> object | None:
    """`envelope_of` a stored JSON text; the cheap prefix test settles plaintext states."""
    if not stored.startswith(_PREFIX):
        return None
    try:
        return envelope_of(pydantic_core.from_json(stored))
    except ValueError:
        return None
