"""What a loaded Session remembers, so that a save writes only what changed.

`SessionManager.save` must write exactly what changed since a load. Comparing the
whole list against a snapshot costs time proportional to the history on every save;
with this list, the common case (events only appended) is known in constant time,
so an append costs the same at 5,000 events as at 0. Any list still works: a
session whose ``events`` was replaced by a plain list is compared in full.

A load hands out a `LazyEvents`: the stored JSON texts, decoded into `Event` objects
only when the caller first looks at the loaded events. A turn that reads a session,
appends and saves never builds (or frees) the history's thousands of models.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, SupportsIndex

from pydantic import TypeAdapter
from pydantic_core import SchemaValidator, core_schema, from_json

from ._models import Event, Session

if TYPE_CHECKING:
    from ._records import SaveRequest

__all__ = [
    "EventList",
    "LazyEvents",
    "LoadedState",
    "StoredEvents",
    "appended_in_flight",
    "common_prefix",
    "event_contents",
    "event_ids",
    "mark_loaded",
    "tracked_list",
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


_EVENTS = TypeAdapter(list[Event])


# A JSON array of event objects of which only the ids are wanted: the rest of each
# object is parsed (in Rust) but never becomes Python objects.
_IDS = SchemaValidator(
    core_schema.list_schema(
        core_schema.typed_dict_schema(
            {"id": core_schema.typed_dict_field(core_schema.str_schema())},
            extra_behavior="ignore",
        )
    )
)


def _json_array(texts: Sequence[str] | Sequence[bytes]) -> str | bytes:
    if texts and isinstance(texts[0], bytes):
        return b"[" + b",".join(texts) + b"]"  # type: ignore[arg-type]
    return "[" + ",".join(texts) + "]"  # type: ignore[arg-type]


def _ids_of(texts: Sequence[str | bytes]) -> list[str]:
    """The ``id`` of each event text, read off its start where the encoder put it.

    Parsing whole events for their ids costs nearly what decoding them does. Every
    encoder of this package writes ``{"id":"`` first; a JSON string ends at its first
    unescaped quote, so an id with no backslash before that quote is exactly the text
    between. Any other text (an escape in the id, another encoder's layout) is parsed.
    """
    ids: list[str | None] = []
    unread: list[int] = []
    for index, text in enumerate(texts):
        if isinstance(text, bytes):
            if text.startswith(b'{"id":"'):
                end = text.find(b'"', 7)
                if end > 7 and b"\\" not in text[7:end]:
                    ids.append(text[7:end].decode())
                    continue
        elif text.startswith('{"id":"'):
            end = text.find('"', 7)
            if end > 7 and "\\" not in text[7:end]:
                ids.append(text[7:end])
                continue
        ids.append(None)
        unread.append(index)
    if unread:
        parsed = _IDS.validate_json(_json_array([_text(texts[index]) for index in unread]))
        for index, item in zip(unread, parsed, strict=True):
            ids[index] = item["id"]
    return ids  # type: ignore[return-value]  # every None was filled in


def _text(text: str | bytes) -> str:
    return text.decode() if isinstance(text, bytes) else text


class StoredEvents:
    """The JSON texts of one load's events, decoded into `Event` objects once, on the
    first need, and shared by every list made from that load (the caller's and the
    tracking's private copy), so that both hold the very same objects."""

    __slots__ = ("_count", "_decoded", "_texts")

    def __init__(self, texts: Sequence[str] | Sequence[bytes]) -> None:
        self._texts = texts
        self._count = len(texts)
        self._decoded: list[Event] | None = None

    def __len__(self) -> int:
        return self._count

    def events(self) -> list[Event]:
        """Every event, decoded and validated on the first call (do not mutate)."""
        if self._decoded is None:
            self._decoded = _EVENTS.validate_json(_json_array(self._texts))
            self._texts = ()  # the events hold everything now
        return self._decoded

    def ids(self) -> list[str]:
        """The events' ids; the events themselves are not built for it."""
        if self._decoded is not None:
            return [event.id for event in self._decoded]
        return _ids_of(self._texts)

    def contents(self) -> list[Any]:
        """The events' ``content`` values; the events themselves are not built for it
        (once they are, their own values)."""
        if self._decoded is not None:
            return [event.content for event in self._decoded]
        # Plain JSON decoding is what an Event's ``content`` (Any) validates to anyway.
        items = from_json(_json_array(self._texts), allow_inf_nan=False, cache_strings="keys")
        return [item.get("content") for item in items]


def _as_index(index: SupportsIndex, size: int) -> int:
    position = index.__index__()
    return position + size if position < 0 else position


class LazyEvents(EventList):
    """The events of a load, as a ``list[Event]`` whose stored part is decoded on first use.

    Until then the list object's own storage is empty: the loaded events are a
    `StoredEvents` and whatever is appended waits in a tail. Appending, ``len``, and
    reading or removing appended events work on that form; anything else that looks
    at the loaded events (iteration, indexing, comparison, ``repr``, copying, any
    other mutation) first decodes them into the list's storage, once, after which it
    is an ordinary `EventList`. Python-level use cannot tell the difference. C code
    that reads a list's storage directly (pydantic-core validating or serialising a
    ``list[Event]``) would see it empty: `Session`'s own validation and serialisation
    decode first (see `materialize`), and nothing else of this package hands the list
    to such code.
    """

    __slots__ = ("_stored", "_tail")

    def __init__(self, stored: StoredEvents) -> None:
        # Set before anything asks for len(self), which reads them.
        self._stored: StoredEvents | None = stored
        self._tail: list[Event] = []
        list.__init__(self)
        self.first_change = len(stored)

    @property
    def decoded(self) -> bool:
        """Whether the loaded events have been decoded into the list (it is then plain)."""
        return self._stored is None

    def sibling(self) -> list[Event]:
        """Another list of the same events, sharing their decoding (a plain copy once decoded)."""
        if self._stored is None:
            return list(self)
        other = LazyEvents(self._stored)
        other._tail.extend(self._tail)
        return other

    def materialize(self) -> None:
        """Decode the loaded events into the list's own storage (once)."""
        stored = self._stored
        if stored is None:
            return
        events = stored.events()
        list.extend(self, events)
        list.extend(self, self._tail)
        self._stored = None
        self._tail = []

    def _tail_range(self, key: slice) -> tuple[int, int] | None:
        """The tail's ``[start, stop)`` that *key* selects, if it lies entirely in the
        tail (step 1)."""
        stored = self._stored
        if stored is None or key.step not in (None, 1):
            return None
        size = stored._count
        start, stop, _ = key.indices(size + len(self._tail))
        if start < size:
            return None
        return start - size, max(start, stop) - size

    # -- what works without decoding --------------------------------------------------

    def __len__(self) -> int:
        stored = self._stored
        if stored is None:
            return super().__len__()
        return stored._count + len(self._tail)

    def append(self, value: Event) -> None:
        if self._stored is None:
            super().append(value)
        else:
            self._tail.append(value)

    def extend(self, values: Iterable[Event]) -> None:
        if self._stored is None or values is self:
            self.materialize()
            super().extend(values)
        else:
            self._tail.extend(values)

    def __iadd__(self, values: Iterable[Event]) -> LazyEvents:  # type: ignore[override]
        self.extend(values)
        return self

    def __getitem__(self, key: Any) -> Any:
        stored = self._stored
        if stored is not None:
            if isinstance(key, slice):
                found = self._tail_range(key)
                if found is not None:
                    return self._tail[found[0] : found[1]]
            else:
                size = stored._count
                position = _as_index(key, size + len(self._tail))
                if position >= size:
                    return self._tail[position - size]
            self.materialize()
        return super().__getitem__(key)

    def __delitem__(self, key: Any) -> None:
        stored = self._stored
        if stored is not None and isinstance(key, slice):
            found = self._tail_range(key)
            if found is not None:
                self._changed_from(stored._count + found[0])
                del self._tail[found[0] : found[1]]
                return
        self.materialize()
        super().__delitem__(key)

    def pop(self, index: SupportsIndex = -1) -> Event:
        stored = self._stored
        if stored is not None:
            position = _as_index(index, len(stored) + len(self._tail))
            if position >= len(stored):
                self._changed_from(position)
                return self._tail.pop(position - len(stored))
            self.materialize()
        return super().pop(index)

    def clear(self) -> None:
        if self._stored is not None:
            self._stored = None
            self._tail = []
        super().clear()

    # -- everything else decodes first -------------------------------------------------

    def __iter__(self) -> Iterator[Event]:
        self.materialize()
        return super().__iter__()

    def __reversed__(self) -> Iterator[Event]:
        self.materialize()
        return super().__reversed__()

    def __contains__(self, value: object) -> bool:
        self.materialize()
        return super().__contains__(value)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.materialize()
        super().__setitem__(key, value)

    def insert(self, index: SupportsIndex, value: Event) -> None:
        self.materialize()
        super().insert(index, value)

    def remove(self, value: Event) -> None:
        self.materialize()
        super().remove(value)

    def index(self, value: Event, *args: SupportsIndex) -> int:
        self.materialize()
        return super().index(value, *args)

    def count(self, value: Event) -> int:
        self.materialize()
        return super().count(value)

    def sort(self, *args: Any, **kwargs: Any) -> None:
        self.materialize()
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        self.materialize()
        super().reverse()

    def copy(self) -> list[Event]:
        self.materialize()
        return super().copy()

    def __imul__(self, count: SupportsIndex) -> LazyEvents:
        self.materialize()
        super().__imul__(count)
        return self

    def __mul__(self, count: SupportsIndex) -> list[Event]:
        self.materialize()
        return super().__mul__(count)

    def __rmul__(self, count: SupportsIndex) -> list[Event]:
        self.materialize()
        return super().__rmul__(count)

    def __add__(self, other: list[Event]) -> list[Event]:  # type: ignore[override]
        self.materialize()
        return super().__add__(_decoded(other))

    def __radd__(self, other: list[Event]) -> list[Event]:
        # Defined so that ``plain_list + lazy`` comes here instead of list's own
        # concatenation, which would read this list's (still empty) storage.
        self.materialize()
        return [*other, *self]

    def __eq__(self, other: object) -> bool:
        self.materialize()
        return super().__eq__(_decoded(other))

    def __ne__(self, other: object) -> bool:
        return not self == other

    def __lt__(self, other: list[Event]) -> bool:
        self.materialize()
        return super().__lt__(_decoded(other))

    def __le__(self, other: list[Event]) -> bool:
        self.materialize()
        return super().__le__(_decoded(other))

    def __gt__(self, other: list[Event]) -> bool:
        self.materialize()
        return super().__gt__(_decoded(other))

    def __ge__(self, other: list[Event]) -> bool:
        self.materialize()
        return super().__ge__(_decoded(other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self.materialize()
        return super().__repr__()

    def __reduce_ex__(self, protocol: SupportsIndex) -> Any:
        # Copies and pickles are plain tracked lists of the decoded events.
        self.materialize()
        return (_rebuilt, (list(self), self.first_change))


def _decoded(other: Any) -> Any:
    # list's own comparisons and concatenation read the other list's storage directly.
    if isinstance(other, LazyEvents):
        other.materialize()
    return other


def _rebuilt(events: list[Event], first_change: int) -> EventList:
    rebuilt = EventList(events)
    rebuilt.first_change = first_change
    return rebuilt


def event_ids(events: list[Event]) -> Iterable[str]:
    """The ids of *events*, without decoding a `LazyEvents` that is not decoded yet."""
    if isinstance(events, LazyEvents):
        stored = events._stored
        if stored is not None:
            return [*stored.ids(), *map(_event_id, events._tail)]
    return map(_event_id, events)


def newest_event_id(events: list[Event]) -> str | None:
    """The id of the last of *events* (None if there is none), without decoding a
    `LazyEvents` that is not decoded yet."""
    if isinstance(events, LazyEvents):
        stored = events._stored
        if stored is not None and not events._tail:
            if not len(stored):
                return None
            if stored._decoded is not None:
                return stored._decoded[-1].id
            return _ids_of(stored._texts[-1:])[0]
    return _event_id(events[-1]) if events else None


def event_contents(events: list[Event]) -> list[Any]:
    """The ``content`` of each of *events*, without building the `Event` objects of a
    `LazyEvents` that is not decoded yet."""
    if isinstance(events, LazyEvents):
        stored = events._stored
        if stored is not None:
            return [*stored.contents(), *(event.content for event in events._tail)]
    return [event.content for event in events]


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
            events=_private_copy(self.events),
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
            self.ids = set(event_ids(self.events))
        return self.ids

    def saved(
        self, session: Session, version: int, kept: int, lineage: str, added: list[Event]
    ) -> None:
        """Record that *session* was saved at *version* with *lineage*: the first *kept*
        events, then *added*.

        Costs what changed, not the history: the private copy is cut and extended, the
        id set extended on a pure append. The caller's list was re-baselined when the
        save was sent (`baseline`), so what changed in it while the save was in flight
        is still a change, for the next save.
        """
        current = session.events
        if self.ids is not None:
            if kept == len(self.events):
                self.ids.update(map(_event_id, added))
            else:
                self.ids = None
        del self.events[kept:]
        self.events.extend(added)
        self.version = version
        self.lineage = lineage
        if current is not self.tracked:
            # The caller replaced the list: track the new one from now on (once O(n)),
            # from where it stops being what was just stored.
            tracked = EventList(current)
            tracked.first_change = common_prefix(self.events, tracked)
            self.tracked = session.events = tracked

    def baseline(self, events: list[Event]) -> int | None:
        """Take *events*, about to be sent, as the new baseline if they are the tracked
        list; the old ``first_change`` (for `restore_baseline`), or None."""
        tracked = self.tracked
        if events is not tracked or tracked is None:
            return None
        before = tracked.first_change
        tracked.reset_tracking()
        return before

    def restore_baseline(self, events: list[Event], before: int | None) -> None:
        """The save sent after `baseline` did not land: its changes are changes again."""
        if before is not None and isinstance(events, EventList):
            events._changed_from(before)


def appended_in_flight(session: Session, loaded: LoadedState) -> list[Event]:
    """The events appended to *session*'s tracked list after the ones *loaded* holds, with
    nothing before them changed: what another task added while a compaction or a rewind
    was in flight, which the caller's new list keeps, unsaved, for the next save."""
    current = session.events
    stored = len(loaded.events)
    if (
        current is not loaded.tracked
        or len(current) <= stored
        or not isinstance(current, EventList)
        or current.first_change < stored
    ):
        return []
    return list(current[stored:])


def mark_loaded(
    session: Session, *, offset: int = 0, partial: bool = False, lineage: str = ""
) -> None:
    """Start tracking *session* as it came out of the store."""
    events = session.events
    tracked = tracked_list(events)
    if tracked is not events:
        session.events = tracked
    session._loaded = LoadedState(
        version=session.version,
        events=_private_copy(tracked),
        offset=offset,
        partial=partial,
        tracked=tracked,
        session_id=session.session_id,
        owner=weakref.ref(session),
        lineage=lineage,
    )


def tracked_list(events: list[Event]) -> EventList:
    """*events* as the list a load hands out, tracked from now on: a `LazyEvents` fresh
    from a load as it is (so that nothing is decoded here), anything else copied."""
    if type(events) is LazyEvents and not events.decoded:
        events.reset_tracking()
        return events
    return EventList(events)


def _private_copy(events: list[Event]) -> list[Event]:
    return events.sibling() if isinstance(events, LazyEvents) else list(events)


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
