"""The cross-cutting rules, each one clause parametrised over every public operation
(`_operations.OPERATIONS`): another namespace sees and touches nothing, an expired
session is absent to every operation, an operation naming another user is refused, a
write leaves nothing behind once its session is erased (by delete, delete_user or
purge_expired), and a write of an earlier life's copy is a conflict.

Each rule is written once, so a backend that gets a rule right on the operations the
kit first checked and wrong on a newer one fails under that operation's name. Storage
is read through `raw_inventory` as well as through the manager.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from agentsessions import (
    Event,
    Session,
    SessionConflictError,
    SessionError,
    SessionManager,
    SessionNotFoundError,
    SessionOwnershipError,
    SessionPage,
)

from ._base import SuiteBase, short, snapshot
from ._operations import NEEDS, OPERATIONS, TAKES_USER, Target, call_of
from ._tests_restore import _exported
from ._tests_ttl import PAST_TTL, TTL

#: The operations that write a session, each followed by an erasure in the erasure rule.
WRITES = ["create", "save", "update", "compact", "fork", "rewind", "restore"]
#: The operations that take a loaded copy and check its version and lineage.
COPY_WRITES = ["save", "compact", "rewind"]
#: Ways a session is erased.
ERASURES = ["delete", "delete_user", "purge_expired"]
#: Events of every target session.
EVENTS = 6

Outcome = tuple[str, Any]


async def _outcome(call: Callable[[], Coroutine[Any, Any, Any]]) -> Outcome:
    try:
        return "ok", await call()
    except SessionError as exc:
        return "raised", exc


def _told(outcome: Outcome) -> str:
    kind, value = outcome
    if kind == "raised":
        return f"raised {type(value).__name__}: {value}"
    if isinstance(value, Session):
        return f"returned session {value.session_id!r} with {len(value.events)} events"
    if isinstance(value, SessionPage):
        return f"returned a page of {[item.session_id for item in value.items]}"
    return f"returned {short(value)}"


def _absent_problem(operation: str, outcome: Outcome, target: Target) -> str | None:
    """What is wrong with *outcome* of *operation* on a session that, to this manager,
    does not exist (another namespace's, or expired); None if it is right."""
    kind, value = outcome
    expected: str
    if operation == "create":
        good = kind == "ok" and isinstance(value, Session) and not value.events
        good = good and value.version == 1
        expected = "a new, empty session at version 1"
    elif operation == "restore":
        good = kind == "ok" and isinstance(value, Session)
        good = good and [e.id for e in value.events] == [e.id for e in target.export.events]
        expected = "the restored session, holding exactly the export's events"
    elif operation in ("get", "get(last_events)"):
        good, expected = kind == "ok" and value is None, "None"
    elif operation in ("save", "update", "fork", "rewind", "compact"):
        good = kind == "raised" and isinstance(value, SessionNotFoundError)
        expected = "SessionNotFoundError"
    elif operation.startswith("list_sessions"):
        # The target lives in a namespace of its own (the clauses need namespaces or
        # make it so): no page may name it or its forks.
        good = kind == "ok" and isinstance(value, SessionPage)
        good = good and not {item.session_id for item in value.items} & {
            target.session_id,
            target.fork_id,
        }
        expected = f"a page without {target.session_id!r} or its fork"
    elif operation == "archived_events":
        good, expected = kind == "ok" and value == [], "[] (nothing archived)"
    elif operation == "delete":
        good, expected = kind == "ok" and value is False, "False (nothing to delete)"
    elif operation == "delete_user":
        good, expected = kind == "ok" and value == 0, "0 (no session of that user)"
    else:
        good, expected = kind == "ok" and value == 0, "0 (nothing to purge)"
    return None if good else f"expected {expected}, but it {_told(outcome)}"


class EveryOperationTests(SuiteBase):
    # -- building blocks --------------------------------------------------------------

    async def _target(
        self, space: SessionManager, *, fork: bool = True, archive: bool = True
    ) -> Target:
        """A session of `EVENTS` events owned by a fresh user in *space*, with an archive
        (compaction) and a fork (branching) when the backend has them, and a fresh copy."""
        owner = self.new_user()
        session = await space.create(self.new_id(), owner, state={"n": 1})
        for index in range(EVENTS):
            session.add_event("user", f"event {index}")
        await space.save(session)
        fork_id = self.new_id("fork")
        if archive and space.capabilities.compaction:
            summary = [Event(author="summarizer", content={"summary": "first"})]
            await space.compact(session, session.events[0].id, summary, archive=True)
            for index in range(2):
                session.add_event("user", f"after the compaction {index}")
            await space.save(session)
        if fork and space.capabilities.branching:
            await space.fork(session.session_id, fork_id)
        copy = await space.get(session.session_id)
        assert copy is not None, (
            f"get({session.session_id!r}) returned None right after its create() and "
            "save(): a session just saved must be found"
        )
        return Target(
            manager=space,
            session_id=session.session_id,
            owner=owner,
            copy=copy,
            create_id=session.session_id,
            export=_exported(session.session_id, owner, events=3),
            fork_id=fork_id,
        )

    async def _picture(self, space: SessionManager, target: Target) -> dict[str, Any]:
        """Everything *space* shows and stores of *target*: its session and fork, its
        archive, its fork listing, its owner's listing and the raw inventories."""
        ids = [target.session_id, target.fork_id]
        found: dict[str, Any] = {}
        for session_id in ids:
            found[f"get({session_id!r})"] = snapshot(await space.get(session_id))
            held = await self.inventory(space, session_id)
            found[f"raw_inventory({session_id!r})"] = (
                held.records,
                sorted(held.events),
                sorted(held.other),
                held.archived,
            )
        if space.capabilities.compaction:
            archived = await space.archived_events(target.session_id)
            found["archived_events"] = [event.model_dump() for event in archived]
        if space.capabilities.branching:
            page = await space.list_sessions(forked_from=target.session_id, limit=100)
            found["list_sessions(forked_from)"] = sorted(i.session_id for i in page.items)
        owned = await self.list_all(space, user_id=target.owner)
        found["list_sessions(user_id)"] = sorted(item.session_id for item in owned)
        return found

    @staticmethod
    def _changes(before: dict[str, Any], after: dict[str, Any]) -> str:
        changed = [
            f"{key}: {short(before.get(key), 120)} -> {short(after.get(key), 120)}"
            for key in sorted(set(before) | set(after))
            if before.get(key) != after.get(key)
        ]
        return "; ".join(changed[:4])

    # -- namespaces -------------------------------------------------------------------

    @pytest.mark.parametrize("operation", OPERATIONS)
    async def test_every_operation_in_another_namespace_sees_and_touches_nothing(
        self, manager: SessionManager, operation: str
    ) -> None:
        """Each operation, called in namespace B on the id of a session that lives in
        namespace A (with events, an archive, a fork and an owner), answers as if the
        session did not exist, and leaves A's session, archive, fork, listings and raw
        storage exactly as they were; purge_expired in B also leaves A's expired
        session in storage (the rule: a namespace sees and touches nothing of another)."""
        self.require(manager, "namespaces")
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        ttl = {"ttl": TTL} if manager.capabilities.ttl else {}
        left = await self.frozen(manager, **ttl)
        right = await self.frozen(manager, namespace=self.new_namespace(), **ttl)
        stale_id: str | None = None
        if ttl:
            stale_id = self.new_id("stale")
            await left.create(stale_id)
            self.clock.advance(TTL - 1)
        target = await self._target(left)
        if stale_id is not None:
            self.clock.advance(2)  # the stale session is past its ttl, the target is not
        before = await self._picture(left, target)
        stale_before = None if stale_id is None else await self.inventory(left, stale_id)
        elsewhere = dataclasses.replace(target, manager=right)
        outcome = await _outcome(call_of(operation, elsewhere))
        problem = _absent_problem(operation, outcome, elsewhere)
        assert problem is None, (
            f"{operation} in another namespace on the id of a session of this one: "
            f"{problem} (the rule: a namespace sees nothing of another)"
        )
        after = await self._picture(left, target)
        assert after == before, (
            f"{operation} in another namespace changed this namespace's session "
            f"{target.session_id!r}: {self._changes(before, after)} (the rule: a "
            "namespace touches nothing of another)"
        )
        if stale_id is not None:
            stale_after = await self.inventory(left, stale_id)
            assert stale_after == stale_before, (
                f"{operation} in another namespace changed this namespace's expired, "
                f"unpurged session {stale_id!r} in storage: {stale_before} -> {stale_after} "
                "(the rule: purge_expired erases in its own namespace only)"
            )

    # -- expiry -----------------------------------------------------------------------

    @pytest.mark.parametrize("operation", OPERATIONS)
    async def test_every_operation_treats_an_expired_session_as_absent(
        self, manager: SessionManager, operation: str
    ) -> None:
        """Each operation on a session past its ttl but not purged (with events, an
        archive, a fork and an owner, all expired) answers as if it did not exist:
        reads find nothing, writes of its copies are SessionNotFoundError, create and
        restore make a new life that holds nothing of the old one, delete and
        delete_user count nothing; and a read does not bring it back. purge_expired
        counts it and its fork and leaves nothing of them in storage (the rule: an
        expired session is gone to every operation)."""
        self.require(manager, "ttl")
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        space = await self.frozen(manager, ttl=TTL)
        target = await self._target(space)
        self.clock.advance(PAST_TTL)
        outcome = await _outcome(call_of(operation, target))
        ids = [target.session_id]
        if manager.capabilities.branching:
            ids.append(target.fork_id)
        if operation == "purge_expired":
            assert outcome[0] == "ok" and outcome[1] >= len(ids), (
                f"purge_expired() with {len(ids)} expired sessions {ids} must count each "
                f"it removes, but it {_told(outcome)} (the rule: expired sessions are purged)"
            )
            for session_id in ids:
                await self.check_erased(space, session_id, "purge_expired() ran")
            return
        problem = _absent_problem(operation, outcome, target)
        assert problem is None, (
            f"{operation} on the expired session {target.session_id!r}: {problem} "
            "(the rule: an expired session is gone to every operation)"
        )
        stored = await space.get(target.session_id)
        if operation in ("create", "restore"):
            kept = [] if operation == "create" else [e.id for e in target.export.events]
            assert stored is not None and [e.id for e in stored.events] == kept, (
                f"{operation} over the expired id {target.session_id!r} must store a new "
                f"life holding exactly {kept}, found "
                f"{None if stored is None else [e.id for e in stored.events]} (the rule: "
                "a new life keeps nothing of the expired one)"
            )
            await self.check_positions(space, target.session_id, len(kept))
            found = await self.inventory(space, target.session_id)
            assert found.archived == 0, (
                f"{operation} over the expired id {target.session_id!r}: storage still "
                f"holds {found.archived} archived events of the old life (the rule: a new "
                "life keeps nothing of the expired one)"
            )
            return
        assert stored is None, (
            f"after {operation} on the expired session {target.session_id!r}, get() must "
            f"still return None, found {len(stored.events)} events (the rule: no "
            "operation brings an expired session back)"
        )

    # -- users ------------------------------------------------------------------------

    @pytest.mark.parametrize("operation", sorted(TAKES_USER))
    async def test_every_operation_naming_another_user_is_refused(
        self, manager: SessionManager, operation: str
    ) -> None:
        """Each operation that names a user, called with a user who does not own the
        session, is refused: get, archived_events, update, fork and delete raise
        SessionOwnershipError, list_sessions(user_id=) lists nothing of it and
        delete_user erases nothing of it; and the session, its archive, fork, listings
        and raw storage are exactly as they were (the rule: a user reaches only their
        own sessions)."""
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        space = await self.frozen(manager)
        target = await self._target(space)
        before = await self._picture(space, target)
        stranger = self.new_user()
        named = dataclasses.replace(target, user_id=stranger)
        outcome = await _outcome(call_of(operation, named))
        kind, value = outcome
        if operation == "list_sessions(user_id)":
            good = kind == "ok" and not {i.session_id for i in value.items} & {
                target.session_id,
                target.fork_id,
            }
            expected = "a page without the session or its fork"
        elif operation == "delete_user":
            good, expected = kind == "ok" and value == 0, "0 (the stranger owns nothing)"
        else:
            good = kind == "raised" and isinstance(value, SessionOwnershipError)
            expected = "SessionOwnershipError"
        assert good, (
            f"{operation} with user_id={stranger!r} on a session owned by "
            f"{target.owner!r}: expected {expected}, but it {_told(outcome)} (the rule: "
            "a user reaches only their own sessions)"
        )
        after = await self._picture(space, target)
        assert after == before, (
            f"{operation} by a user who does not own {target.session_id!r} changed it: "
            f"{self._changes(before, after)} (the rule: a refused call writes nothing)"
        )

    # -- erasure ----------------------------------------------------------------------

    @pytest.mark.parametrize("erasure", ERASURES)
    @pytest.mark.parametrize("operation", WRITES)
    async def test_every_write_leaves_nothing_once_erased(
        self, manager: SessionManager, operation: str, erasure: str
    ) -> None:
        """After each write (its archive, fork, token and index entries included), the
        session it wrote is erased by delete(), by delete_user() of its owner or, past
        its ttl, by purge_expired(): storage then holds nothing of it, reads and
        listings show nothing, and the erasure counted it (the rule: nothing is left
        after erasure, whatever wrote it)."""
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        if erasure == "purge_expired":
            self.require(manager, "ttl")
        ttl = {"ttl": TTL} if erasure == "purge_expired" else {}
        space = await self.frozen(manager, **ttl)
        target = await self._target(space, fork=False)
        if operation in ("create", "restore"):
            target.create_id = self.new_id("new")
            target.export = _exported(target.create_id, target.owner, events=3)
        outcome = await _outcome(call_of(operation, target))
        assert outcome[0] == "ok", (
            f"setup: {operation} on a live session of its owner must succeed, but it "
            f"{_told(outcome)}"
        )
        written = {
            "create": target.create_id,
            "restore": target.create_id,
            "fork": target.fork_id,
        }.get(operation)
        ids = [target.session_id] + ([written] if written else [])
        if erasure == "delete":
            for session_id in ids:
                assert await space.delete(session_id) is True, (
                    f"delete({session_id!r}) after {operation} must return True: the "
                    "session is stored"
                )
        elif erasure == "delete_user":
            count = await space.delete_user(target.owner)
            assert count == len(ids), (
                f"delete_user({target.owner!r}) after {operation} must erase the "
                f"{len(ids)} sessions {ids} the user owns, but it said {count}"
            )
        else:
            self.clock.advance(PAST_TTL)
            count = await space.purge_expired()
            assert count >= len(ids), (
                f"purge_expired() after {operation}, past the ttl, must count the "
                f"{len(ids)} expired sessions {ids}, but it said {count}"
            )
        for session_id in ids:
            await self.check_erased(space, session_id, f"{operation}, then {erasure}()")
            assert await space.get(session_id) is None, (
                f"get({session_id!r}) after {operation}, then {erasure}(): expected None, "
                "found a session (the rule: nothing is left after erasure)"
            )
        owned = await self.list_all(space, user_id=target.owner)
        assert not owned, (
            f"list_sessions(user_id={target.owner!r}) after {operation}, then {erasure}(): "
            f"expected nothing, found {[item.session_id for item in owned]}"
        )

    # -- re-creation ------------------------------------------------------------------

    @pytest.mark.parametrize("operation", COPY_WRITES)
    async def test_every_write_of_an_earlier_lifes_copy_is_a_conflict(
        self, manager: SessionManager, operation: str
    ) -> None:
        """A save, compaction or rewind of a copy loaded before its id was deleted and
        created again raises SessionConflictError and writes nothing, even when the
        new life stands at the copy's version with as many events: the lineage is
        checked with the version (the rule: a copy belongs to one life of its id)."""
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        space = await self.frozen(manager)
        target = await self._target(space, fork=False, archive=False)
        stale = target.copy
        await space.delete(target.session_id)
        second = await space.create(target.session_id, target.owner)
        for index in range(stale.version - second.version):
            second.add_event("user", f"new life {index}")
            await space.save(second)
        before = await self._picture(space, target)
        current = await space.get(target.session_id)
        assert current is not None and current.version == stale.version, (
            f"setup: the new life stands at version {current and current.version}, "
            f"the earlier life's copy at {stale.version}"
        )
        outcome = await _outcome(call_of(operation, target))
        assert outcome[0] == "raised" and isinstance(outcome[1], SessionConflictError), (
            f"{operation} of a copy of an earlier life of {target.session_id!r} (at the "
            f"new life's version {stale.version}): expected SessionConflictError, but it "
            f"{_told(outcome)} (the rule: a copy belongs to one life of its id)"
        )
        after = await self._picture(space, target)
        assert after == before, (
            f"{operation} of an earlier life's copy changed the new life: "
            f"{self._changes(before, after)} (the rule: a refused write writes nothing)"
        )
