"""The one interface every measured store implements: ours, the raw floors and the peers.

The harness only ever calls these methods, so every store is timed doing the same
logical work: one agent turn reads the session (all of it, or the newest 20 events),
then appends a user and an assistant message of about 300 bytes of JSON each.
"""

from __future__ import annotations

import abc
import uuid
from datetime import datetime, timezone
from typing import Any, ClassVar, Literal

__all__ = [
    "BULK_BATCH",
    "LAST_EVENTS",
    "TURN_BATCH",
    "MESSAGE_TEXT",
    "Kind",
    "StaleWrite",
    "Store",
    "StoreUnavailable",
    "event_dict",
    "new_session_id",
]

Kind = Literal["ours", "adapter", "floor", "peer"]
StaleWrite = Literal["raises", "both kept", "lost", "n/a"]

#: How many events a "last events" read asks for.
LAST_EVENTS = 20
#: Pre-population writes this many events per save: a history is built in a few
#: round trips, so a 5,000-event session costs seconds, not minutes. Some sizes are
#: also built turn by turn (`TURN_BATCH`), which is how histories really grow and
#: what layouts such as one document per write are sensitive to.
BULK_BATCH = 500
TURN_BATCH = 2
#: The body of every message. With the envelope (id, author, timestamp, metadata) each
#: event encodes to about 300 bytes of JSON in every store.
MESSAGE_TEXT = (
    "The quick brown fox jumps over the lazy dog while the agent reasons about the next "
    "tool call, keeps its plan in state and answers the user politely and concisely, "
    "in about one short paragraph."
)


def new_session_id(prefix: str = "s") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:16]}"


def event_dict(author: str, index: int) -> dict[str, Any]:
    """One event as the floors store it: the same fields our `Event` encodes."""
    return {
        "id": uuid.uuid4().hex,
        "author": author,
        "content": {"role": author, "text": MESSAGE_TEXT, "n": index},
        "timestamp": datetime.now(timezone.utc).isoformat(),
        "metadata": {},
    }


class StoreUnavailable(Exception):
    """A store cannot run here (driver or peer package missing, server unreachable)."""


class Store(abc.ABC):
    """One session store under test.

    A store keeps, per session id, the copy its last turn loaded (the agent's
    in-memory session), so `append` measures a save alone, without a read.
    """

    kind: ClassVar[Kind]
    #: The engine, so ratios compare like with like ("sqlite", "postgres", ...).
    engine: str
    #: Shown in tables: "agentsessions", "raw aiosqlite", "OpenAI SQLiteSession", ...
    name: str
    #: The framework whose API a peer or adapter speaks ("openai", "adk"): an adapter
    #: is compared with the peers of its own framework only.
    family: ClassVar[str | None] = None

    @property
    def label(self) -> str:
        return f"{self.name} [{self.engine}]"

    async def open(self) -> None:  # noqa: B027 - most stores need no setup
        """Connect and create whatever the run needs (schemas, prefixes)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Remove everything this run created, then disconnect."""

    @abc.abstractmethod
    async def create(self, session_id: str, history: int, batch: int = BULK_BATCH) -> None:
        """Create a session holding *history* events, written *batch* per write (untimed):
        in bulk, or two at a time as an agent's turns would write them."""

    def forget(self, session_id: str) -> None:  # noqa: B027 - only stores that hold copies
        """Drop the copy held for *session_id*; called untimed before each turn.

        Freeing a 5,000-event session costs milliseconds (thousands of objects); it
        would otherwise be charged to whatever turn happened to replace it.
        """

    @abc.abstractmethod
    async def turn(self, session_id: str, last: int | None) -> float:
        """Read the session (newest *last* events, or all), append two messages, save.

        Returns the seconds spent reading, so the harness can report the read alone.
        """

    @abc.abstractmethod
    async def append(self, session_id: str) -> None:
        """Append two messages to the copy the last `turn` loaded, without reading."""

    @abc.abstractmethod
    async def contended_update(self, session_id: str) -> int:
        """Read-modify-write of one turn that must land despite concurrent writers.

        Returns how many times the write had to be retried.
        """

    @abc.abstractmethod
    async def count(self, session_id: str) -> int:
        """How many events are stored (to verify that every contended write landed)."""

    async def stale_write(self) -> StaleWrite:
        """Two copies of one session, both append: does the second writer notice?

        "raises": the stale save is refused. "both kept": the store appends blindly
        (no event lost, but the second writer acted on history it never saw).
        "lost": the second save silently overwrote the first.
        """
        return "n/a"
