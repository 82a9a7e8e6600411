"""What a loaded Session remembers, so that a save writes only what changed.

`SessionManager.save` must write exactly what changed since a load. Comparing the
whole list against a snapshot costs time proportional to the history on every save;
with this list, the common case (events only appended) is known in constant time,
so an append costs the same at 5,000 events as at 0. Any list still works: a
session whose ``events`` was replaced by a plain list is compared in full.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, SupportsIndex

from ._models import Event, Session

if TYPE_CHECKING:
    from ._records import SaveRequest

__all__ = [
    "EventList",
    "LoadedState",
    "common_prefix",
    "loaded_session",
    "mark_loaded",
    "stamp_saved",
]

_event_id = operator.attrgetter("id")


class EventList(list[Event]):
    """A ``list[Event]`` that tracks ``first_change``: every position before it still
    holds the event it held when tracking was last reset."""

    __slots__ = ("first_change",)

    def __init__(self, events: Iterable[Event] = ()) -> None:
        super().__init__(events)
        self.first_change = len(self)

    def reset_tracking(self) -> None:
        """Mark the current contents as the new baseline (after a load or a save)."""
        self.first_change = len(self)

    def _changed_from(self, position: int) -> None:
        if position < self.first_change:
            self.first_change = max(position, 0)

    def _position(self, index: SupportsIndex) -> int:
        position = index.__index__()
        return position + len(self) if position < 0 else position

    def __setitem__(self, key: Any, value: Any) -> None:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            self._changed_from(min(start, stop) if step < 0 else start)
        else:
            self._changed_from(self._position(key))
        super().__setitem__(key, value)

    def __delitem__(self, key: Any) -> None:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            self._changed_from(min(start, stop + 1) if step < 0 else start)
        else:
            self._changed_from(self._position(key))
        super().__delitem__(key)

    def insert(self, index: SupportsIndex, value: Event) -> None:
        self._changed_from(min(self._position(index), len(self)))
        super().insert(index, value)

    def pop(self, index: SupportsIndex = -1) -> Event:
        self._changed_from(self._position(index))
        return super().pop(index)

    def remove(self, value: Event) -> None:
        position = self.index(value)
        self._changed_from(position)
        super().__delitem__(position)

    def clear(self) -> None:
        self._changed_from(0)
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self._changed_from(0)
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self._changed_from(0)
        super().reverse()

    def __imul__(self, count: SupportsIndex) -> EventList:
        if count.__index__() <= 0:
            self._changed_from(0)
        super().__imul__(count)
        return self


@dataclass(slots=True)
class LoadedState:
    """A session's events and version as the store holds them, kept in step by save().

    It belongs to one `Session` object (``owner``) loaded as one id (``session_id``):
    a copy of that object carries the same state, so `owned_by` tells save() whether
    the tracking is really this object's, and a save under another id is refused.
    """

    version: int
    events: list[Event]  # a private copy of the stored window; shares the (immutable) events
    offset: int  # absolute position of events[0]; > 0 only for a partial load
    partial: bool
    tracked: EventList | None  # the list handed to the caller, if it is still theirs
    session_id: str
    owner: weakref.ref[Session] | None = None  # the Session object this state tracks
    ids: set[str] | None = None  # ids of `events`, built on the first save that needs it
    # The stored history's SessionRecord.lineage as of `version` ("" when unknown).
    lineage: str = ""
    # The save last sent whose outcome is unknown (it failed ambiguously): re-sent,
    # token and all, when the session is saved again unchanged.
    pending: SaveRequest | None = None
    # What `pending` was sent as: the same request, or its sealed form when encrypting.
    sent: SaveRequest | None = None
    # With encryption: the shift the stored events were sealed with (see
    # `Keyring.open_events`), None until known.
    shift: int | None = None

    def owned_by(self, session: Session) -> bool:
        """Whether this is *session*'s own tracking (not that of the object it was copied from)."""
        return self.owner is not None and self.owner() is session

    def fork(self, session: Session) -> LoadedState:
        """Tracking for *session*, a copy of the owner taken at this version: its events
        are compared in full on its first save, and the owner's tracking is untouched."""
        return LoadedState(
            version=self.version,
            events=list(self.events),
            offset=self.offset,
            partial=self.partial,
            tracked=None,
            session_id=self.session_id,
            owner=weakref.ref(session),
            lineage=self.lineage,
            shift=self.shift,
        )

    def unchanged_prefix(self, current: list[Event]) -> int:
        """How many leading events of *current* are the stored ones."""
        if current is not self.tracked:
            return common_prefix(self.events, current)
        # Everything before first_change is known unchanged; compare only the rest, so
        # an append costs nothing and an edit costs what follows it.
        start = min(current.first_change, len(self.events))
        return start + common_prefix(self.events[start:], current[start:])

    def ids_of_prefix(self, length: int) -> set[str]:
        """The ids of ``events[:length]``; cached when that is the whole list. Do not mutate."""
        if length != len(self.events):
            return {event.id for event in self.events[:length]}
        if self.ids is None:
            self.ids = set(map(_event_id, self.events))
        return self.ids

    def saved(self, session: Session, version: int, kept: int, lineage: str) -> None:
        """Record that *session* was saved at *version* with *lineage*, keeping the
        first *kept* events.

        Costs what changed, not the history: the private copy is cut and extended, the
        id set extended on a pure append, and the caller's list re-baselined.
        """
        current = session.events
        added = current[kept:]
        if self.ids is not None:
            if kept == len(self.events):
                self.ids.update(map(_event_id, added))
            else:
                self.ids = None
        del self.events[kept:]
        self.events.extend(added)
        self.version = version
        self.lineage = lineage
        if current is self.tracked:
            current.reset_tracking()
        else:
            # The caller replaced the list: track the new one from now on (once O(n)).
            self.tracked = session.events = EventList(current)


def mark_loaded(
    session: Session, *, offset: int = 0, partial: bool = False, lineage: str = ""
) -> None:
    """Start tracking *session* as it came out of the store."""
    tracked = EventList(session.events)
    session.events = tracked
    session._loaded = LoadedState(
        version=session.version,
        events=list(tracked),
        offset=offset,
        partial=partial,
        tracked=tracked,
        session_id=session.session_id,
        owner=weakref.ref(session),
        lineage=lineage,
    )


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
) -> Session:
    """A `Session` fresh out of the store, already tracked: what ``model_construct``
    followed by `mark_loaded` builds, without their generic machinery (each load of
    every turn builds one; its values come from the store and were checked there).
    """
    tracked = EventList(events)
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
        },
    )
    _set_attribute(session, "__pydantic_fields_set__", set(_SESSION_FIELDS))
    _set_attribute(session, "__pydantic_extra__", None)
    loaded = LoadedState(
        version=version,
        events=list(tracked),
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


def common_prefix(base: list[Event], events: list[Event]) -> int:
    """How many leading events are unchanged, by comparison (for untracked lists)."""
    size = len(base)
    # One C-level list comparison (identity first) settles the usual append.
    if len(events) >= size and events[:size] == base:
        return size
    for index, (old, new) in enumerate(zip(base, events, strict=False)):
        if old is not new and old != new:
            return index
    return min(size, len(events))
