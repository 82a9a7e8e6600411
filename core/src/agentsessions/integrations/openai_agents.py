"""A session of the OpenAI Agents SDK stored in any agentsessions backend.

::

    from agentsessions import connect
    from agentsessions.integrations.openai_agents import AgentSessionsSession

    manager = connect("postgresql://app@db/agents")
    session = AgentSessionsSession("conversation-42", manager, user_id="alice")
    result = await Runner.run(agent, "Hello", session=session)

It implements the SDK's ``Session`` protocol structurally, as the SDK asks of
third-party sessions (its ``SessionABC`` is "intended for internal use"), so
``isinstance(session, agents.memory.Session)`` holds and no SDK base class is needed.
``session_settings`` and ``limit`` behave as in the SDK's ``SQLiteSession``: an
explicit limit wins over ``session_settings.limit``, None reads everything, 0 reads
nothing and a negative limit reads everything.

Each SDK item is one `Event` whose ``content`` is the item dict itself, so an item
comes back exactly as it went in (strict JSON: a value JSON cannot hold is refused
before anything is written, never altered). The errors are the ones code written for
the SDK's stores already catches: a value JSON cannot hold raises
`ItemSerializationError`, which is a `SessionSerializationError` and a ``TypeError``
(the SDK's stores raise ``TypeError`` from ``json.dumps``); an item that is not a
dict raises `InvalidItemError`, an `InvalidInputError` and a ``TypeError``. The
event's author is the item's ``role`` (``user``, ``assistant``...) or else its
``type`` (``function_call``...), so the stored conversation stays readable by any
other agentsessions tool.

Writes go through the manager's optimistic concurrency: `add_items` and `pop_item`
reload and retry when another writer saved first, so two runs appending to one
conversation at once both land, in some order, and nothing is overwritten. Reads and
appends load only the events they need (``last_events``), so their cost does not
grow with the conversation. An `add_items` that follows this object's `get_items`
(as a run does: read the history, then save its items) appends to the copy that read
loaded and saves it, one round trip; only if another writer saved in between does it
load the session's version again.

The branching methods of the SDK's ``AdvancedSQLiteSession`` (``create_branch_from_turn``,
``switch_to_branch``, ``list_branches``...) come from `Branches`: each branch is a fork of
the session, and the adapter reads and writes the current one (docs/openai-agents.md,
"Branches").

Under the SDK's ``OpenAIResponsesCompactionSession`` (which calls the Responses API's
``compact`` after a turn and replaces the stored history with its output), alone or
with the SDK's ``EncryptedSession`` on either side of it, the replacement is one atomic
write of the store, checked against the version the wrapper read: a whole history is
replaced with `SessionManager.compact` (at the cost of what it replaces; a full rewrite
on a backend without compaction), a suffix by a save of the session, which also drops
the expired prefix ``EncryptedSession`` asks to prune; if another writer saved since
the wrapper's read, nothing is replaced and the SDK keeps the history as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from .. import _json
from .._building import loaded_session
from .._errors import InvalidInputError, SessionConflictError, SessionSerializationError
from .._manager import DEFAULT_UPDATE_RETRIES, SessionManager, validate_id
from .._models import Event, Session, new_event
from .._tracking import event_contents
from ._openai_agents_branches import MAIN_BRANCH, BranchError, Branches
from ._shared import backoff, finish_despite_cancellation, mapped_id

if TYPE_CHECKING:
    from agents.items import TResponseInputItem

__all__ = ["AgentSessionsSession", "BranchError", "InvalidItemError", "ItemSerializationError"]

_FALLBACK_AUTHOR = "item"
# The stored id of an SDK session id that is not one of ours as it stands (`mapped_id`).
_LONG_PREFIX = "oaid:"


def _author_of(item: Mapping[str, object]) -> str:
    for key in ("role", "type"):
        value = item.get(key)
        if isinstance(value, str) and value and len(value) <= 255:
            return value
    return _FALLBACK_AUTHOR


class ItemSerializationError(SessionSerializationError, TypeError):
    """An item holds a value JSON cannot hold (NaN, a tuple, an object...); nothing was
    written. A ``TypeError`` too, as the SDK's own stores raise."""


