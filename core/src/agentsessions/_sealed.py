"""How a ciphertext sits in what a backend stores, known to every manager.

`agentsessions.encryption` writes a sealed state as the JSON object ``{MARKER: "kid:…"}``
and a sealed event with null content and that object as its metadata. This module
needs no cryptography, so a manager without encryption can still tell that a session
it reads is encrypted, and say so instead of returning ciphertext as if it were data.
"""

from __future__ import annotations

from dataclasses import replace

import pydantic_core

from ._records import Capabilities

__all__ = ["MARKER", "envelope_of", "envelope_of_text", "sealed_capabilities"]

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


# What sealing adds around an event's ciphertext at most: its clear id and author (255
# characters, each at most 6 bytes once JSON-escaped), timestamp, key id (64), sealed
# position and the wrapper's keys; and around a state's: the key id and the marker.
_EVENT_OVERHEAD = 4096
_STATE_OVERHEAD = 128
_NONCE_AND_TAG = 28


def _plaintext_limit(limit: int | None, overhead: int) -> int | None:
    # base64 of m bytes takes 4 * ceil(m / 3) characters.
    if limit is None:
        return None
    return max(0, (limit - overhead) // 4 * 3 - _NONCE_AND_TAG)


def sealed_capabilities(own: Capabilities) -> Capabilities:
    """*own* (a backend's capabilities) as seen through encryption: the size limits of
    the plaintext whose encrypted form fits the backend's limits, whatever its id and
    author."""
    return replace(
        own,
        max_event_bytes=_plaintext_limit(own.max_event_bytes, _EVENT_OVERHEAD),
        max_state_bytes=_plaintext_limit(own.max_state_bytes, _STATE_OVERHEAD),
    )
