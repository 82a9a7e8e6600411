"""A LangGraph graph step on our checkpointer and on LangGraph's own savers, side by side.

``python -m agentsessions_bench._langgraph [--steps N] [--history H]`` runs, per engine,
the checkpointer calls of one step of a graph's loop: ``aget_tuple`` of the thread's
latest checkpoint, ``aput`` of the next one (its message list two messages longer) and
``aput_writes`` of the step's task, on a thread that already holds *history*
checkpoints. It prints the median and 95th percentile of a step in milliseconds.

Ours: `AgentSessionsSaver` on memory, SQLite (a file), and the PostgreSQL, Redis and
MongoDB URLs of ``AGENTSESSIONS_POSTGRES_URL`` / ``AGENTSESSIONS_REDIS_URL`` /
``AGENTSESSIONS_MONGO_URL`` when set. Theirs, when installed: ``InMemorySaver``,
``AsyncSqliteSaver`` (``langgraph-checkpoint-sqlite``) and ``AsyncPostgresSaver``
(``langgraph-checkpoint-postgres``, on the same database). LangGraph's Redis saver
needs the RedisJSON and RediSearch modules, which a plain Redis server lacks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ._store import MESSAGE_TEXT

__all__ = ["main", "run_steps"]

SaverFactory = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def _messages(count: int) -> list[dict[str, Any]]:
    return [
        {"role": "user" if index % 2 == 0 else "assistant", "text": MESSAGE_TEXT, "n": index}
        for index in range(count)
    ]


async def run_steps(saver: Any, steps: int, history: int) -> list[float]:
    """Seconds per timed step, after *history* untimed ones on a fresh thread."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    thread = f"bench-{uuid.uuid4().hex}"
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    await saver.aput(config, checkpoint, {"source": "input", "step": -1}, {})
    timings: list[float] = []
    for step in range(history + steps):
        started = time.perf_counter()
        latest = await saver.aget_tuple(config)
        previous = latest.checkpoint
        version = saver.get_next_version(previous["channel_versions"].get("messages"), None)
        nxt = create_checkpoint(previous, None, step)
        nxt["channel_values"] = {"messages": _messages(2 * (step + 1))}
        nxt["channel_versions"] = {"messages": version}
        stored = await saver.aput(
            latest.config, nxt, {"source": "loop", "step": step}, {"messages": version}
        )
        await saver.aput_writes(stored, [("messages", _messages(2))], f"task-{step}")
        if step >= history:
            timings.append(time.perf_counter() - started)
    return timings


@contextlib.asynccontextmanager
async def _ours(url: str) -> AsyncIterator[Any]:
    from agentsessions import connect
    from agentsessions.integrations.langgraph import AgentSessionsSaver

    namespace = f"bench_lg_{uuid.uuid4().hex[:12]}"
    async with connect(url, namespace=namespace) as manager:
        saver = AgentSessionsSaver(manager)
        try:
            yield saver
        finally:
            page = await manager.list_sessions(limit=1000)
            for summary in page.items:
                await manager.delete(summary.session_id)


@contextlib.asynccontextmanager
async def _memory_peer() -> AsyncIterator[Any]:
    from langgraph.checkpoint.memory import InMemorySaver

    yield InMemorySaver()


@contextlib.asynccontextmanager
async def _sqlite_peer(path: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(path) as saver:
        yield saver


@contextlib.asynccontextmanager
async def _postgres_peer(url: str) -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()
        yield saver


def _installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


def _candidates(workdir: Path) -> list[tuple[str, str, SaverFactory]]:
    rows: list[tuple[str, str, SaverFactory]] = [
        ("memory", "agentsessions", lambda: _ours("memory://bench-langgraph")),
        ("memory", "LangGraph InMemorySaver", _memory_peer),
        ("sqlite", "agentsessions", lambda: _ours(f"sqlite:///{workdir / 'ours.db'}")),
    ]
    if _installed("langgraph.checkpoint.sqlite.aio"):
        rows.append(
            ("sqlite", "LangGraph AsyncSqliteSaver", lambda: _sqlite_peer(str(workdir / "lg.db")))
        )
    postgres = os.environ.get("AGENTSESSIONS_POSTGRES_URL")
    if postgres:
        rows.append(("postgres", "agentsessions", lambda: _ours(postgres)))
        if _installed("langgraph.checkpoint.postgres.aio"):
            rows.append(
                ("postgres", "LangGraph AsyncPostgresSaver", lambda: _postgres_peer(postgres))
            )
    servers = (("redis", "AGENTSESSIONS_REDIS_URL"), ("mongo", "AGENTSESSIONS_MONGO_URL"))
    for engine, variable in servers:
        url = os.environ.get(variable)
        if url:
            rows.append((engine, "agentsessions", _bound(url)))
    return rows


def _bound(url: str) -> SaverFactory:
    return lambda: _ours(url)


async def _run(steps: int, history: int) -> list[tuple[str, str, float, float]]:
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for engine, name, factory in _candidates(Path(workdir)):
            async with factory() as saver:
                timings = sorted(await run_steps(saver, steps, history))
            p95 = timings[min(len(timings) - 1, int(len(timings) * 0.95))]
            results.append((engine, name, statistics.median(timings) * 1e3, p95 * 1e3))
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentsessions_bench._langgraph")
    parser.add_argument("--steps", type=int, default=200, help="timed steps per saver")
    parser.add_argument("--history", type=int, default=50, help="checkpoints before timing")
    args = parser.parse_args(argv)
    print("| engine | saver | step median (ms) | step p95 (ms) |")
    print("|---|---|---|---|")
    for engine, name, median, p95 in asyncio.run(_run(args.steps, args.history)):
        print(f"| {engine} | {name} | {median:.3f} | {p95:.3f} |")


if __name__ == "__main__":
    main()
