"""What the inspector's pages show, computed from sessions: timeline items, pages, metadata.

Pure functions over the public models, no web framework: the templates only lay out
what these return, and the tests check them without a server.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentsessions import Event, Session
from agentsessions.runtime import PENDING_CALLS_KEY, PendingToolCall, PendingToolCalls

__all__ = [
    "EVENTS_PER_PAGE",
    "MAX_PAGE",
    "CallGroup",
    "EventPage",
    "Item",
    "event_page",
    "json_size",
    "last_events_for",
    "pending_calls",
    "timeline",
    "ttl_left",
]

#: Events on one page of a timeline: a history is read a page at a time, never whole.
EVENTS_PER_PAGE = 50
#: The deepest page a request may ask for (page 0 is the newest).
MAX_PAGE = 1_000_000

# The runtime's event kinds (metadata["kind"]) that belong to one tool call.
_CALL_KINDS = frozenset(
    {"tool_call", "approval_requested", "approval", "tool_result", "tool_denied", "tool_error"}
)


@dataclass
class CallGroup:
    """A tool call and the events of the same ``call_id`` that follow it on the page."""

    call_id: str
    tool: str
    arguments: Any
    pending: bool
    events: list[tuple[int, Event]] = field(default_factory=list)

    @property
    def outcome(self) -> str:
        """``pending``, ``done``, ``denied``, ``failed``, or ``open`` (no result on this page)."""
        if self.pending:
            return "pending"
        kinds = [event.metadata.get("kind") for _, event in self.events]
        for kind, outcome in (
            ("tool_result", "done"),
            ("tool_denied", "denied"),
            ("tool_error", "failed"),
        ):
            if kind in kinds:
                return outcome
        return "open"


@dataclass
class Item:
    """One entry of a timeline: a chat message, a tool call with its results, a
    compaction summary, or any other event."""

    kind: str  # "message", "call", "summary", "event"
    position: int
    event: Event
    call: CallGroup | None = None

    @property
    def text(self) -> str | None:
        """The content when it is a plain string (shown as text), else None (a JSON tree)."""
        content = self.event.content
        return content if isinstance(content, str) else None


@dataclass(frozen=True)
class EventPage:
    """One page of a timeline: its events oldest first, and where it sits in the history."""

    number: int  # 0 = the newest page
    events: list[tuple[int, Event]]  # (position in the full history, event)
    total: int  # events in the whole history

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / EVENTS_PER_PAGE))

    @property
    def has_older(self) -> bool:
        return bool(self.events) and self.events[0][0] > 0

    @property
    def has_newer(self) -> bool:
        return self.number > 0


def last_events_for(page: int) -> int:
    """How many of the newest events to load to show *page* (0 = the newest)."""
    return EVENTS_PER_PAGE * (page + 1)


def event_page(session: Session, page: int) -> EventPage:
    """Page *page* of *session*, loaded with ``last_events=last_events_for(page)``."""
    start = session.first_event_position
    total = start + len(session.events)
    end = max(0, len(session.events) - EVENTS_PER_PAGE * page)
    first = max(0, end - EVENTS_PER_PAGE)
    shown = [(start + index, session.events[index]) for index in range(first, end)]
    return EventPage(number=page, events=shown, total=total)


def pending_calls(state: dict[str, Any]) -> list[PendingToolCall]:
    """The tool calls waiting for a human, as the runtime stores them in the state.

    A value the runtime would not accept is shown as no pending call (the state tree
    still shows it as stored).
    """
    raw = state.get(PENDING_CALLS_KEY)
    if raw is None:
        return []
    try:
        return list(PendingToolCalls.model_validate(raw).calls)
    except ValueError:
        return []


def timeline(events: list[tuple[int, Event]], pending: set[str]) -> list[Item]:
    """The page's events as items, oldest first: each ``tool_call`` gathers the later
    events of its ``call_id`` on the page; events of a call whose ``tool_call`` is on
    an older page stand alone."""
    items: list[Item] = []
    groups: dict[str, CallGroup] = {}
    for position, event in events:
        kind = event.metadata.get("kind")
        call_id = event.metadata.get("call_id")
        if kind in _CALL_KINDS and isinstance(call_id, str):
            if kind == "tool_call":
                content = event.content if isinstance(event.content, dict) else {}
                group = CallGroup(
                    call_id=call_id,
                    tool=str(content.get("tool", event.metadata.get("tool", "?"))),
                    arguments=content.get("arguments", event.content),
                    pending=call_id in pending,
                    events=[(position, event)],
                )
                groups[call_id] = group
                items.append(Item("call", position, event, group))
                continue
            if call_id in groups:
                groups[call_id].events.append((position, event))
                continue
            items.append(Item("event", position, event))
            continue
        if kind == "summary":
            items.append(Item("summary", position, event))
        elif kind in (None, "message") and isinstance(event.content, str):
            items.append(Item("message", position, event))
        else:
            items.append(Item("event", position, event))
    return items


def json_size(value: Any) -> int:
    """Bytes of *value* as compact UTF-8 JSON (how big it is as stored, near enough)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def ttl_left(updated_at: datetime, ttl: float | None, now: datetime) -> float | None:
    """Seconds until a session saved at *updated_at* expires under *ttl* (None: never)."""
    if ttl is None:
        return None
    return max(0.0, ttl - (now - updated_at).total_seconds())
