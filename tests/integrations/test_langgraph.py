"""`AgentSessionsSaver` under LangGraph's own conformance suite and a real `StateGraph`,
on every backend.

The suite (``langgraph-checkpoint-conformance``) detects which capabilities the saver
implements and runs its tests of each; a capability it does not detect would count as
skipped, so the tests insist on all eight being detected and passed. The graph asks a
human for approval with ``interrupt()`` and is resumed by another process (on memory,
whose store lives in one process, by a second manager), with encryption at rest on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

if os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") != "1":  # CI: a missing extra must fail
    pytest.importorskip("langgraph.checkpoint.conformance", reason="needs the langgraph extra")

from agentsessions import (
    BackendUnavailableError,
    InvalidInputError,
    SessionExistsError,
    SessionManager,
    SessionTooLargeError,
    connect,
)
from agentsessions.integrations.langgraph import (
    AgentSessionsSaver,
    CheckpointConflictError,
    namespace_session_id,
)
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import CapabilityReport
from langgraph.types import Command

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import langgraph_graph  # noqa: E402  (the graph the other process imports too)


def assert_full_conformance(report: CapabilityReport) -> None:
    failures = {
        name: result.failures for name, result in report.results.items() if not result.passed
    }
    assert not failures, f"conformance failures: {failures}"
    assert {name for name, r in report.results.items() if r.detected} == {
        c.value for c in ALL_CAPABILITIES
    }
    assert report.passed_all_base()
    assert report.conformance_level() == "FULL"
    assert sum(r.tests_passed for r in report.results.values()) >= 81  # every test of 0.0.2


async def test_conformance_suite(manager: SessionManager) -> None:
    @checkpointer_test(name=f"agentsessions {manager.url}")
    async def factory() -> AsyncIterator[AgentSessionsSaver]:
        yield AgentSessionsSaver(manager)

    assert_full_conformance(await validate(factory))


@pytest.mark.slow  # the lowest-versions session runs the suite once, unencrypted
async def test_conformance_suite_encrypted(backend_url: str) -> None:
    ring = langgraph_graph.keyring(os.urandom(32).hex())
    async with connect(backend_url, encryption=ring) as manager:

        @checkpointer_test(name=f"agentsessions encrypted {manager.url}")
        async def factory() -> AsyncIterator[AgentSessionsSaver]:
            yield AgentSessionsSaver(manager)

        assert_full_conformance(await validate(factory))


def config(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


async def test_interrupt_resumed_by_another_process(backend_url: str) -> None:
    key_hex = os.urandom(32).hex()
    thread_id = f"approval-{uuid.uuid4().hex}"
    saver = AgentSessionsSaver.from_url(backend_url, encryption=langgraph_graph.keyring(key_hex))
    try:
        graph = langgraph_graph.build(saver)
        # The blocking API, as a script or a web view would run the graph.
        first = await asyncio.to_thread(graph.invoke, {"log": []}, config(thread_id))
        assert first["log"] == ["drafted"]
        [pending] = first["__interrupt__"]
        assert pending.value == {"question": "publish the draft?", "log": ["drafted"]}
        state = await asyncio.to_thread(graph.get_state, config(thread_id))
        assert state.next == ("approve",)
    finally:
        await asyncio.to_thread(saver.close)

    if backend_url.startswith("memory://"):  # one process holds the store: a new manager
        final = await langgraph_graph.resume(backend_url, thread_id, key_hex, "yes")
        shown = {"log": final["log"], "approved": final["approved"], "blob": final["blob"].hex()}
    else:
        script = HERE / "langgraph_graph.py"
        args = [sys.executable, str(script), backend_url, thread_id, key_hex, "yes"]
        done = await asyncio.to_thread(
            subprocess.run, args, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {
        "log": ["drafted", "answer:yes", "published"],
        "approved": True,
        "blob": b"\x00\xffraw".hex(),
    }

    # The history the resumed run wrote is the one this process reads, oldest last.
    async with AgentSessionsSaver.from_url(
        backend_url, encryption=langgraph_graph.keyring(key_hex)
    ) as reader:
        history = [t async for t in reader.alist(config(thread_id))]
        steps = [t.metadata["step"] for t in history]
        assert steps == sorted(steps, reverse=True)
        assert history[0].checkpoint["channel_values"]["log"][-1] == "published"
        latest = await reader.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.config == history[0].config
        # Stored JSON-safe: the event holds LangGraph's bytes as base64 text, decrypted.
        # (Writes of the last step may be stored after its checkpoint, or before it.)
        session = await reader.manager.get(thread_id)
        assert session is not None
        head = latest.config["configurable"]["checkpoint_id"]
        [event] = [
            e for e in session.events if e.author == "checkpoint" and e.content["id"] == head
        ]
        kind, data = event.content["checkpoint"]
        assert isinstance(kind, str)
        assert isinstance(data, str)


async def put_step(saver: AgentSessionsSaver, thread_id: str, parent: str | None) -> str:
    checkpoint = empty_checkpoint()
    stored = await saver.aput(
        config(thread_id, parent), checkpoint, {"source": "loop", "step": 1}, {}
    )
    return str(stored["configurable"]["checkpoint_id"])


async def test_two_writers_on_one_thread_never_fork(backend_url: str) -> None:
    thread_id = f"race-{uuid.uuid4().hex}"
    async with connect(backend_url) as first_manager, connect(backend_url) as second_manager:
        first, second = AgentSessionsSaver(first_manager), AgentSessionsSaver(second_manager)
        root = await put_step(first, thread_id, None)
        # Both read the thread, as two graph runs starting on it do.
        for saver in (first, second):
            read = await saver.aget_tuple(config(thread_id))
            assert read is not None
            assert read.config["configurable"]["checkpoint_id"] == root
        winner = await put_step(first, thread_id, root)
        with pytest.raises(CheckpointConflictError) as caught:
            await put_step(second, thread_id, root)
        assert caught.value.head_checkpoint_id == winner
        ids = [
            t.config["configurable"]["checkpoint_id"] async for t in first.alist(config(thread_id))
        ]
        assert ids == [winner, root]  # one chain: nothing of the loser was written

        # Two runs sharing one saver (tasks of one process): the same guarantee.
        both = await asyncio.gather(
            put_step(first, thread_id, winner),
            put_step(first, thread_id, winner),
            return_exceptions=True,
        )
        assert sum(isinstance(outcome, CheckpointConflictError) for outcome in both) == 1
        [landed] = [outcome for outcome in both if isinstance(outcome, str)]

        # A fresh thread that both read as empty: the second first checkpoint conflicts.
        fresh = f"race-new-{uuid.uuid4().hex}"
        assert await first.aget_tuple(config(fresh)) is None
        assert await second.aget_tuple(config(fresh)) is None
        await put_step(first, fresh, None)
        with pytest.raises(CheckpointConflictError):
            await put_step(second, fresh, None)

        # Time travel: a past checkpoint read as such forks from it, as LangGraph means.
        past = await second.aget_tuple(config(thread_id, root))
        assert past is not None
        forked = await put_step(second, thread_id, root)
        latest = await second.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == forked
        assert latest.parent_config is not None
        assert latest.parent_config["configurable"]["checkpoint_id"] == root
        assert landed != forked


async def test_concurrent_task_writes_all_land(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    thread_id = f"writes-{uuid.uuid4().hex}"
    head = await put_step(saver, thread_id, None)
    tasks = [f"task-{index}" for index in range(12)]
    await asyncio.gather(
        *(
            saver.aput_writes(config(thread_id, head), [("out", task), ("log", [task])], task)
            for task in tasks
        )
    )
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.pending_writes is not None
    assert sorted(w for w in latest.pending_writes if w[1] == "out") == sorted(
        (task, "out", task) for task in tasks
    )
    assert len(latest.pending_writes) == 2 * len(tasks)


async def test_latest_checkpoint_is_one_small_read(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    thread_id = f"long-{uuid.uuid4().hex}"
    parent = None
    for step in range(60):
        parent = await put_step(saver, thread_id, parent)
        await saver.aput_writes(config(thread_id, parent), [("x", step)], f"t{step}")
    calls: list[int | None] = []
    real_get = manager.get

    async def recording_get(session_id: str, **kwargs: Any) -> Any:
        calls.append(kwargs.get("last_events"))
        return await real_get(session_id, **kwargs)

    manager.get = recording_get  # type: ignore[method-assign]
    try:
        latest = await saver.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == parent
        assert latest.pending_writes == [("t59", "x", 59)]
        assert calls == [2]  # one read of the newest events, not the 120 stored
        # Many writes after the head: still bounded by them, never the history.
        for index in range(30):
            await saver.aput_writes(config(thread_id, parent), [("y", index)], f"u{index}")
        calls.clear()
        latest = await saver.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.pending_writes is not None
        assert len(latest.pending_writes) == 31
        assert calls == [2, 32]
        # The step's writes after that read: saves of the copy it left, no load at all.
        updates: list[str] = []
        real_update = manager.update

        async def recording_update(session_id: str, *args: Any, **kwargs: Any) -> Any:
            updates.append(session_id)
            return await real_update(session_id, *args, **kwargs)

        manager.update = recording_update  # type: ignore[method-assign]
        calls.clear()
        head = await put_step(saver, thread_id, parent)
        await saver.aput_writes(config(thread_id, head), [("z", 1)], "v")
        assert (calls, updates) == ([], [])
    finally:
        del manager.get
        with contextlib.suppress(AttributeError):
            del manager.update


async def test_bad_input_writes_nothing(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    with pytest.raises(InvalidInputError, match="thread_id"):
        await saver.aput({"configurable": {}}, empty_checkpoint(), {}, {})
    thread_id = f"bad-{uuid.uuid4().hex}"
    with pytest.raises(InvalidInputError, match="checkpoint_id"):
        await saver.aput_writes(config(thread_id), [("x", 1)], "t")
    with pytest.raises(InvalidInputError, match="strategy"):
        await saver.aprune([thread_id], strategy="everything")
    assert await manager.get(namespace_session_id(thread_id, "")) is None
    with pytest.raises(InvalidInputError, match="SessionManager"):
        AgentSessionsSaver("memory://")  # type: ignore[arg-type]


async def test_ttl_expires_threads() -> None:
    async with connect(f"memory://ttl-{uuid.uuid4().hex}", ttl=1) as manager:
        saver = AgentSessionsSaver(manager)
        thread_id = "short-lived"
        await put_step(saver, thread_id, None)
        assert await saver.aget_tuple(config(thread_id)) is not None
        time.sleep(1.2)  # noqa: ASYNC251 (the store's clock is the wall clock)
        assert await saver.aget_tuple(config(thread_id)) is None


async def test_copy_thread_refuses_a_target_with_checkpoints(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    source, target = f"src-{uuid.uuid4().hex}", f"dst-{uuid.uuid4().hex}"
    await put_step(saver, source, None)
    kept = await put_step(saver, target, None)
    with pytest.raises(SessionExistsError):
        await saver.acopy_thread(source, target)
    ids = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(config(target))]
    assert ids == [kept]


async def test_a_write_after_another_saver_deleted_the_thread(backend_url: str) -> None:
    thread_id = f"gone-{uuid.uuid4().hex}"
    async with connect(backend_url) as first_manager, connect(backend_url) as second_manager:
        first, second = AgentSessionsSaver(first_manager), AgentSessionsSaver(second_manager)
        old = await put_step(first, thread_id, None)  # first now holds the session's version
        await second.adelete_thread(thread_id)
        assert await second.aget_tuple(config(thread_id)) is None
        with pytest.raises(CheckpointConflictError):
            await put_step(first, thread_id, old)  # its parent is gone with the thread
        anew = await put_step(first, thread_id, None)
        latest = await second.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == anew
        assert latest.parent_config is None


async def test_writes_stored_before_their_checkpoint_are_pending(manager: SessionManager) -> None:
    # LangGraph's async durability may store a task's writes while the put of their
    # checkpoint is still in flight: they must still come back with it.
    saver = AgentSessionsSaver(manager)
    thread_id = f"early-{uuid.uuid4().hex}"
    first = await put_step(saver, thread_id, None)
    await saver.aput_writes(config(thread_id, first), [("a", 1)], "t1")
    checkpoint = empty_checkpoint()
    early_id = checkpoint["id"]
    await saver.aput_writes(config(thread_id, early_id), [("b", 2)], "t2")
    await saver.aput_writes(config(thread_id, first), [("a", 3)], "t3")
    stored = await saver.aput(config(thread_id, first), checkpoint, {"step": 2}, {})
    await saver.aput_writes(stored, [("c", 4)], "t4")
    for reader in (saver, AgentSessionsSaver(manager)):
        latest = await reader.aget_tuple(config(thread_id))
        assert latest is not None
        assert latest.config["configurable"]["checkpoint_id"] == early_id
        assert latest.pending_writes == [("t2", "b", 2), ("t4", "c", 4)]
    await saver.aprune([thread_id])
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.pending_writes == [("t2", "b", 2), ("t4", "c", 4)]
    assert [t.checkpoint["id"] async for t in saver.alist(config(thread_id))] == [early_id]


def _long_thread_ids() -> list[str]:
    # What users put in thread ids: URLs, composite keys, hashes; past our 255 limit.
    base = "https://example.com/tenants/acme/users/ada/conversations/" + "x" * 1000
    return [
        base[:1000],
        base[:999] + "y",  # the same first 999 characters: must not collide
        "lgtid:" + "0" * 64,  # looks like a mapped id: must not name one
        " ",  # blank, which LangGraph accepts
    ]


async def test_any_thread_id_langgraph_accepts(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    graph = langgraph_graph.build(saver)
    threads = [tid + uuid.uuid4().hex if len(tid) > 10 else tid for tid in _long_thread_ids()]
    threads[1] = threads[0][:-1] + "y"
    for thread_id in threads:
        first = await graph.ainvoke({"log": []}, config(thread_id))
        assert first["__interrupt__"], f"the graph did not pause on thread {thread_id[:40]!r}"
    for index, thread_id in enumerate(threads):
        final = await graph.ainvoke(Command(resume=f"yes-{index}"), config(thread_id))
        assert final["log"] == ["drafted", f"answer:yes-{index}", "discarded"], (
            f"thread {index} ({len(thread_id)} characters) resumed with another thread's "
            f"state: {final['log']}"
        )
        history = [t async for t in saver.alist(config(thread_id))]
        assert len(history) >= 4, f"thread {index} lost checkpoints: {len(history)}"
        assert {t.config["configurable"]["thread_id"] for t in history} == {thread_id}, (
            "listings must show the thread id as LangGraph gave it"
        )
    listed = {t.config["configurable"]["thread_id"] async for t in saver.alist(None)}
    assert set(threads) <= listed, "alist(None) must list every thread by its own id"
    # The blocking API and the thread operations take the same ids.
    state = await asyncio.to_thread(graph.get_state, config(threads[0]))
    assert state.values["log"][-1] == "discarded"
    copy = threads[0][:-3] + "cp" + uuid.uuid4().hex
    await saver.acopy_thread(threads[0], copy)
    assert [t async for t in saver.alist(config(copy))], "copy_thread lost a long thread"
    await saver.adelete_thread(threads[0])
    assert await saver.aget_tuple(config(threads[0])) is None
    assert await saver.aget_tuple(config(threads[1])) is not None, (
        "deleting one long thread erased another with the same first 999 characters"
    )


@contextlib.contextmanager
def recording_calls(manager: SessionManager) -> Iterator[list[str]]:
    """The manager's calls (by name) while the block runs."""
    calls: list[str] = []
    names = ("get", "create", "save", "update", "compact", "list_sessions")
    for name in names:
        real = getattr(manager, name)

        def recording(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        setattr(manager, name, recording)
    try:
        yield calls
    finally:
        for name in names:
            delattr(manager, name)


async def test_a_graph_run_is_at_most_one_write_per_checkpoint_call(
    manager: SessionManager,
) -> None:
    # LangGraph stores a step's checkpoint while the next step's writes arrive: two
    # writes of one session in flight at once. They must take turns (or share a save),
    # each save of what the last left, never a refused save and a reload.
    saver = AgentSessionsSaver(manager)
    graph = langgraph_graph.build(saver)
    puts: list[str] = []
    real_aput, real_aput_writes = saver.aput, saver.aput_writes

    async def counting_aput(*args: Any, **kwargs: Any) -> Any:
        puts.append("put")
        return await real_aput(*args, **kwargs)

    async def counting_aput_writes(*args: Any, **kwargs: Any) -> Any:
        puts.append("put_writes")
        return await real_aput_writes(*args, **kwargs)

    saver.aput, saver.aput_writes = counting_aput, counting_aput_writes  # type: ignore[method-assign]
    thread_id = f"run-{uuid.uuid4().hex}"
    with recording_calls(manager) as calls:
        first = await graph.ainvoke({"log": []}, config(thread_id))
    assert first["__interrupt__"]
    assert calls.count("get") == 1, f"expected one read (the new thread is absent): {calls}"
    assert calls.count("create") == 1, f"expected the new thread created once: {calls}"
    assert calls.count("update") == 0, f"expected no load-and-retry write: {calls}"
    assert 0 < calls.count("save") <= len(puts), (
        f"expected at most one save per put/put_writes ({len(puts)}: {puts}), found {calls}"
    )
    puts.clear()
    with recording_calls(manager) as calls:
        final = await graph.ainvoke(Command(resume="yes"), config(thread_id))
    assert final["log"] == ["drafted", "answer:yes", "published"]
    # Reads: the newest events, then (the paused checkpoint has several writes) as
    # many as the head's reach: never the history, never a load before a write.
    assert calls.count("get") <= 2 and calls.count("update") == 0, (
        f"expected at most two reads and no load-and-retry write when resuming: {calls}"
    )
    assert 0 < calls.count("save") <= len(puts), (
        f"expected at most one save per call of {puts}: {calls}"
    )


async def test_writes_queued_behind_a_write_share_its_save(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    thread_id = f"batch-{uuid.uuid4().hex}"
    head = await put_step(saver, thread_id, None)
    tasks = [f"task-{index}" for index in range(3)]
    with recording_calls(manager) as calls:
        *_, stored = await asyncio.gather(
            *(saver.aput_writes(config(thread_id, head), [("out", t)], t) for t in tasks),
            saver.aput(config(thread_id, head), empty_checkpoint(), {"step": 2}, {}),
        )
    assert calls == ["save"], f"expected the four writes in one save, found {calls}"
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == stored["configurable"]["checkpoint_id"]
    assert latest.parent_config is not None
    assert latest.parent_config["configurable"]["checkpoint_id"] == head
    earlier = await saver.aget_tuple(config(thread_id, head))
    assert earlier is not None
    assert sorted(earlier.pending_writes or []) == [(t, "out", t) for t in tasks]


async def test_a_write_refused_in_a_batch_fails_alone(manager: SessionManager) -> None:
    first, second = AgentSessionsSaver(manager), AgentSessionsSaver(manager)
    thread_id = f"batch-race-{uuid.uuid4().hex}"
    root = await put_step(first, thread_id, None)
    assert await second.aget_tuple(config(thread_id)) is not None
    winner = await put_step(second, thread_id, root)
    # first's held copy is stale now: the shared save is refused, and each write is
    # then judged alone against the stored thread.
    writes, put = await asyncio.gather(
        first.aput_writes(config(thread_id, root), [("out", "late")], "late-task"),
        first.aput(config(thread_id, root), empty_checkpoint(), {"step": 2}, {}),
        return_exceptions=True,
    )
    assert writes is None, f"the task's writes should have landed: {writes!r}"
    assert isinstance(put, CheckpointConflictError), f"expected a conflict, got {put!r}"
    assert put.head_checkpoint_id == winner
    latest = await first.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == winner
    at_root = await first.aget_tuple(config(thread_id, root))
    assert at_root is not None
    assert at_root.pending_writes == [("late-task", "out", "late")]


async def test_a_lost_reply_fails_every_write_of_its_batch(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    thread_id = f"batch-lost-{uuid.uuid4().hex}"
    head = await put_step(saver, thread_id, None)
    real_save = manager.save
    failures = [
        BackendUnavailableError("memory://test", "connection lost before the save was sent")
    ]

    async def failing_save(session: Any) -> None:
        if failures:
            raise failures.pop()
        await real_save(session)

    manager.save = failing_save  # type: ignore[method-assign]
    try:
        outcomes = await asyncio.gather(
            saver.aput_writes(config(thread_id, head), [("out", 1)], "t1"),
            saver.aput(config(thread_id, head), empty_checkpoint(), {"step": 2}, {}),
            return_exceptions=True,
        )
    finally:
        del manager.save
    assert all(isinstance(o, BackendUnavailableError) for o in outcomes), outcomes
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.config["configurable"]["checkpoint_id"] == head
    assert latest.pending_writes == []
    # Sent again, both land.
    await saver.aput_writes(config(thread_id, head), [("out", 1)], "t1")
    stored = await saver.aput(config(thread_id, head), empty_checkpoint(), {"step": 2}, {})
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.config == stored


async def test_a_write_too_large_fails_alone_in_its_batch(manager: SessionManager) -> None:
    saver = AgentSessionsSaver(manager)
    thread_id = f"batch-large-{uuid.uuid4().hex}"
    head = await put_step(saver, thread_id, None)
    real_save = manager.save

    async def refusing_save(session: Any) -> None:
        # The backend's refusal of one event, as a size limit would refuse it.
        if any(getattr(e, "content", {}).get("task_id") == "huge" for e in session.events):
            raise SessionTooLargeError("events[0]", 2_000_000, 1_000_000)
        await real_save(session)

    manager.save = refusing_save  # type: ignore[method-assign]
    try:
        small, huge, put = await asyncio.gather(
            saver.aput_writes(config(thread_id, head), [("out", 1)], "small"),
            saver.aput_writes(config(thread_id, head), [("out", 2)], "huge"),
            saver.aput(config(thread_id, head), empty_checkpoint(), {"step": 2}, {}),
            return_exceptions=True,
        )
    finally:
        del manager.save
    assert small is None, f"the small write should have landed: {small!r}"
    assert isinstance(huge, SessionTooLargeError), f"expected the refusal, got {huge!r}"
    assert isinstance(put, dict), f"the checkpoint should have landed: {put!r}"
    at_head = await saver.aget_tuple(config(thread_id, head))
    assert at_head is not None
    assert at_head.pending_writes == [("small", "out", 1)]
    latest = await saver.aget_tuple(config(thread_id))
    assert latest is not None
    assert latest.config == put