class InvalidItemError(InvalidInputError, TypeError):
    """An item is not a dict; nothing was written."""


class AgentSessionsSession(Branches):
    """Conversation history of the OpenAI Agents SDK kept by a `SessionManager`.

    Pass it as ``session=`` to ``Runner.run`` / ``Runner.run_streamed``. The stored
    session is created on the first `add_items`; with *user_id* it is created owned by
    that user and every call checks ownership (`SessionOwnershipError` otherwise).
    *session_settings* (e.g. ``SessionSettings(limit=50)``) bounds how many of the
    newest items a run reads, as with the SDK's own sessions. *retries* is how many
    times a write reloads and tries again after losing a race before the last
    `SessionConflictError` is raised.

    The manager is not opened or closed here: one manager serves every session of
    an application.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        manager: SessionManager,
        *,
        user_id: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
        retries: int = DEFAULT_UPDATE_RETRIES,
    ) -> None:
        # The SDK takes any string as a session id; the stored one is `_stored_id`.
        self._stored_id = mapped_id(session_id, "session_id", _LONG_PREFIX)
        self.session_id = session_id
        self.user_id = None if user_id is None else validate_id(user_id, "user_id")
        if not isinstance(manager, SessionManager):
            raise InvalidInputError(
                f"manager must be a SessionManager, not {type(manager).__name__}"
            )
        if type(retries) is not int or retries < 0:
            raise InvalidInputError(f"retries must be an int >= 0, not {retries!r}")
        self.manager = manager
        self.session_settings = (
            SessionSettings()
            if session_settings is None
            else coerce_session_settings(session_settings)
        )
        self.retries = retries
        # The session as the last get_items loaded it, minus its events (the version,
        # the position of the end, the lineage and the sealing shift): an add_items
        # right after appends to it and saves, one round trip, instead of loading the
        # session again. Taken out while a save uses it, so two concurrent calls never
        # share it; a failure drops it.
        self._held: Session | None = None
        # The branch read and written (`Branches`): main is session_id itself.
        self._branch = MAIN_BRANCH

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.session_id!r} on {self.manager!r}>"

    async def get_items(
        self, limit: int | None = None, branch_id: str | None = None
    ) -> list[TResponseInputItem]:
        """The newest *limit* items in order (all when None; ``session_settings.limit``
        applies when *limit* is None), of the current branch or of *branch_id*."""
        effective = resolve_session_limit(limit, self.session_settings)
        if effective is not None and effective < 0:
            effective = None  # the SDK's SQLite session reads everything for a negative limit
        if branch_id is not None and branch_id != self._branch:
            other = await self.manager.get(
                self._session_of(branch_id), user_id=self.user_id, last_events=effective
            )
            return (
                []
                if other is None
                else cast("list[TResponseInputItem]", event_contents(other.events))
            )
        session = await self.manager.get(
            self._active_id, user_id=self.user_id, last_events=effective
        )
        self._held = None if session is None else _empty_copy(session)
        if session is None:
            return []
        # Every load decodes fresh objects from storage, so handing out the stored
        # dicts cannot alias anything another reader holds (the held copy writes only
        # the events appended to it, never these). Only the items are decoded: the
        # loaded events never become Event models that would be thrown away.
        return cast("list[TResponseInputItem]", event_contents(session.events))

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append *items* in one atomic save, retrying if another writer saved first."""
        if not items:
            return
        events = self._events_of(items)
        await finish_despite_cancellation(self._append(events))

    async def _append(self, events: list[Event]) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.events.extend(events)
            try:
                await self.manager.save(held)
            except SessionConflictError:
                pass  # another writer saved since our read: append as below
            else:
                self._held = _empty_copy(held)  # keeps none of what it just wrote
                return
        # An append needs none of the history: a load of zero events still carries the
        # version the save checks.
        await self.manager.update(
            self._active_id,
            lambda session: session.events.extend(events),
            user_id=self.user_id,
            create=True,
            retries=self.retries,
            last_events=0,
        )

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it; None when there is none."""
        return await finish_despite_cancellation(self._pop())

    async def _pop(self) -> TResponseInputItem | None:
        self._held = None
        attempt = 0
        while True:
            session = await self._load(last_events=1)
            if session is None or not session.events:
                return None
            event = session.events.pop()
            try:
                await self.manager.save(session)
            except SessionConflictError as conflict:
                attempt = await self._after_conflict(conflict, attempt)
                continue
            return cast("TResponseInputItem", event.content)

    async def clear_session(self) -> None:
        """Remove every item of every branch and switch to ``main``. The stored session
        itself (owner, state) is kept."""
        await finish_despite_cancellation(self._clear())

    async def _clear(self) -> None:
        await self._clear_branches()
        await self._switch(MAIN_BRANCH)
        attempt = 0
        while True:
            loaded = await self._load(last_events=0)
            if loaded is None:
                return
            # A session built by hand, at the loaded version, saves as a full rewrite:
            # the history is dropped without ever being read.
            emptied = Session(
                session_id=loaded.session_id,
                user_id=loaded.user_id,
                events=[],
                state=loaded.state,
                created_at=loaded.created_at,
                updated_at=loaded.updated_at,
                version=loaded.version,
                forked_from=loaded.forked_from,
            )
            try:
                await self.manager.save(emptied)
            except SessionConflictError as conflict:
                attempt = await self._after_conflict(conflict, attempt)
                continue
            return

    # -- the SDK's compaction wrapper ----------------------------------------------------
    # OpenAIResponsesCompactionSession looks these two up on the session it wraps (the
    # SDK's EncryptedSession looks up the snapshot too, through either nesting): with
    # them its replacement of history is one atomic, version-checked write of the store
    # instead of a clear followed by an add. The signatures are the SDK's call sites':
    # ``atomic_replace(session, items)`` and ``reader(limit)`` or, from EncryptedSession,
    # ``reader(limit, prune_prefix=is_expired)``. Unknown keywords are refused rather
    # than swallowed: a new SDK argument carries a promise this code would not keep.

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """Replace the whole history with *items* in one atomic write (always True: a
        backend without compaction gets a full rewrite of the session instead)."""
        events = self._events_of(items)
        return await finish_despite_cancellation(self._replace_items(events))

    async def _replace_items(self, events: list[Event]) -> bool:
        attempt = 0
        while True:
            session = await self._load(last_events=1)
            try:
                if session is None or not session.events:
                    if events:
                        await self._append(events)
                    return True
                self._held = None
                await self._replace_all(session, events)
            except SessionConflictError as conflict:
                attempt = await self._after_conflict(conflict, attempt)
                continue
            return True

    async def _get_compaction_snapshot(
        self,
        limit: int,
        *,
        prune_prefix: Callable[[TResponseInputItem], bool] | None = None,
    ) -> Any:
        """The newest *limit* items, and a replacement of a suffix of them that lands only
        if nothing was written since this read (None: no history, or an SDK without
        snapshots). *prune_prefix* (the SDK's EncryptedSession passes its expiry test)
        also drops, in the same write, the oldest items it holds true for, up to the
        first it does not and never into the replaced suffix."""
        try:
            from agents.memory.session import _CompactionSnapshot
        except ImportError:  # an SDK without atomic snapshots: it replaces whole histories
            return None
        if type(limit) is not int or limit < 1:
            raise InvalidInputError(f"limit must be an int >= 1, not {limit!r}")
        session = await self._load(last_events=limit)
        if session is None or not session.events:
            return None
        complete = session.first_event_position == 0
        items = cast("list[TResponseInputItem]", event_contents(session.events))

        async def replace_suffix(start: int, output: list[TResponseInputItem]) -> bool:
            if type(start) is not int or not 0 <= start < len(session.events):
                return False
            events = self._events_of(output)
            return await finish_despite_cancellation(replace(start, events))

        async def replace(start: int, events: list[Event]) -> bool:
            self._held = None
            try:
                if start == 0 and complete:
                    # The whole history: no older item is left to prune.
                    await self._replace_all(session, events)
                else:
                    return await self._replace_suffix(session, start, events, prune_prefix)
            except SessionConflictError:
                return False
            return True

        return _CompactionSnapshot(items=items, complete=complete, replace_suffix=replace_suffix)

    async def _replace_all(self, loaded: Session, events: list[Event]) -> None:
        """Every stored event replaced by *events*, checked against *loaded*'s version.

        A compaction through the last event costs what it replaces; a backend without
        compaction gets a session built at that version, which saves as a full rewrite
        without reading the history. Either raises `SessionConflictError` if anything
        was written since *loaded* was read."""
        if self.manager.capabilities.compaction:
            await self.manager.compact(loaded, loaded.events[-1].id, events)
            return
        rewritten = Session(
            session_id=loaded.session_id,
            user_id=loaded.user_id,
            events=events,
            state=loaded.state,
            created_at=loaded.created_at,
            updated_at=loaded.updated_at,
            version=loaded.version,
            forked_from=loaded.forked_from,
        )
        await self.manager.save(rewritten)

    async def _replace_suffix(
        self,
        snapshot: Session,
        start: int,
        events: list[Event],
        prune_prefix: Callable[[TResponseInputItem], bool] | None,
    ) -> bool:
        """The snapshot's events from *start* on replaced by *events*, keeping the older
        history (less the prefix *prune_prefix* drops): one save of the whole session
        at the version the snapshot read; False if anything was written since."""
        whole = await self.manager.get(self._active_id, user_id=self.user_id)
        if whole is None or whole.version != snapshot.version:
            return False
        cut = snapshot.first_event_position + start
        pruned = 0
        if prune_prefix is not None:
            while pruned < cut and prune_prefix(
                cast("TResponseInputItem", whole.events[pruned].content)
            ):
                pruned += 1
        del whole.events[cut:]
        del whole.events[:pruned]
        whole.events.extend(events)
        await self.manager.save(whole)
        return True

    def _events_of(self, items: list[TResponseInputItem]) -> list[Event]:
        events = []
        for index, item in enumerate(items):
            if not isinstance(item, dict):
                raise InvalidItemError(
                    f"items[{index}] is a {type(item).__name__}, not an item dict"
                )
            try:
                _json.check_json(item, f"items[{index}]")
            except SessionSerializationError as exc:
                raise ItemSerializationError(exc.path, exc.problem) from None
            events.append(new_event(_author_of(item), item))
        return events

    async def _load(self, *, last_events: int) -> Session | None:
        return await self.manager.get(
            self._active_id, user_id=self.user_id, last_events=last_events
        )

    async def _after_conflict(self, conflict: SessionConflictError, attempt: int) -> int:
        """Wait before the next try, or raise *conflict* once *retries* are spent."""
        if attempt >= self.retries:
            raise conflict
        await backoff(attempt)
        return attempt + 1


def _empty_copy(session: Session) -> Session:
    """*session* at its version with none of its events loaded, as ``get(last_events=0)``
    returns it: appending to it and saving writes after the stored events, and it keeps
    no history alive. It carries the load's lineage and sealing shift, so its save
    checks and keeps the lineage as a save of the loaded session would, and needs no
    read to learn the shift. Built as a load builds its sessions (one per turn): the
    values come from a tracked session, checked when it was loaded or saved."""
    loaded = session._loaded
    fields = session.__dict__
    return loaded_session(
        session_id=fields["session_id"],
        user_id=fields["user_id"],
        events=[],
        state=fields["state"],
        created_at=fields["created_at"],
        updated_at=fields["updated_at"],
        version=fields["version"],
        offset=loaded.offset + len(loaded.events),
        partial=True,
        lineage=loaded.lineage,
        shift=loaded.shift,
        forked_from=fields["forked_from"],
    )
