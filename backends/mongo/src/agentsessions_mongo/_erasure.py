"""Erasure: one session, a user's sessions, the expired ones, and what dead lives left.

A session's *life* is one incarnation of its id (see `_layout`); its event and archive
documents carry that incarnation. Erasing a life deletes its session document first and
its other documents after, so a failure in between leaves only documents no reader
takes (their incarnation is not the stored one), which the next `delete_session` of the
id or `purge_expired` reclaims. These functions need only one event loop's collections
(`Link`); the manager's cache of sessions it has seen is told of each erased session
through *forget*.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from pymongo.asynchronous.collection import AsyncCollection

from ._layout import Link, expired_filters, is_expired

__all__ = ["delete_session", "delete_user", "forget_lives", "purge_expired"]

Doc = dict[str, Any]
# Sessions erased per round of statements. Kept small because a server may match
# ``$in`` by scanning its list for every candidate document (SecantusDB does), which
# makes one batch cost its size squared; a smaller batch costs any server only more
# round trips.
_BATCH = 100


def lives_filter(key: str, lives: list[tuple[str, Any]]) -> Doc:
    """Matches the documents of these (session id, incarnation) lives; *key* is the
    field holding the session id ("_id" in sessions, "session" elsewhere).

    Two ``$in`` lists, not an ``$or`` of pairs: an ``$or`` clause per life costs a
    server that tests each clause per candidate document a time quadratic in the batch.
    The lists match no other life: an incarnation is an ObjectId drawn when its life
    was created, so it belongs to that one session id and no other.
    """
    return {
        key: {"$in": list({session for session, _ in lives})},
        "incarnation": {"$in": list({incarnation for _, incarnation in lives})},
    }


async def forget_lives(link: Link, query: Doc) -> None:
    """Delete the events and archive documents matching *query* (session, incarnation)."""
    await link.events.delete_many(query)
    await link.archive.delete_many(query)


async def delete_session(link: Link, session_id: str, now: datetime) -> bool:
    """Delete *session_id* with its documents; whether it was live at *now*."""
    doc = await link.sessions.find_one_and_delete(
        {"_id": session_id}, {"incarnation": 1, "expires_at": 1}
    )
    if doc is None:
        # Events a failed earlier delete left behind go now.
        await _delete_dead_incarnations(link, session_id)
        return False
    await forget_lives(link, {"session": session_id, "incarnation": doc["incarnation"]})
    return not is_expired(doc, now)


async def _delete_dead_incarnations(link: Link, session_id: str) -> None:
    """Delete the events of every incarnation of *session_id* but the stored one.

    Safe at any time: an incarnation's events are written only after its session
    document exists, so one whose document is gone or replaced is gone for good.
    """
    incarnations = set(await link.events.distinct("incarnation", {"session": session_id}))
    incarnations |= set(await link.archive.distinct("incarnation", {"session": session_id}))
    if not incarnations:
        return
    doc = await link.sessions.find_one({"_id": session_id}, {"incarnation": 1})
    current = None if doc is None else doc["incarnation"]
    dead = [incarnation for incarnation in incarnations if incarnation != current]
    if dead:
        await forget_lives(link, {"session": session_id, "incarnation": {"$in": dead}})


async def delete_user(
    link: Link, user_id: str, now: datetime, forget: Callable[[str], None]
) -> int:
    """Delete every session of *user_id*; how many were live at *now*."""
    deleted = 0
    while True:
        docs = (
            await link.sessions.find({"user_id": user_id}, {"incarnation": 1, "expires_at": 1})
            .limit(_BATCH)
            .to_list(None)
        )
        if not docs:
            return deleted
        live = [doc for doc in docs if not is_expired(doc, now)]
        expired = [doc for doc in docs if is_expired(doc, now)]
        progress = 0
        for group in (live, expired):
            if not group:
                continue
            result = await link.sessions.delete_many(lives_filter("_id", _lives_of(group)))
            progress += result.deleted_count
            if group is live:
                deleted += result.deleted_count
        for doc in docs:
            forget(doc["_id"])
        await _delete_events_of(link, docs)
        if not progress:
            return deleted  # every one changed under us; nothing left to chase


def _lives_of(docs: list[Doc]) -> list[tuple[str, Any]]:
    return [(doc["_id"], doc["incarnation"]) for doc in docs]


async def _delete_events_of(link: Link, docs: list[Doc]) -> None:
    if docs:
        await forget_lives(link, lives_filter("session", _lives_of(docs)))


async def purge_expired(link: Link, now: datetime, forget: Callable[[str], None]) -> int:
    """Delete expired sessions with their events, then events no session owns.

    The TTL monitor deletes expired session documents on its own, but it cannot
    delete their events (renewing an expiry on every event at each save would make
    a save cost O(history)). Those events are invisible, and the second pass here
    reclaims them: it reads the distinct (session, incarnation) pairs of the events
    collection, so it costs a scan of that collection; run it as periodic upkeep.
    """
    purged = 0
    for expired in expired_filters(now):
        while True:
            docs = await link.sessions.find(expired, {"incarnation": 1}).limit(_BATCH).to_list(None)
            if not docs:
                break
            result = await link.sessions.delete_many(
                {**lives_filter("_id", _lives_of(docs)), **expired}
            )
            purged += result.deleted_count
            for doc in docs:
                forget(doc["_id"])
            await _delete_events_of(link, docs)
            if not result.deleted_count or len(docs) < _BATCH:
                break
    await _delete_orphans_of(link, link.events)
    await _delete_orphans_of(link, link.archive)
    return purged


async def _delete_orphans_of(link: Link, collection: AsyncCollection[Doc]) -> None:
    """Delete the documents of *collection* whose (session, incarnation) is not stored."""
    pairs_cursor = await collection.aggregate(
        [{"$group": {"_id": {"session": "$session", "incarnation": "$incarnation"}}}]
    )
    pairs = [(doc["_id"]["session"], doc["_id"]["incarnation"]) async for doc in pairs_cursor]
    for index in range(0, len(pairs), _BATCH):
        batch = pairs[index : index + _BATCH]
        current = {
            doc["_id"]: doc["incarnation"]
            async for doc in link.sessions.find(
                {"_id": {"$in": list({session for session, _ in batch})}}, {"incarnation": 1}
            )
        }
        dead = [(session, life) for session, life in batch if current.get(session) != life]
        if dead:
            await collection.delete_many(lives_filter("session", dead))
