"""What the inspector's pages are computed from: pages of a history, timeline items."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from agentsessions import Event, MemorySessionManager, Session
from agentsessions_cli._inspect_views import (
    EVENTS_PER_PAGE,
    event_page,
    last_events_for,
    pending_calls,
    timeline,
    ttl_left,
)


def _loaded(count: int, page: int) -> Session:
    async def run() -> Session:
        async with MemorySessionManager() as manager:
            session = await manager.create("s")
            for number in range(count):
                session.add_event("user", f"m{number}")
            await manager.save(session)
            loaded = await manager.get("s", last_events=last_events_for(page))
            assert loaded is not None
            return loaded

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("count", "page", "first", "last"),
    [
        (0, 0, None, None),
        (1, 0, 0, 0),
        (EVENTS_PER_PAGE, 0, 0, EVENTS_PER_PAGE - 1),
        (EVENTS_PER_PAGE + 1, 0, 1, EVENTS_PER_PAGE),
        (EVENTS_PER_PAGE + 1, 1, 0, 0),
        (EVENTS_PER_PAGE + 1, 2, None, None),
        (3 * EVENTS_PER_PAGE, 2, 0, EVENTS_PER_PAGE - 1),
    ],
)
def test_pages_count_back_from_the_newest(
    count: int, page: int, first: int | None, last: int | None
) -> None:
    shown = event_page(_loaded(count, page), page)
    positions = [position for position, _ in shown.events]
    assert shown.total == count
    if first is None:
        assert positions == []
    else:
        assert positions == list(range(first, (last or 0) + 1))
        assert [event.content for _, event in shown.events] == [f"m{p}" for p in positions]
    assert shown.has_newer == (page > 0)
    assert shown.has_older == (bool(positions) and positions[0] > 0)


def _event(author: str, content: object = None, **metadata: object) -> Event:
    return Event(author=author, content=content, metadata=metadata)


def test_a_call_gathers_the_events_of_its_call_id() -> None:
    events = [
        _event("user", "send it"),
        _event(
            "agent", {"tool": "send", "arguments": {"to": "Bob"}}, kind="tool_call", call_id="c1"
        ),
        _event("agent", "needs approval", kind="approval_requested", call_id="c1"),
        _event("agent", "I need your approval", kind="message"),
        _event("user", "approved", kind="approval", call_id="c1", approved=True),
        _event("tool", {"ok": True}, kind="tool_result", call_id="c1", tool="send"),
        _event(
            "tool", "boom", kind="tool_error", call_id="c0", tool="send"
        ),  # call on an older page
        _event("summary", "earlier", kind="summary"),
        _event("agent", {"structured": 1}),
    ]
    items = timeline(list(enumerate(events)), pending=set())
    assert [item.kind for item in items] == [
        "message",
        "call",
        "message",
        "event",
        "summary",
        "event",
    ]
    call = items[1].call
    assert call is not None
    assert (call.tool, call.arguments, call.outcome) == ("send", {"to": "Bob"}, "done")
    assert [position for position, _ in call.events] == [1, 2, 4, 5]
    assert items[3].position == 6  # the orphan result stands alone, in its place


def test_a_pending_call_is_marked_and_read_from_the_state() -> None:
    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    state = {
        "agentsessions:pending_tool_calls": {
            "calls": [
                {"id": "c1", "tool": "send", "arguments": {}, "requested_at": when.isoformat()}
            ]
        }
    }
    calls = pending_calls(state)
    assert [(c.id, c.tool) for c in calls] == [("c1", "send")]
    events = [_event("agent", {"tool": "send", "arguments": {}}, kind="tool_call", call_id="c1")]
    (item,) = timeline(list(enumerate(events)), pending={"c1"})
    assert item.call is not None and item.call.outcome == "pending"
    assert pending_calls({"agentsessions:pending_tool_calls": "not calls"}) == []
    assert pending_calls({}) == []


def test_ttl_left() -> None:
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert ttl_left(now - timedelta(seconds=100), 3600, now) == 3500
    assert ttl_left(now - timedelta(hours=2), 3600, now) == 0
    assert ttl_left(now, None, now) is None
