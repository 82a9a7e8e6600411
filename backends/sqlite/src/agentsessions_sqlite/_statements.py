"""Every statement the SQLite manager sends, spelled out once; values are always bound.

Liveness is "expires_at IS NULL OR expires_at > :now" everywhere, so an expired
session is invisible the instant it expires, whether or not it has been purged.
"""

from __future__ import annotations

__all__ = [
    "AFTER",
    "ARCHIVE_HEAD",
    "ARCHIVE_TAIL",
    "COMPACT_SESSION",
    "COPY_EVENTS",
    "COUNT_LIVE_OF_USER",
    "CREATE",
    "DELETE_ARCHIVE",
    "DELETE_ARCHIVE_OF_EXPIRED",
    "DELETE_ARCHIVE_OF_USER",
    "DELETE_EVENTS",
    "DELETE_EVENTS_OF_EXPIRED",
    "DELETE_EVENTS_OF_USER",
    "DELETE_EVENT_HEAD",
    "DELETE_EVENT_TAIL",
    "DELETE_EXPIRED",
    "DELETE_SESSION",
    "DELETE_SESSIONS_OF_USER",
    "FIND_EVENT",
    "INSERT_EVENT",
    "LIST",
    "LIST_FORKS",
    "OF_SOURCE",
    "OF_USER",
    "PAGE",
    "REWIND_SESSION",
    "SELECT_ALL_EVENTS",
    "SELECT_ARCHIVE",
    "SELECT_EVENTS_FROM",
    "SELECT_EXPIRY",
    "SELECT_FIRST_POSITION",
    "SELECT_LAST_EVENTS",
    "SELECT_LIVE",
    "SELECT_SESSION",
    "SELECT_VERSION",
    "SUMMARY",
    "UPDATE_SESSION",
]

SELECT_SESSION = """
SELECT user_id, state, version, created_at, updated_at, expires_at, event_count, lineage,
       fork_source, fork_version, fork_event
FROM agentsessions_sessions
WHERE namespace = ? AND session_id = ? AND (expires_at IS NULL OR expires_at > ?)
"""
# Events come back as the stored UTF-8 bytes (CAST ... AS BLOB): pydantic-core parses
# bytes directly, so decoding each row into a str first is wasted work (it was 40% of
# fetching 5,500 events). Only valid when the database's text encoding is UTF-8, which
# is SQLite's default; a UTF-16 database (set by whoever created the file) gets str.
SELECT_ALL_EVENTS = {
    True: """
SELECT CAST(data AS BLOB) FROM agentsessions_events
WHERE namespace = ? AND session_id = ? ORDER BY position
""",
    False: """
SELECT data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? ORDER BY position
""",
}
# The events from a position on (what follows a copy that lost a race).
SELECT_EVENTS_FROM = {
    True: """
SELECT CAST(data AS BLOB) FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND position >= ? ORDER BY position
""",
    False: """
SELECT data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND position >= ? ORDER BY position
""",
}
SELECT_LAST_EVENTS = {
    True: """
SELECT CAST(data AS BLOB) FROM agentsessions_events
WHERE namespace = ? AND session_id = ? ORDER BY position DESC LIMIT ?
""",
    False: """
SELECT data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? ORDER BY position DESC LIMIT ?
""",
}
# An insert, or the replacement of an expired session with the same id; a live one
# makes the DO UPDATE's WHERE false, so nothing changes and rowcount says so.
CREATE = """
INSERT INTO agentsessions_sessions (
    namespace, session_id, user_id, state, version,
    created_at, updated_at, expires_at, event_count, lineage,
    fork_source, fork_version, fork_event
) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (namespace, session_id) DO UPDATE SET
    user_id = excluded.user_id, state = excluded.state, version = excluded.version,
    created_at = excluded.created_at, updated_at = excluded.updated_at,
    expires_at = excluded.expires_at, event_count = excluded.event_count, save_tokens = '',
    lineage = excluded.lineage, first_position = 0, fork_source = excluded.fork_source,
    fork_version = excluded.fork_version, fork_event = excluded.fork_event
WHERE agentsessions_sessions.expires_at IS NOT NULL AND agentsessions_sessions.expires_at <= ?
"""
DELETE_EVENTS = "DELETE FROM agentsessions_events WHERE namespace = ? AND session_id = ?"
DELETE_ARCHIVE = "DELETE FROM agentsessions_archive WHERE namespace = ? AND session_id = ?"
SELECT_FIRST_POSITION = """
SELECT first_position FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?
"""
# A compaction moves the session's first position instead of renumbering what it keeps.
COMPACT_SESSION = """
UPDATE agentsessions_sessions
SET version = ?, updated_at = ?, expires_at = ?, event_count = ?,
    save_tokens = substr(? || save_tokens, 1, ?), first_position = first_position + ?,
    lineage = ?
WHERE namespace = ? AND session_id = ? AND version = ?
  AND (expires_at IS NULL OR expires_at > ?) AND (? = '' OR lineage = ?)
"""
ARCHIVE_HEAD = """
INSERT INTO agentsessions_archive (namespace, session_id, version, position, data)
SELECT namespace, session_id, ?, position - ?, data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND position < ?
"""
DELETE_EVENT_HEAD = """
DELETE FROM agentsessions_events WHERE namespace = ? AND session_id = ? AND position < ?
"""
SELECT_ARCHIVE = """
SELECT data FROM agentsessions_archive
WHERE namespace = ? AND session_id = ? ORDER BY version, position
"""
SELECT_LIVE = """
SELECT 1 FROM agentsessions_sessions
WHERE namespace = ? AND session_id = ? AND (expires_at IS NULL OR expires_at > ?)
"""
# The version check and the write are one statement inside BEGIN IMMEDIATE: the row
# changes only if nobody saved since the load. user_id and created_at are not written.
UPDATE_SESSION = """
UPDATE agentsessions_sessions
SET state = ?, version = ?, updated_at = ?, expires_at = ?, event_count = ?,
    save_tokens = substr(? || save_tokens, 1, ?), lineage = ?
WHERE namespace = ? AND session_id = ? AND version = ?
  AND (expires_at IS NULL OR expires_at > ?) AND (? = '' OR lineage = ?)
"""
SELECT_VERSION = """
SELECT version, instr(save_tokens, ?) > 0, expires_at FROM agentsessions_sessions
WHERE namespace = ? AND session_id = ?
"""
DELETE_EVENT_TAIL = """
DELETE FROM agentsessions_events WHERE namespace = ? AND session_id = ? AND position >= ?
"""
INSERT_EVENT = """
INSERT INTO agentsessions_events (namespace, session_id, position, data) VALUES (?, ?, ?, ?)
"""
SELECT_EXPIRY = """
SELECT expires_at FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?
"""
DELETE_SESSION = "DELETE FROM agentsessions_sessions WHERE namespace = ? AND session_id = ?"
COUNT_LIVE_OF_USER = """
SELECT count(*) FROM agentsessions_sessions
WHERE namespace = ? AND user_id = ? AND (expires_at IS NULL OR expires_at > ?)
"""
DELETE_EVENTS_OF_USER = """
DELETE FROM agentsessions_events
WHERE namespace = ? AND session_id IN (
    SELECT session_id FROM agentsessions_sessions WHERE namespace = ? AND user_id = ?
)
"""
DELETE_ARCHIVE_OF_USER = """
DELETE FROM agentsessions_archive
WHERE namespace = ? AND session_id IN (
    SELECT session_id FROM agentsessions_sessions WHERE namespace = ? AND user_id = ?
)
"""
DELETE_SESSIONS_OF_USER = """
DELETE FROM agentsessions_sessions WHERE namespace = ? AND user_id = ?
"""
DELETE_EVENTS_OF_EXPIRED = """
DELETE FROM agentsessions_events
WHERE namespace = ? AND session_id IN (
    SELECT session_id FROM agentsessions_sessions
    WHERE namespace = ? AND expires_at IS NOT NULL AND expires_at <= ?
)
"""
DELETE_ARCHIVE_OF_EXPIRED = """
DELETE FROM agentsessions_archive
WHERE namespace = ? AND session_id IN (
    SELECT session_id FROM agentsessions_sessions
    WHERE namespace = ? AND expires_at IS NOT NULL AND expires_at <= ?
)
"""
DELETE_EXPIRED = """
DELETE FROM agentsessions_sessions
WHERE namespace = ? AND expires_at IS NOT NULL AND expires_at <= ?
"""

