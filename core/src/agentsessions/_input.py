"""Checks and encodes what a caller hands the manager (state, events, sizes, timestamps)."""

from __future__ import annotations

from datetime import datetime, timezone

from . import _json
from ._errors import InvalidInputError, SessionSerializationError, SessionTooLargeError
from ._models import Event
from ._records import EventRecord, encode_event

__all__ = [
    "MAX_LAST_EVENTS",
    "MAX_PAGE_SIZE",
    "NO_IDS",
    "aware",
    "check_event_sizes",
    "check_last_events",
    "check_size",
    "encode_events",
    "encode_state",
]

#: ``get(last_events=N)`` with a larger N loads the whole history, like N = this.
MAX_LAST_EVENTS = 2**31 - 1
MAX_PAGE_SIZE = 1000
#: No event ids to check new events against.
NO_IDS: frozenset[str] = frozenset()


def check_size(text: str, limit: int | None, path: str) -> None:
    """Raise `SessionTooLargeError` if *text* encodes to more than *limit* UTF-8 bytes."""
    # A character is at most 4 bytes: most texts are settled without encoding them.
    if limit is None or len(text) * 4 <= limit:
        return
    size = len(text.encode("utf-8"))
    if size > limit:
        raise SessionTooLargeError(path, size, limit)


def check_event_sizes(events: list[EventRecord], first_index: int, limit: int | None) -> None:
    """`SessionTooLargeError` for an encoded event larger than *limit* bytes."""
    if limit is None:
        return
    for offset, record in enumerate(events):
        check_size(record.data, limit, f"events[{first_index + offset}]")


def check_last_events(last_events: object) -> int | None:
    """A ``last_events`` argument, checked and capped at `MAX_LAST_EVENTS`."""
    if last_events is None:
        return None
    if type(last_events) is not int or last_events < 0:
        raise InvalidInputError(f"last_events must be None or an int >= 0, not {last_events!r}")
    # More than any session holds means "all of them", and keeps the number
    # inside what every engine's LIMIT / Lua number / index arithmetic takes.
    return min(last_events, MAX_LAST_EVENTS)


def encode_state(state: object, limit: int | None) -> str:
    """The state as stored JSON text, after every check; raises before any I/O."""
    if type(state) is not dict:
        raise SessionSerializationError(
            "state", f"must be a dict (a JSON object), not {type(state).__name__}"
        )
    if not state:
        return "{}"  # most turns carry no state: nothing to check or encode
    _json.check_json(state, "state")
    text = _json.dumps(state)
    check_size(text, limit, "state")
    return text


def encode_events(
    events: list[Event], start: int, keep: int, known: set[str] | frozenset[str]
) -> list[EventRecord]:
    """Check and encode ``events[start:]``, stored from position *keep* on.

    *known* holds the ids of the events kept before them; it is not modified.
    """
    added: set[str] = set()
    encoded = []
    for index in range(start, len(events)):
        event = events[index]
        if not isinstance(event, Event):
            raise InvalidInputError(f"events[{index}] is a {type(event).__name__}, not an Event")
        # An unvalidated id may be unhashable; encode_event names what is wrong with it.
        if type(event.id) is str and (event.id in known or event.id in added):
            raise InvalidInputError(f"events[{index}]: duplicate event id {event.id!r}")
        added.add(event.id)
        encoded.append(encode_event(event, keep + index - start, f"events[{index}]"))
    return encoded


def aware(what: str, value: object) -> datetime:
    """*value* if it is a timezone-aware datetime (in UTC), else `InvalidInputError`."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise InvalidInputError(f"{what} must be a timezone-aware datetime, not {value!r}")
    return value.astimezone(timezone.utc) if value.utcoffset() else value
