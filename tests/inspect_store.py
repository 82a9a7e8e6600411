"""The store the inspector's tests look at: the demo conversation (approved, and one still
waiting), hostile content, a long history, a compacted session, a page's worth of others."""

from __future__ import annotations

from agentsessions import Event
from agentsessions_cli._common import connect
from agentsessions_cli._demo import DemoAgent

TOKEN = "test-token-0123456789"
#: Every string here must reach the page as text: none may run or become markup.
HOSTILE_TEXT = '<script>window.__xss = "event";</script><img src=x onerror="window.__xss=1">'
HOSTILE_KEY = '"><script>window.__xss = "key";</script>'
HOSTILE_AUTHOR = "<b onmouseover=alert(1)>mallory</b>"
HOSTILE_ID = '<i>evil</i>"session'
LONG_EVENTS = 130  # three pages of 50
BULK_SESSIONS = 30  # more than a page of the listing (25)


async def build_store(url: str) -> dict[str, str]:
    """Fill the store; returns the ids of the interesting sessions by role."""
    async with connect(url) as manager:
        agent = DemoAgent(manager)
        for text in (
            "Hi, I'm Ada",
            "I like green tea",
            "Send a note to Bob saying the cat is fine",
        ):
            await agent.run(text, session_id="demo", user_id="ada")
        await agent.run("approve", session_id="demo", user_id="ada")
        for text in ("My name is Grace", "Send a note to Alan saying hello"):
            await agent.run(text, session_id="waiting", user_id="grace")

        for number in range(BULK_SESSIONS):
            await manager.create(f"bulk-{number:02d}", "bulk")

        long = await manager.create("long", "bob")
        for number in range(LONG_EVENTS):
            long.add_event("user" if number % 2 == 0 else "agent", f"line {number}")
        await manager.save(long)

        hostile = await manager.create(
            HOSTILE_ID, "<u>mallory</u>", state={HOSTILE_KEY: HOSTILE_TEXT}
        )
        hostile.add_event("user", HOSTILE_TEXT)
        hostile.add_event(HOSTILE_AUTHOR, {HOSTILE_KEY: [HOSTILE_TEXT]}, note=HOSTILE_TEXT)
        hostile.add_event("agent", HOSTILE_TEXT, kind="tool_call", call_id=HOSTILE_KEY)
        await manager.save(hostile)

        compacted = await manager.create("compacted", "ada")
        for number in range(6):
            compacted.add_event("user", f"old {number}")
        await manager.save(compacted)
        summary = Event(
            author="summary", content="Ada said six old things.", metadata={"kind": "summary"}
        )
        await manager.compact(compacted, compacted.events[4].id, [summary], archive=True)
    return {"demo": "demo", "waiting": "waiting", "long": "long", "hostile": HOSTILE_ID}
