"""Every public operation, by the name the parametrised clauses give it, and how each is
called on one stored session (`Target`, `call_of`).

The wire clauses call each against a frozen or unreachable server; the cross-cutting
clauses (`_tests_every_operation`) call each from another namespace, on an expired
session and as another user. One table, so that an operation added to the contract is
added to every rule at once.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from agentsessions import Event, Session, SessionManager

__all__ = ["NEEDS", "OPERATIONS", "TAKES_USER", "Target", "call_of"]

#: Every public operation, as the clauses parametrised over them name it.
OPERATIONS = [
    "create",
    "get",
    "get(last_events)",
    "save",
    "update",
    "list_sessions",
    "list_sessions(user_id)",
    "list_sessions(forked_from)",
    "archived_events",
    "fork",
    "rewind",
    "compact",
    "restore",
    "delete",
    "delete_user",
    "purge_expired",
]
#: The capability an operation needs; a clause on a backend without it skips.
NEEDS = {
    "list_sessions(forked_from)": "branching",
    "fork": "branching",
    "rewind": "branching",
    "compact": "compaction",
    "archived_events": "compaction",
}
#: The operations that name a user (``user_id=``, or the user they erase).
TAKES_USER = frozenset(
    {
        "get",
        "get(last_events)",
        "update",
        "list_sessions(user_id)",
        "archived_events",
        "fork",
        "delete",
        "delete_user",
    }
)
#: The event index each cut of a `Target`'s copy names (it holds at least 4 events).
COMPACT_THROUGH = 1
REWIND_THROUGH = 2


@dataclass
class Target:
    """What the operations act on: *session_id* (owned by *owner*) and a loaded *copy*
    of it with at least 4 events, through *manager*. ``create`` makes *create_id*,
    ``restore`` stores *export*, ``fork`` copies *session_id* to *fork_id*; the
    operations of `TAKES_USER` pass *user_id* (the owner when None)."""

    manager: SessionManager
    session_id: str
    owner: str
    copy: Session
    create_id: str
    export: Session
    fork_id: str
    user_id: str | None = None


def call_of(operation: str, target: Target) -> Callable[[], Coroutine[Any, Any, Any]]:
    """A call that performs *operation* on *target* once, each time it is called."""
    manager, session_id, user = target.manager, target.session_id, target.user_id
    owner = user if user is not None else target.owner

    def append(current: Session) -> None:
        current.add_event("user", f"{operation}: one more event")

    def save() -> Coroutine[Any, Any, None]:
        target.copy.add_event("user", "save: one more event")
        return manager.save(target.copy)

    summary = [Event(author="summarizer", content={"summary": operation})]
    calls: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "create": lambda: manager.create(target.create_id, target.owner),
        "get": lambda: manager.get(session_id, user_id=user),
        "get(last_events)": lambda: manager.get(session_id, user_id=user, last_events=2),
        "save": save,
        "update": lambda: manager.update(session_id, append, user_id=user),
        "list_sessions": lambda: manager.list_sessions(limit=5),
        "list_sessions(user_id)": lambda: manager.list_sessions(user_id=owner, limit=5),
        "list_sessions(forked_from)": lambda: manager.list_sessions(
            forked_from=session_id, limit=5
        ),
        "archived_events": lambda: manager.archived_events(session_id, user_id=user),
        "fork": lambda: manager.fork(session_id, target.fork_id, user_id=user),
        "rewind": lambda: manager.rewind(
            target.copy, target.copy.events[REWIND_THROUGH].id, archive=True
        ),
        "compact": lambda: manager.compact(
            target.copy, target.copy.events[COMPACT_THROUGH].id, summary, archive=True
        ),
        "restore": lambda: manager.restore(target.export.model_copy(deep=True)),
        "delete": lambda: manager.delete(session_id, user_id=user),
        "delete_user": lambda: manager.delete_user(owner),
        "purge_expired": lambda: manager.purge_expired(),
    }
    return calls[operation]