SUMMARY = """
SELECT session_id, user_id, created_at, updated_at, event_count, version,
       fork_source, fork_version, fork_event
FROM agentsessions_sessions
WHERE namespace = ? AND (expires_at IS NULL OR expires_at > ?)
"""
PAGE = " ORDER BY created_at DESC, session_id DESC LIMIT ?"
AFTER = " AND (created_at, session_id) < (?, ?)"
OF_USER = " AND user_id = ?"
# The four listing queries, spelled out once: (by user?, after a cursor?) -> SQL.
LIST = {
    (False, False): SUMMARY + PAGE,
    (False, True): SUMMARY + AFTER + PAGE,
    (True, False): SUMMARY + OF_USER + PAGE,
    (True, True): SUMMARY + OF_USER + AFTER + PAGE,
}
OF_SOURCE = " AND fork_source = ?"
# The forks of one session: (by user?, after a cursor?) -> SQL, as LIST.
LIST_FORKS = {
    (by_user, paged): SUMMARY
    + OF_SOURCE
    + (OF_USER if by_user else "")
    + (AFTER if paged else "")
    + PAGE
    for by_user in (False, True)
    for paged in (False, True)
}
# Where a fork's cut is: the stored position of the event with that id (ids are unique
# in a session). The scan reads the session's rows only, inside the engine.
FIND_EVENT = """
SELECT position FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND json_extract(data, '$.id') = ?
LIMIT 1
"""
# A fork's events, copied row to row inside the engine, renumbered from 0.
COPY_EVENTS = """
INSERT INTO agentsessions_events (namespace, session_id, position, data)
SELECT namespace, ?, position - ?, data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND position < ?
"""
# What a rewind drops, kept in the archive under the version it replaced.
ARCHIVE_TAIL = """
INSERT INTO agentsessions_archive (namespace, session_id, version, position, data)
SELECT namespace, session_id, ?, position - ?, data FROM agentsessions_events
WHERE namespace = ? AND session_id = ? AND position >= ?
"""
REWIND_SESSION = """
UPDATE agentsessions_sessions
SET version = ?, updated_at = ?, expires_at = ?, event_count = ?,
    save_tokens = substr(? || save_tokens, 1, ?), lineage = ?
WHERE namespace = ? AND session_id = ? AND version = ?
  AND (expires_at IS NULL OR expires_at > ?) AND (? = '' OR lineage = ?)
"""
