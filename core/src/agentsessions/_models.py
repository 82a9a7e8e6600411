"""The data model: `Event`, `Session` and the summaries that listing returns."""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    field_serializer,
    field_validator,
)

from . import _json
from ._errors import InvalidInputError

__all__ = ["Event", "ForkOrigin", "Session", "SessionPage", "SessionSummary", "utcnow"]

ModelT = TypeVar("ModelT", bound=BaseModel)


def utcnow() -> datetime:
    """The current time, timezone-aware in UTC (storage keeps microseconds)."""
    return datetime.now(timezone.utc)


def _to_utc(value: datetime) -> datetime:
    # Stored timestamps are always UTC so that ordering and comparison never depend
    # on the offset a caller happened to use.
    if value.utcoffset():
        return value.astimezone(timezone.utc)
    return value


def _new_event_id() -> str:
    # uuid.uuid4().hex, without building a UUID object (its int round trip costs more
    # than the random bytes): the same 16 random bytes, version 4 and RFC 4122 variant.
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40
    raw[8] = raw[8] & 0x3F | 0x80
    return raw.hex()


class Event(BaseModel):
    """One entry of a conversation: a message, a tool call, a tool result, a note.

    Events are immutable values: edit one with ``event.model_copy(update={...})`` and
    put the copy in ``session.events``, so that `SessionManager.save` can see what
    changed without comparing contents.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(default_factory=_new_event_id, min_length=1, max_length=255)
    author: str = Field(min_length=1, max_length=255)
    content: Any = None
    timestamp: AwareDatetime = Field(default_factory=utcnow)  # stored and returned in UTC
    metadata: dict[str, Any] = Field(default_factory=dict)

    # Converted to UTC when written, not when validated: a validator would be a Python
    # call per event on every load, the hottest path there is (5,000 events decode in
    # one pydantic-core pass only while Event has no Python validators).
    @field_serializer("timestamp")
    def _timestamp_in_utc(self, value: datetime) -> datetime:
        return _to_utc(value)


_MAX_AUTHOR = 255  # Event.author's max_length
_EVENT_FIELDS_GIVEN = frozenset(("author", "content", "metadata"))
_set_attribute = object.__setattr__


def _unvalidated_event(author: str, content: Any, metadata: dict[str, Any]) -> Event:
    """``Event(author=author, content=content, metadata=metadata)`` for an author already
    known to be valid, built without the validator (an agent turn adds events one by
    one). *content* is Any, so validation would pass it through unchanged, and
    *metadata* is the caller's fresh ``**kwargs`` dict, whose keys are str."""
    event: Event = Event.__new__(Event)
    _set_attribute(
        event,
        "__dict__",
        {
            "id": _new_event_id(),
            "author": author,
            "content": content,
            "timestamp": utcnow(),
            "metadata": metadata,
        },
    )
    _set_attribute(event, "__pydantic_fields_set__", set(_EVENT_FIELDS_GIVEN))
    _set_attribute(event, "__pydantic_extra__", None)
    _set_attribute(event, "__pydantic_private__", None)
    return event


# Events made by `EventsAndState.add_event` that no save has sent yet, by id(): their
# ids were drawn at random just now, so they cannot repeat an id already stored and a
# save may skip checking them against the loaded history (which costs a parse of every
# loaded event). Held weakly, so an event dropped unsaved keeps nothing alive; an event
# that merely equals one of them (a copy, an unpickled one) is a different object.
# Plain weak references (made in C) rather than a WeakValueDictionary, whose entries
# cost Python calls to make and to drop: an entry whose event is gone, or whose id was
# reused, simply does not match, and `_sweep` clears such entries as the table grows.
_unsent: dict[int, weakref.ref[Event]] = {}
_SWEEP_MIN = 1024
_sweep_at = _SWEEP_MIN


def _sweep() -> None:
    global _sweep_at
    for key, ref in list(_unsent.items()):
        if ref() is None and _unsent.get(key) is ref:
            _unsent.pop(key, None)
    _sweep_at = max(_SWEEP_MIN, 2 * len(_unsent))


def all_unsent(events: Sequence[Event]) -> bool:
    """Whether *events* are distinct objects made by ``add_event`` and never sent."""
    found = _unsent.get
    for event in events:
        ref = found(id(event))
        if ref is None or ref() is not event:
            return False
    return len({id(event) for event in events}) == len(events)


def new_event(author: str, content: Any = None, metadata: dict[str, Any] | None = None) -> Event:
    """``Event(author=..., content=..., metadata=...)`` with a fresh random id, known
    to saves as never sent (what ``add_event`` appends)."""
    if type(author) is str and 0 < len(author) <= _MAX_AUTHOR:
        event = _unvalidated_event(author, content, {} if metadata is None else metadata)
    else:
        event = Event(author=author, content=content, metadata=metadata or {})  # the errors
    _unsent[id(event)] = weakref.ref(event)
    if len(_unsent) > _sweep_at:
        _sweep()
    return event


def mark_sent(events: Sequence[Event]) -> None:
    """Forget that *events* were unsent: a save is carrying them."""
    drop = _unsent.pop
    for event in events:
        drop(id(event), None)


