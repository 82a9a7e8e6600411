"""The branching methods of the SDK's ``AdvancedSQLiteSession`` for `AgentSessionsSession`,
each branch a fork (`SessionManager.fork`) of the branch it was made from.

Branch ``main`` is the adapter's own session; branch *name* is the session
``<session_id>::<name>``, forked from the branch that was current when it was made, so
the fork tree under ``main`` is the set of branches. A branch with no items is not
listed and cannot be switched to or deleted, as in the SDK (whose branches exist only
through their items); deleting a branch empties it instead of deleting its session, so
its name stays used (the SDK reserves deleted names too) and the branches forked from it
stay reachable. docs/openai-agents.md, "Branches", lists what differs from the SDK.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from .._errors import InvalidInputError, SessionExistsError
from .._manager import SessionManager
from .._models import Event, Session
from ._shared import finish_despite_cancellation

__all__ = ["BRANCH_SEPARATOR", "BranchError", "Branches", "MAIN_BRANCH"]

MAIN_BRANCH = "main"
#: Between the adapter's session id and a branch name in the branch's session id.
BRANCH_SEPARATOR = "::"
# Bounds the walk of the fork tree (branches of branches): far more branches than a
# conversation is explored into, and a corrupt tree cannot loop forever.
_MAX_BRANCHES = 10_000
_PAGE = 500


class BranchError(InvalidInputError):
    """A branching call the SDK's ``AdvancedSQLiteSession`` refuses with ``ValueError``
    (an `InvalidInputError`, so a ``ValueError`` too); nothing was written."""


def _sqlite_timestamp(moment: datetime) -> str:
    # The SDK's timestamps are SQLite's CURRENT_TIMESTAMP: UTC, to the second.
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _preview(content: object, max_length: int | None = None) -> str:
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    if max_length is not None and len(text) > max_length:
        return text[:max_length] + "..."
    return text


def _is_user(event: Event) -> bool:
    content = event.content
    return isinstance(content, dict) and content.get("role") == "user"


def _turn(number: int, event: Event, max_length: int | None) -> dict[str, Any]:
    content = event.content
    assert isinstance(content, dict)
    text = content.get("content", "")
    return {
        "turn": number,
        "content": _preview(text, max_length),
        "full_content": text,
        "timestamp": _sqlite_timestamp(event.timestamp),
        "can_branch": True,
    }


def _user_turns(events: Sequence[Event]) -> list[tuple[int, int, Event]]:
    """(turn number, index in *events*, event) of each user message, turns from 1."""
    found: list[tuple[int, int, Event]] = []
    for index, event in enumerate(events):
        if _is_user(event):
            found.append((len(found) + 1, index, event))
    return found


class Branches:
    """The ``AdvancedSQLiteSession`` branching methods, mixed into `AgentSessionsSession`."""

    session_id: str
    _stored_id: str
    user_id: str | None
    manager: SessionManager
    _held: Session | None
    _branch: str

    @property
    def current_branch_id(self) -> str:
        """The branch this session reads and writes (``main`` at first)."""
        return self._branch

    @property
    def _active_id(self) -> str:
        return self._session_of(self._branch)

    def _session_of(self, branch_id: str) -> str:
        if branch_id == MAIN_BRANCH:
            return self._stored_id
        return f"{self._stored_id}{BRANCH_SEPARATOR}{branch_id}"

    async def _branch_session(self, branch_id: str | None) -> Session | None:
        target = self._branch if branch_id is None else branch_id
        return await self.manager.get(self._session_of(target), user_id=self.user_id)

    async def _branch_ids(self) -> list[str]:
        """Every branch's session id under ``main`` (the fork tree), ``main``'s first."""
        prefix = self._stored_id + BRANCH_SEPARATOR
        found = [self._stored_id]
        index = 0
        while index < len(found) and len(found) <= _MAX_BRANCHES:
            cursor: str | None = None
            for _ in range(_MAX_BRANCHES // _PAGE + 1):
                page = await self.manager.list_sessions(
                    user_id=self.user_id, limit=_PAGE, cursor=cursor, forked_from=found[index]
                )
                found.extend(
                    s.session_id
                    for s in page.items
                    if s.session_id.startswith(prefix) and s.session_id not in found
                )
                cursor = page.next_cursor
                if cursor is None:
                    break
            index += 1
        return found

    def _name_of(self, session_id: str) -> str:
        if session_id == self._stored_id:
            return MAIN_BRANCH
        return session_id[len(self._stored_id) + len(BRANCH_SEPARATOR) :]

    async def _switch(self, branch_id: str) -> None:
        self._branch = branch_id
        self._held = None

    async def create_branch_from_turn(
        self, turn_number: int, branch_name: str | None = None
    ) -> str:
        """Make a branch holding the current branch's items before user turn
        *turn_number* (the state too), switch to it and return its id (auto-generated
        as the SDK does when *branch_name* is None)."""
        if branch_name is not None and not branch_name.strip():
            raise BranchError("Branch name cannot be empty")
        return await finish_despite_cancellation(self._create(turn_number, branch_name))

    async def _create(self, turn_number: int, branch_name: str | None) -> str:
        source = await self._branch_session(None)
        events = [] if source is None else source.events
        match = [found for found in _user_turns(events) if found[0] == turn_number]
        if source is None or not match:
            raise BranchError(
                f"Turn {turn_number} does not contain a user message in branch '{self._branch}'"
            )
        if branch_name is None:
            base = f"branch_from_turn_{turn_number}_{int(time.time())}"
            candidates = [base] + [f"{base}_{n}" for n in range(2, _MAX_BRANCHES)]
        else:
            candidates = [branch_name]
        _, index, _ = match[0]
        for name in candidates:
            new_id = self._session_of(name)
            try:
                if new_id in (self._stored_id, source.session_id):
                    raise SessionExistsError(new_id)  # main, or the branch forked from
                await self._fork(source, new_id, index)
            except SessionExistsError:
                if branch_name is not None:
                    raise BranchError(
                        f"Branch ID '{branch_name}' has already been used. Choose a new branch ID."
                    ) from None
                continue
            await self._switch(name)
            return name
        raise BranchError(f"no unused branch id from turn {turn_number}")  # pragma: no cover

    async def _fork(self, source: Session, new_id: str, index: int) -> None:
        """Fork *source* into *new_id* keeping its first *index* events (none: the fork of
        the first event, emptied at once, so it still records where it came from)."""
        through = source.events[max(index - 1, 0)].id
        await self.manager.fork(
            source.session_id, new_id, through_event_id=through, user_id=self.user_id
        )
        if index == 0:
            forked = await self.manager.get(new_id, user_id=self.user_id, last_events=0)
            assert forked is not None
            await self.manager.save(_emptied(forked, state=forked.state))

    async def create_branch_from_content(
        self, search_term: str, branch_name: str | None = None
    ) -> str:
        """`create_branch_from_turn` at the first user turn containing *search_term*."""
        matching = await self.find_turns_by_content(search_term)
        if not matching:
            raise BranchError(f"No user turns found containing '{search_term}'")
        return await self.create_branch_from_turn(matching[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Read and write *branch_id* from now on; it must hold at least one item."""
        session = await self._branch_session(branch_id)
        if session is None or not session.events:
            raise BranchError(f"Branch '{branch_id}' does not exist")
        await self._switch(branch_id)

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Drop every item and the state of *branch_id* (not ``main``; the current
        branch only with *force*, which switches to ``main`` first). Its name stays
        used, and branches made from it stay."""
        if not branch_id or not branch_id.strip():
            raise BranchError("Branch ID cannot be empty")
        if branch_id == MAIN_BRANCH:
            raise BranchError("Cannot delete the 'main' branch")
        if branch_id == self._branch:
            if not force:
                raise BranchError(
                    f"Cannot delete current branch '{branch_id}'. "
                    "Use force=True or switch branches first"
                )
            if not any(b["branch_id"] == branch_id for b in await self.list_branches()):
                raise BranchError(f"Branch '{branch_id}' does not exist")
            await self.switch_to_branch(MAIN_BRANCH)
        await finish_despite_cancellation(self._empty_branch(branch_id))

    async def _empty_branch(self, branch_id: str) -> None:
        loaded = await self.manager.get(
            self._session_of(branch_id), user_id=self.user_id, last_events=1
        )
        if loaded is None or not loaded.events:
            raise BranchError(f"Branch '{branch_id}' does not exist")
        await self.manager.save(_emptied(loaded, state={}))

    async def list_branches(self) -> list[dict[str, Any]]:
        """Each branch holding items: ``branch_id``, ``message_count``, ``user_turns``,
        ``is_current``, ``created_at``, oldest first."""
        branches = []
        for session_id in await self._branch_ids():
            session = await self.manager.get(session_id, user_id=self.user_id)
            if session is None or not session.events:
                continue
            name = self._name_of(session_id)
            branches.append(
                {
                    "branch_id": name,
                    "message_count": len(session.events),
                    "user_turns": sum(1 for e in session.events if _is_user(e)),
                    "is_current": name == self._branch,
                    "created_at": _sqlite_timestamp(session.created_at),
                }
            )
        branches.sort(key=lambda branch: str(branch["created_at"]))
        return branches

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of *branch_id* (the current branch by default), as the SDK
        lists them: ``turn``, ``content`` (first 100 characters), ``full_content``,
        ``timestamp``, ``can_branch``."""
        session = await self._branch_session(branch_id)
        events = [] if session is None else session.events
        return [_turn(number, event, 100) for number, _, event in _user_turns(events)]

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user turns whose text contains *search_term* (ASCII case-insensitive, as
        SQLite's ``LIKE``), in the format of `get_conversation_turns`, untruncated."""
        pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
        session = await self._branch_session(branch_id)
        events = [] if session is None else session.events
        matches = []
        for number, _, event in _user_turns(events):
            content = event.content
            assert isinstance(content, Mapping)
            text = content.get("content", "")
            texts = (
                [text]
                if isinstance(text, str)
                else [p.get("text", "") for p in text if isinstance(p, Mapping)]
                if isinstance(text, list)
                else []
            )
            if any(isinstance(t, str) and pattern.search(t) for t in texts):
                matches.append(_turn(number, event, None))
        return matches

    async def _clear_branches(self) -> None:
        """Empty every branch but ``main`` (the SDK's ``clear_session`` drops them all)."""
        if not self.manager.capabilities.branching:
            return
        for session_id in (await self._branch_ids())[1:]:
            loaded = await self.manager.get(session_id, user_id=self.user_id, last_events=1)
            if loaded is not None and loaded.events:
                await self.manager.save(_emptied(loaded, state={}))


def _emptied(loaded: Session, *, state: dict[str, Any]) -> Session:
    """*loaded* at its version with no events and *state*: saved, a full rewrite that
    drops the history without reading it."""
    return Session(
        session_id=loaded.session_id,
        user_id=loaded.user_id,
        events=[],
        state=state,
        created_at=loaded.created_at,
        updated_at=loaded.updated_at,
        version=loaded.version,
        forked_from=loaded.forked_from,
    )
