"""Key layout: where one namespace's sessions and listing indexes live.

Every key starts with ``agentsessions:<namespace>:`` (namespaces are ``[A-Za-z0-9_]*``,
so the prefix never holds a brace or a colon of its own). A session's keys share
the hash tag ``{<id as base64url>}``:

* ``agentsessions:<ns>:{<tag>}:h``: a hash with the record (and the real id),
* ``agentsessions:<ns>:{<tag>}:e``: a list with the events' JSON texts, in order,
* ``agentsessions:<ns>:{<tag>}:a``: a list with what compactions archived (absent
  unless a compaction was asked to archive),
* ``agentsessions:<ns>:{<tag>}:t``: the tokens of the latest saves, compactions and
  rewinds, a string of fixed slots (absent until the first of them; see `_scripts`).

base64url is injective and its alphabet (``A-Za-z0-9-_``) has no brace, so any id
(braces, colons, ``*``, newlines...) gives a distinct, well-formed tag, and all keys
of a session hash to one cluster slot: a script can touch them atomically.

Listing indexes are sorted sets scored by ``created_at`` in microseconds (exact in a
double until the year 2255):

* ``agentsessions:<ns>:index``: every session; member ``<id> NUL <user_id or "">``
  (ids hold no NUL, so ties on the score still sort by id, and a purge that finds the
  session gone knows which user index to clean too),
* ``agentsessions:<ns>:user:<user_id as base64url>``: one user's sessions; member ``<id>``,
* ``agentsessions:<ns>:forks:<source id as base64url>``: the forks of one session;
  member ``<id>`` (a fork's hash names this key in ``fk``, so deleting it cleans up).
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass

__all__ = [
    "SessionKeys",
    "KeyLayout",
    "global_member",
    "split_global_member",
]


@functools.lru_cache(maxsize=4096)  # every call on a session computes its keys
def _tag(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


@functools.lru_cache(maxsize=4096)  # every call on a session computes its keys
def _session_keys(prefix: str, session_id: str) -> SessionKeys:
    base = f"{prefix}{{{_tag(session_id)}}}"
    return SessionKeys(
        hash=f"{base}:h", events=f"{base}:e", archive=f"{base}:a", tokens=f"{base}:t"
    )


def global_member(session_id: str, user_id: str | None) -> bytes:
    return session_id.encode() + b"\x00" + (user_id or "").encode()


def split_global_member(member: bytes) -> tuple[bytes, bytes | None]:
    """(id, user id or None) of a global index member, both as UTF-8 bytes."""
    session_id, _, user = member.partition(b"\x00")
    return session_id, user or None


@dataclass(frozen=True, slots=True)
class SessionKeys:
    hash: str
    events: str
    archive: str
    tokens: str

    @property
    def every(self) -> list[str]:
        """Every key of the session, in the order the scripts take them (KEYS[1..4])."""
        return [self.hash, self.events, self.archive, self.tokens]


@dataclass(frozen=True, slots=True)
class KeyLayout:
    """Key names of one namespace."""

    namespace: str

    @property
    def prefix(self) -> str:
        return f"agentsessions:{self.namespace}:"

    def session(self, session_id: str) -> SessionKeys:
        return _session_keys(self.prefix, session_id)

    @property
    def index(self) -> str:
        return f"{self.prefix}index"

    def user_index(self, user_id: str) -> str:
        return f"{self.prefix}user:{_tag(user_id)}"

    def fork_index(self, source_id: str) -> str:
        return f"{self.prefix}forks:{_tag(source_id)}"
