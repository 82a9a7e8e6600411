"""A writer process for test_kill_writers: ``python writer.py URL NAMESPACE SESSION NAME``.

Appends events ``NAME:i`` to SESSION with ``update()`` and prints ``ack NAME:i`` (flushed)
after each one returned, until it is killed; bounded by `MAX_ROUNDS` all the same.
"""

from __future__ import annotations

import asyncio
import sys

from agentsessions import Session, connect

MAX_ROUNDS = 20_000


async def main(url: str, namespace: str, session_id: str, name: str) -> None:
    async with connect(url, namespace=namespace, timeout=10) as manager:
        await manager.get_or_create(session_id)
        print("ready", flush=True)
        for index in range(MAX_ROUNDS):
            content = f"{name}:{index}"

            def add(session: Session, content: str = content) -> None:
                session.add_event("user", content)

            await manager.update(session_id, add)
            print(f"ack {content}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
