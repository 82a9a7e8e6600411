"""A separate process working on a shared SQLite file (run by test_sqlite_multiprocess).

``race URL SESSION_ID NAME READY_FILE GO_FILE``: load the session, say so by creating
READY_FILE, wait until GO_FILE exists, then append one event and save. Prints one JSON
line: {"outcome": "saved" | "conflict" | "error", "version": loaded version, ...}.

``append URL SESSION_ID NAME COUNT GO_FILE``: wait for GO_FILE, then COUNT times
``update()`` the session appending an event "NAME:i". Prints {"outcome": ..., "done": n}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

import agentsessions
from agentsessions import Session, SessionConflictError


def _wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.0005)


def _signal_and_wait(ready: str, go: str) -> None:
    # Blocking on purpose: this process has nothing else to do until every racer is ready.
    with open(ready, "w"):
        pass
    _wait_for(go)


async def race(url: str, session_id: str, name: str, ready: str, go: str) -> dict[str, object]:
    async with agentsessions.connect(url) as manager:
        session = await manager.get(session_id)
        assert session is not None
        session.add_event("user", name)
        session.state["winner"] = name
        _signal_and_wait(ready, go)
        try:
            await manager.save(session)
        except SessionConflictError:
            return {"outcome": "conflict", "name": name}
        except Exception as exc:
            return {"outcome": "error", "name": name, "error": f"{type(exc).__name__}: {exc}"}
        return {"outcome": "saved", "name": name}


async def append(url: str, session_id: str, name: str, count: int, go: str) -> dict[str, object]:
    async with agentsessions.connect(url) as manager:
        await manager.open()
        _wait_for(go)
        done = 0
        try:
            for index in range(count):
                content = f"{name}:{index}"

                def add(session: Session, content: str = content) -> None:
                    session.add_event("user", content)

                await manager.update(session_id, add)
                done += 1
        except Exception as exc:
            return {"outcome": "error", "done": done, "error": f"{type(exc).__name__}: {exc}"}
        return {"outcome": "ok", "done": done}


def main(argv: list[str]) -> None:
    mode, url, session_id, name = argv[:4]
    if mode == "race":
        result = asyncio.run(race(url, session_id, name, argv[4], argv[5]))
    elif mode == "append":
        result = asyncio.run(append(url, session_id, name, int(argv[4]), argv[5]))
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