class EventsAndState:
    """Conveniences over ``events`` and ``state``, shared by `Session` and the runtime's
    ``ExecutionContext`` (which forwards both to its session when it has one)."""

    # For the type checker only: as real annotations pydantic would take them for
    # fields of Session and put them first in its field (and JSON) order.
    if TYPE_CHECKING:
        events: list[Event]
        state: dict[str, Any]

    def add_event(self, author: str, content: Any = None, **metadata: Any) -> Event:
        """Append a new event and return it."""
        event = new_event(author, content, metadata)
        self.events.append(event)
        return event

    def put_model(self, key: str, model: BaseModel) -> None:
        """Store a pydantic model in ``state[key]`` as plain JSON (never pickle)."""
        self.state[key] = model.model_dump(mode="json")

    def get_model(self, key: str, model_type: type[ModelT]) -> ModelT | None:
        """Read ``state[key]`` back, validated as *model_type*; None when the key is absent."""
        raw = self.state.get(key)
        if raw is None:
            return None
        return model_type.model_validate(raw)

    def pop_model(self, key: str, model_type: type[ModelT]) -> ModelT | None:
        """Like `get_model`, and remove the key from the state."""
        found = self.get_model(key, model_type)
        self.state.pop(key, None)
        return found


class ForkOrigin(BaseModel):
    """Where a fork came from: the source session's id, the version it was forked at,
    and the id of the last event copied (None: the source's whole history then)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str
    version: int
    event_id: str | None = None


class Session(BaseModel, EventsAndState):
    """One conversation: its events in order, a JSON state dict, owner and version.

    A Session is a detached copy. Changing it changes nothing stored until
    `SessionManager.save`, which writes exactly what changed since the copy was loaded.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    session_id: str
    user_id: str | None = None
    events: list[Event] = Field(default_factory=list)
    state: dict[str, Any] = Field(default_factory=dict)
    created_at: AwareDatetime = Field(default_factory=utcnow)
    updated_at: AwareDatetime = Field(default_factory=utcnow)
    version: int = 0
    #: Set on a session made by `SessionManager.fork`: where it was forked from.
    forked_from: ForkOrigin | None = None

    # What the copy looked like when loaded or last saved (a `_tracking.LoadedState`),
    # so that save() writes only what changed; None for a Session built by hand.
    _loaded: Any = PrivateAttr(default=None)

    @field_validator("created_at", "updated_at")
    @classmethod
    def _times_in_utc(cls, value: datetime) -> datetime:
        return _to_utc(value)

    # A loaded session's events decode on first use (`_tracking.LazyEvents`), and
    # pydantic-core reads a list's storage directly: decode before it does. One call
    # per session, never per event.
    @field_validator("events", mode="before")
    @classmethod
    def _events_decoded(cls, value: Any) -> Any:
        return _decoded(value)

    @field_serializer("events", mode="wrap")
    def _events_out(self, value: Any, handler: SerializerFunctionWrapHandler) -> Any:
        return handler(_decoded(value))

    def __setattr__(self, name: str, value: Any) -> None:
        # A session's identity is fixed: its tracking (what save() compares against) is
        # the stored session of that id, so another id would write through it.
        if name == "session_id" and value != self.__dict__.get("session_id", value):
            raise InvalidInputError(
                f"session_id cannot be changed (this is session {self.session_id!r}); "
                "to store these events and state under another id, create that session "
                "with manager.create() and copy them into it"
            )
        super().__setattr__(name, value)

    def __eq__(self, other: object) -> bool:
        # Fields, not tracking: pydantic's own __eq__ also compares private attributes,
        # and a loaded session's tracking refers back into its events, which recursed.
        if not isinstance(other, Session):
            return NotImplemented
        return (
            type(self) is type(other)
            and self.__dict__ == other.__dict__
            and self.first_event_position == other.first_event_position
        )

    @property
    def is_partial(self) -> bool:
        """True when loaded with ``last_events``: ``events`` holds only the newest ones."""
        return self._loaded is not None and bool(self._loaded.partial)

    @property
    def first_event_position(self) -> int:
        """Position in the full history of ``events[0]`` (0 unless partially loaded)."""
        return int(self._loaded.offset) if self._loaded is not None else 0

    def _check_serializable(self) -> None:
        _json.check_json(self.state, "state")


def _decoded(value: Any) -> Any:
    materialize = getattr(value, "materialize", None) if isinstance(value, list) else None
    if materialize is not None:
        materialize()
    return value


@dataclass(frozen=True, slots=True)
class SessionSummary:
    """A session without its events, as `SessionManager.list_sessions` returns it."""

    session_id: str
    user_id: str | None
    created_at: datetime
    updated_at: datetime
    event_count: int
    version: int
    #: Where the session was forked from (`SessionManager.fork`), or None.
    forked_from: ForkOrigin | None = None


@dataclass(frozen=True, slots=True)
class SessionPage:
    """One page of summaries, newest first, and the cursor of the next page (None at the end)."""

    items: list[SessionSummary]
    next_cursor: str | None
