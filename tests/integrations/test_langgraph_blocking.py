"""`AgentSessionsSaver`'s blocking methods, through LangGraph's own blocking ``invoke`` on
every backend: the calling thread runs the saver's loop itself (no thread hop per call),
any number of LangGraph's threads at once, and close releases what the loop held."""

from __future__ import annotations

import concurrent.futures
import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("langgraph.checkpoint.conformance", reason="needs the langgraph extra")

from agentsessions import SessionManager, connect
from agentsessions.integrations.langgraph import AgentSessionsSaver
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    create_checkpoint,
    empty_checkpoint,
)
from langgraph.types import Command

sys.path.insert(0, str(Path(__file__).parent))
import langgraph_graph

#: Bound on every wait for a graph run: a broken saver fails the test, never hangs it.
RUN_TIMEOUT = 120.0


def config(thread_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id}}


def test_blocking_graphs_pause_and_resume_on_every_backend(backend_url: str) -> None:
    saver = AgentSessionsSaver.from_url(backend_url)
    graph = langgraph_graph.build(saver)

    def approve_one(index: int) -> tuple[list[str], int]:
        thread_id = f"blocking-{index}-{uuid.uuid4().hex}"
        first = graph.invoke({"log": []}, config(thread_id))
        assert first["__interrupt__"], f"thread {index}: the graph did not pause"
        final = graph.invoke(Command(resume="yes"), config(thread_id))
        history = list(graph.get_state_history(config(thread_id)))
        return final["log"], len(history)

    try:
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(approve_one, index) for index in range(16)]
            results = [future.result(timeout=RUN_TIMEOUT) for future in futures]
    finally:
        saver.close()
    for index, (log, checkpoints) in enumerate(results):
        assert log == ["drafted", "answer:yes", "published"], (
            f"thread {index}: expected the approved run's log, found {log}"
        )
        assert checkpoints >= 5, f"thread {index}: expected >= 5 checkpoints, found {checkpoints}"


_caller = threading.local()


class ThreadChecking(AgentSessionsSaver):
    """Records each async twin that ran in another thread than its blocking caller."""

    def __init__(self, manager: SessionManager) -> None:
        super().__init__(manager)
        self.hops: list[str] = []

    def _from(self, name: str) -> None:
        if getattr(_caller, "ident", None) != threading.get_ident():
            self.hops.append(name)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        _caller.ident = threading.get_ident()
        return super().get_tuple(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        self._from("get_tuple")
        return await super().aget_tuple(config)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        _caller.ident = threading.get_ident()
        return super().put(config, checkpoint, metadata, new_versions)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        self._from("put")
        return await super().aput(config, checkpoint, metadata, new_versions)

    def put_writes(
        self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        _caller.ident = threading.get_ident()
        super().put_writes(config, writes, task_id, task_path)

    async def aput_writes(
        self, config: RunnableConfig, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        self._from("put_writes")
        await super().aput_writes(config, writes, task_id, task_path)


def test_a_blocking_call_runs_in_its_callers_thread(backend_url: str) -> None:
    manager = connect(backend_url)
    saver = ThreadChecking(manager)

    def steps(count: int) -> None:
        thread = config(f"own-thread-{uuid.uuid4().hex}")
        checkpoint = empty_checkpoint()
        stored = saver.put(thread, checkpoint, {"source": "input", "step": -1}, {})
        for step in range(count):
            latest = saver.get_tuple(thread)
            assert latest is not None and latest.checkpoint["id"] == checkpoint["id"]
            checkpoint = create_checkpoint(checkpoint, None, step)
            stored = saver.put(stored, checkpoint, {"source": "loop", "step": step}, {})
            saver.put_writes(stored, [("log", [f"step {step}"])], f"task-{step}")

    try:
        steps(5)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:  # another thread, in turn
            pool.submit(steps, 5).result(timeout=RUN_TIMEOUT)
    finally:
        saver.close()
        saver._run(manager.close())
    assert not saver.hops, (
        f"expected every blocking call to run in its caller's thread; these crossed to "
        f"another: {saver.hops}"
    )


async def test_blocking_calls_from_async_code_are_served(manager: SessionManager) -> None:
    # Not the way to call it (it blocks the caller's loop), but it must not fail.
    saver = AgentSessionsSaver(manager)
    thread = config(f"from-async-{uuid.uuid4().hex}")
    stored = saver.put(thread, empty_checkpoint(), {"source": "input", "step": -1}, {})
    latest = saver.get_tuple(thread)
    assert latest is not None and latest.config == stored
    saver.close()
    assert await saver.aget_tuple(thread) is not None, "close must not close the manager"
