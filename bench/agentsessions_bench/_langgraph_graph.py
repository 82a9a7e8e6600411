"""Whole LangGraph graph runs on our checkpointer and on LangGraph's own savers, side by side.

``python -m agentsessions_bench._langgraph_graph [--runs N] [--rounds R]`` times, per
engine and saver, four cells of a two-node ``StateGraph`` (each node appends one ~300-byte
message to the state):

* ``invoke``: blocking ``graph.invoke`` on a fresh thread (LangGraph's executor threads
  call the saver's blocking methods);
* ``ainvoke``: ``await graph.ainvoke`` on a fresh thread;
* ``long thread``: ``graph.invoke`` continuing a thread that holds 200 earlier runs
  (400 messages in its state);
* ``history 500``: ``list(graph.get_state_history(...))`` of a thread holding 500
  checkpoints.

Ours is `AgentSessionsSaver` on memory, SQLite (a file) and ``AGENTSESSIONS_POSTGRES_URL``;
theirs ``InMemorySaver``, ``SqliteSaver`` / ``AsyncSqliteSaver`` and ``PostgresSaver`` /
``AsyncPostgresSaver`` on the same database. Every cell is the median of *rounds*
per-round medians, the savers' order rotated each round; the ratio is ours over theirs
(below 1.0: ours is faster).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import operator
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from ._store import MESSAGE_TEXT

__all__ = ["main"]

CELLS = ("invoke", "ainvoke", "long thread", "history 500")
LONG_THREAD_RUNS = 200
HISTORY_CHECKPOINTS = 500


class _State(TypedDict):
    messages: Annotated[list[dict[str, Any]], operator.add]
    turn: int


def _ask(state: _State) -> dict[str, Any]:
    return {"messages": [{"role": "user", "text": MESSAGE_TEXT}], "turn": state["turn"] + 1}


def _answer(state: _State) -> dict[str, Any]:
    return {"messages": [{"role": "assistant", "text": MESSAGE_TEXT}], "turn": state["turn"]}


def _graph(saver: Any) -> Any:
    from langgraph.graph import END, START, StateGraph

    builder = StateGraph(_State)
    builder.add_node("ask", _ask)
    builder.add_node("answer", _answer)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", "answer")
    builder.add_edge("answer", END)
    return builder.compile(checkpointer=saver)


def _config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


_INPUT = {"messages": [], "turn": 0}


def _timed(call: Callable[[], Any], count: int) -> float:
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        call()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1e3


async def _atimed(graph: Any, count: int) -> float:
    timings = []
    for _ in range(count):
        config = _config(uuid.uuid4().hex)
        started = time.perf_counter()
        await graph.ainvoke(_INPUT, config)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings) * 1e3


SyncSaver = Callable[[], contextlib.AbstractContextManager[Any]]
AsyncSaver = Callable[[], contextlib.AbstractAsyncContextManager[Any]]


def _sync_cells(saver: Any, runs: int) -> dict[str, float]:
    """Milliseconds per blocking cell (the median of its timed calls) on one saver."""
    graph = _graph(saver)
    for _ in range(5):  # warm: connections opened, statements prepared
        graph.invoke(_INPUT, _config(uuid.uuid4().hex))
    result = {"invoke": _timed(lambda: graph.invoke(_INPUT, _config(uuid.uuid4().hex)), runs)}
    long_thread = _config(f"long-{uuid.uuid4().hex}")
    for _ in range(LONG_THREAD_RUNS):
        graph.invoke(_INPUT, long_thread)
    result["long thread"] = _timed(lambda: graph.invoke(_INPUT, long_thread), max(runs // 4, 5))
    history = _config(f"history-{uuid.uuid4().hex}")
    for _ in range(HISTORY_CHECKPOINTS):  # bounded: each run adds checkpoints
        if len(list(graph.get_state_history(history))) >= HISTORY_CHECKPOINTS:
            break
        for _ in range(25):
            graph.invoke(_INPUT, history)
    result["history 500"] = _timed(
        lambda: list(graph.get_state_history(history, limit=HISTORY_CHECKPOINTS)),
        max(runs // 10, 3),
    )
    return result


async def _async_cell(factory: AsyncSaver, runs: int) -> float:
    async with factory() as saver:
        graph = _graph(saver)
        for _ in range(5):
            await graph.ainvoke(_INPUT, _config(uuid.uuid4().hex))
        return await _atimed(graph, runs)


def _measure(sync_saver: SyncSaver, async_saver: AsyncSaver, runs: int) -> dict[str, float]:
    with sync_saver() as saver:
        cells = _sync_cells(saver, runs)
    cells["ainvoke"] = asyncio.run(_async_cell(async_saver, runs))
    return cells


def _ours(url: str) -> tuple[SyncSaver, AsyncSaver]:
    from agentsessions.integrations.langgraph import AgentSessionsSaver

    namespace = f"bench_lgg_{uuid.uuid4().hex[:12]}"

    @contextlib.contextmanager
    def blocking() -> Iterator[Any]:
        saver = AgentSessionsSaver.from_url(url, namespace=namespace)
        try:
            yield saver
        finally:
            saver._run(_drop_all(saver.manager))
            saver.close()

    @contextlib.asynccontextmanager
    async def asynchronous() -> AsyncIterator[Any]:
        async with AgentSessionsSaver.from_url(url, namespace=namespace) as saver:
            try:
                yield saver
            finally:
                await _drop_all(saver.manager)

    return blocking, asynchronous


async def _drop_all(manager: Any) -> None:
    for _ in range(1000):  # bounded: each pass deletes a page
        page = await manager.list_sessions(limit=1000)
        if not page.items:
            return
        for summary in page.items:
            await manager.delete(summary.session_id)


def _memory_peer() -> tuple[SyncSaver, AsyncSaver]:
    from langgraph.checkpoint.memory import InMemorySaver

    @contextlib.contextmanager
    def blocking() -> Iterator[Any]:
        yield InMemorySaver()

    @contextlib.asynccontextmanager
    async def asynchronous() -> AsyncIterator[Any]:
        yield InMemorySaver()

    return blocking, asynchronous


def _sqlite_peer(path: Path) -> tuple[SyncSaver, AsyncSaver]:
    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    return (
        lambda: SqliteSaver.from_conn_string(str(path.with_suffix(".sync.db"))),
        lambda: AsyncSqliteSaver.from_conn_string(str(path.with_suffix(".async.db"))),
    )


def _postgres_peer(url: str) -> tuple[SyncSaver, AsyncSaver]:
    from langgraph.checkpoint.postgres import PostgresSaver
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    @contextlib.contextmanager
    def blocking() -> Iterator[Any]:
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            yield saver

    @contextlib.asynccontextmanager
    async def asynchronous() -> AsyncIterator[Any]:
        async with AsyncPostgresSaver.from_conn_string(url) as saver:
            await saver.setup()
            yield saver

    return blocking, asynchronous


def _candidates(workdir: Path) -> list[tuple[str, str, tuple[SyncSaver, AsyncSaver]]]:
    rows = [
        ("memory", "agentsessions", _ours("memory://bench-langgraph-graph")),
        ("memory", "InMemorySaver", _memory_peer()),
        ("sqlite", "agentsessions", _ours(f"sqlite:///{workdir / 'ours.db'}")),
        ("sqlite", "SqliteSaver / AsyncSqliteSaver", _sqlite_peer(workdir / "lg.db")),
    ]
    postgres = os.environ.get("AGENTSESSIONS_POSTGRES_URL")
    if postgres:
        rows.append(("postgres", "agentsessions", _ours(postgres)))
        rows.append(("postgres", "PostgresSaver / AsyncPostgresSaver", _postgres_peer(postgres)))
    return rows


def run(runs: int, rounds: int) -> list[tuple[str, str, dict[str, float]]]:
    """Per (engine, saver): the median over *rounds* of each cell's per-round median."""
    with tempfile.TemporaryDirectory() as workdir:
        candidates = _candidates(Path(workdir))
        per_round: dict[tuple[str, str], list[dict[str, float]]] = {
            (engine, name): [] for engine, name, _ in candidates
        }
        for round_index in range(rounds):
            shift = round_index % len(candidates)
            for engine, name, (blocking, asynchronous) in candidates[shift:] + candidates[:shift]:
                per_round[(engine, name)].append(_measure(blocking, asynchronous, runs))
    return [
        (engine, name, {cell: statistics.median(r[cell] for r in rounds_) for cell in CELLS})
        for (engine, name), rounds_ in per_round.items()
    ]


def table(results: list[tuple[str, str, dict[str, float]]]) -> str:
    """Markdown: per engine, our row, each peer's, and ours / theirs per cell."""
    header = "| engine | saver | " + " | ".join(f"{c} (ms)" for c in CELLS) + " |"
    lines = [header, "|---|---|" + "---|" * len(CELLS)]
    ours = {engine: cells for engine, name, cells in results if name == "agentsessions"}
    for engine, name, cells in results:
        lines.append(
            f"| {engine} | {name} | " + " | ".join(f"{cells[c]:.2f}" for c in CELLS) + " |"
        )
        if name != "agentsessions" and engine in ours:
            ratios = " | ".join(f"{ours[engine][c] / cells[c]:.2f}x" for c in CELLS)
            lines.append(f"| {engine} | ours / {name} | {ratios} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentsessions_bench._langgraph_graph")
    parser.add_argument("--runs", type=int, default=100, help="timed runs per cell")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, savers rotated")
    args = parser.parse_args(argv)
    print(table(run(args.runs, args.rounds)))


if __name__ == "__main__":
    main()
