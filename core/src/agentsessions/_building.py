"""Sessions built straight from what a load returned, and the stamps a save leaves on
one: what ``model_construct``, `mark_loaded` and plain assignments do, without pydantic's
generic machinery (every turn builds one session and stamps it once)."""

from __future__ import annotations

import weakref
from datetime import datetime
from typing import Any

from ._models import Event, ForkOrigin, Session
from ._tracking import LoadedState, _private_copy, tracked_list

__all__ = ["loaded_session", "stamp_saved"]

_SESSION_FIELDS = frozenset(Session.model_fields)
_set_attribute = object.__setattr__


def loaded_session(
    *,
    session_id: str,
    user_id: str | None,
    events: list[Event],
    state: dict[str, Any],
    created_at: datetime,
    updated_at: datetime,
    version: int,
    offset: int = 0,
    partial: bool = False,
    lineage: str = "",
    shift: int | None = None,
    forked_from: ForkOrigin | None = None,
) -> Session:
    """A `Session` fresh out of the store, already tracked: what ``model_construct``
    followed by `mark_loaded` builds, without their generic machinery (each load of
    every turn builds one; its values come from the store and were checked there).
    """
    tracked = tracked_list(events)
    session: Session = Session.__new__(Session)
    _set_attribute(
        session,
        "__dict__",
        {
            "session_id": session_id,
            "user_id": user_id,
            "events": tracked,
            "state": state,
            "created_at": created_at,
            "updated_at": updated_at,
            "version": version,
            "forked_from": forked_from,
        },
    )
    _set_attribute(session, "__pydantic_fields_set__", set(_SESSION_FIELDS))
    _set_attribute(session, "__pydantic_extra__", None)
    loaded = LoadedState(
        version=version,
        events=_private_copy(tracked),
        offset=offset,
        partial=partial,
        tracked=tracked,
        session_id=session_id,
        owner=weakref.ref(session),
        lineage=lineage,
        shift=shift,
    )
    _set_attribute(session, "__pydantic_private__", {"_loaded": loaded})
    return session


def stamp_saved(session: Session, version: int, updated_at: datetime) -> None:
    """Set the version and ``updated_at`` a save gave *session*, as plain assignments
    would (Session does not validate assignments), minus pydantic's ``__setattr__``."""
    values = session.__dict__
    values["version"] = version
    values["updated_at"] = updated_at
    session.__pydantic_fields_set__.update(("version", "updated_at"))
