"""One run of an agent with an approval tool, as its own process (see test_approval.py).

usage: approval_worker.py URL SESSION_ID OUTBOX request|approve CALL_ID|deny CALL_ID

The tool appends to OUTBOX, a file, so the test can tell whether and how often it
really ran, whichever process ran it.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from agentsessions import SessionManager, connect
from agentsessions.runtime import Agent, Approval, ExecutionContext


class Mailer(Agent):
    def __init__(self, outbox: Path, manager: SessionManager) -> None:
        super().__init__(manager)
        self.outbox = outbox
        self.tools.register(self.send_mail, requires_approval=True)

    def send_mail(self, to: str, body: str) -> str:
        with self.outbox.open("a") as file:
            file.write(f"{to}: {body}\n")
        return f"sent to {to}"

    async def step(self, context: ExecutionContext, message: str | None) -> str | None:
        if message:
            context.add_event("user", message)
            outcome = await context.call_tool("send_mail", {"to": "bob", "body": message})
            return outcome.call.id
        return context.outcomes[-1].status if context.outcomes else None


async def main(url: str, session_id: str, outbox: str, command: str, *rest: str) -> None:
    async with connect(url) as manager:
        agent = Mailer(Path(outbox), manager)
        if command == "request":
            result = await agent.run("hello bob", session_id=session_id)
        else:
            approval = Approval(call_id=rest[0], approved=command == "approve", note="ok")
            result = await agent.run(session_id=session_id, approval=approval)
    print(json.dumps({"status": result.status, "reply": result.reply}))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
