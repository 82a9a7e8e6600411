"""A broken backend only the state machine's look at raw storage catches (issue 43).

Its bug leaves rows that no read, listing, count or later operation ever shows, after
a sequence no single clause walks: so the machine's reads agree with the model, and
only its storage check (`_machine`'s ``storage_agrees``, and the same check before
each run, once the id pool is deleted) fails on it. It joins `broken.BROKEN`.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime
from typing import Any

from agentsessions.backend import to_micros
from agentsessions_sqlite import SQLiteSessionManager
from agentsessions_sqlite import _statements as sqlite_sql

from conformance.broken import Broken

__all__ = ["DeleteOfExpiredOrphansEventsManager"]


def _delete(conn: sqlite3.Connection, namespace: str, session_id: str, now: int) -> bool:
    key = (namespace, session_id)
    row = conn.execute(sqlite_sql.SELECT_EXPIRY, key).fetchone()
    if row is None:
        return False
    conn.execute(sqlite_sql.DELETE_SESSION, key)
    expires = row[0]
    if expires is not None and expires <= now:
        return False  # "nothing live was deleted": returns before the rows below go
    conn.execute(sqlite_sql.DELETE_EVENTS, key)
    conn.execute(sqlite_sql.DELETE_ARCHIVE, key)
    return True


class DeleteOfExpiredOrphansEventsManager(SQLiteSessionManager, Broken):
    """delete() of an expired, unpurged session erases its row and returns False, as it
    must, but returns early: the session's events and archive stay, orphaned.

    No read sees them (no session row, so no session), purge_expired() never counts
    them (it counts session rows), and a later create(), restore() or fork() of the id
    clears them (it replaces the rows of an id first): the ttl clauses that delete an
    expired session give it no events, and the erasure clauses delete live ones. Only
    raw storage tells, after the delete or, when the machine's own delete of the pool
    before a run made the orphans, before that run's first step.
    """

    caught_by = frozenset({"test_state_machine_agrees_with_the_reference"})

    async def _delete(self, session_id: str, now: datetime) -> bool:
        result: Any = await self._writer.write(
            _delete, self.options.namespace, session_id, to_micros(now)
        )
        return bool(result)
