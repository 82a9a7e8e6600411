"""Group commit in update(): concurrent calls of one manager on one session share saves,
and each call still gets its own outcome (its fn's error, its retries, its deadline)."""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from datetime import datetime
from typing import Any

import pytest
from agentsessions import (
    BackendLockedError,
    BackendReadOnlyError,
    BackendTimeoutError,
    InvalidInputError,
    MemorySessionManager,
    Session,
    SessionConflictError,
    SessionSerializationError,
    _grouping,
)
from agentsessions.backend import SaveRequest


class Counting(MemorySessionManager):
    """The memory backend, counting saves; each save yields to the loop first, as a
    server round trip would, so that calls made meanwhile find one in flight."""

    def __init__(self, url: str = "memory://", options: Any = None) -> None:
        super().__init__(url, options)
        self.saves = 0
        self.refuse_writes = False
        self.locked = False
        self.attempts = 0  # saves sent, landed or not

    async def _save(self, request: SaveRequest, now: datetime) -> None:
        await asyncio.sleep(0.001)
        self.attempts += 1
        if self.refuse_writes:
            raise BackendReadOnlyError(self.url, "a standby")
        if self.locked:
            raise self._locked_out(0.5, "another process holds the write lock")
        await super()._save(request, now)
        self.saves += 1  # saves that landed


def _shared_url() -> str:
    return f"memory://groups-{uuid.uuid4().hex}"


def _appender(label: str, seen: list[str] | None = None) -> Any:
    def add(session: Session) -> None:
        if seen is not None:
            seen.append(label)
        session.add_event("user", label)

    return add


async def test_concurrent_calls_land_in_call_order_with_fewer_saves() -> None:
    async with Counting() as manager:
        await manager.create("s", state={"n": 0})

        def step(i: int) -> Any:
            def fn(session: Session) -> None:
                # Each fn sees what the earlier ones did, as if they ran one by one.
                assert session.state["n"] == len(session.events)
                session.state["n"] += 1
                session.add_event("user", i)

            return fn

        results = await asyncio.gather(*(manager.update("s", step(i)) for i in range(30)))
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == list(range(30))
        assert stored.state == {"n": 30}
        assert manager.saves == 2  # the first alone, the 29 that waited for it together
        assert stored.version == 3
        assert all(i in [e.content for e in done.events] for i, done in enumerate(results))
        assert len({id(done) for done in results}) == 30  # a copy of its own for each


async def test_a_failing_fn_fails_only_its_call_and_writes_nothing_of_it() -> None:
    async with Counting() as manager:
        await manager.create("s")
        runs: list[int] = []

        def fn(i: int) -> Any:
            def apply(session: Session) -> None:
                runs.append(i)
                session.add_event("user", i)
                if i == 3:
                    session.state["half done"] = True
                    raise KeyError("boom")

            return apply

        outcomes = await asyncio.gather(
            *(manager.update("s", fn(i)) for i in range(6)), return_exceptions=True
        )
        assert isinstance(outcomes[3], KeyError)
        assert all(isinstance(o, Session) for i, o in enumerate(outcomes) if i != 3)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == [0, 1, 2, 4, 5]
        assert stored.state == {}
        # The group of 1..5 was applied again without 3, on a fresh copy.
        assert runs == [0, 1, 2, 3, 1, 2, 4, 5]


async def test_the_leaders_failing_fn_hands_the_group_on() -> None:
    async with Counting() as manager:
        await manager.create("s")
        first = manager.update("s", _appender("first"))
        started = asyncio.ensure_future(first)
        await asyncio.sleep(0)  # "first" is in flight: the next ones wait for it

        def fail(session: Session) -> None:
            session.add_event("user", "never")
            raise RuntimeError("leader fails")

        outcomes = await asyncio.gather(
            manager.update("s", fail),
            manager.update("s", _appender("a")),
            manager.update("s", _appender("b")),
            return_exceptions=True,
        )
        await started
        assert isinstance(outcomes[0], RuntimeError)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["first", "a", "b"]


async def test_a_conflict_with_another_manager_retries_the_group_on_fresh_data() -> None:
    url = _shared_url()
    async with Counting(url) as manager, Counting(url) as rival:
        await manager.create("s", state={"n": 0})
        interfered = False
        runs: list[str] = []

        async def meddle(session: Session) -> None:
            nonlocal interfered
            runs.append("meddle")
            if not interfered:
                interfered = True
                await rival.update("s", _appender("rival"))
            session.add_event("user", "meddle")

        def count(label: str) -> Any:
            def fn(session: Session) -> None:
                runs.append(label)
                session.state["n"] += 1
                session.add_event("user", label)

            return fn

        starter = asyncio.ensure_future(manager.update("s", count("lead")))
        await asyncio.sleep(0)
        await asyncio.gather(manager.update("s", meddle), manager.update("s", count("x")), starter)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["lead", "rival", "meddle", "x"]
        assert stored.state == {"n": 2}
        # The group (meddle, x) lost its race to the rival and ran again, whole.
        assert runs == ["lead", "meddle", "x", "meddle", "x"]


async def test_each_call_counts_its_own_retries() -> None:
    url = _shared_url()
    async with Counting(url) as manager, Counting(url) as rival:
        await manager.create("s")
        starter = asyncio.ensure_future(manager.update("s", _appender("lead")))
        await asyncio.sleep(0)

        async def meddle(session: Session) -> None:
            # Every attempt of the group loses to a rival save, twice in a row.
            if len([e for e in session.events if e.author == "rival"]) < 2:
                await rival.update("s", lambda s: s.add_event("rival", "r"))
            session.add_event("user", "meddle")

        outcomes = await asyncio.gather(
            manager.update("s", meddle, retries=5),
            manager.update("s", _appender("impatient"), retries=0),
            manager.update("s", _appender("patient"), retries=5),
            starter,
            return_exceptions=True,
        )
        assert isinstance(outcomes[1], SessionConflictError)
        assert isinstance(outcomes[0], Session) and isinstance(outcomes[2], Session)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["lead", "r", "r", "meddle", "patient"]


async def test_a_refused_change_is_tried_alone_and_fails_only_its_call() -> None:
    async with Counting() as manager:
        await manager.create("s")
        starter = asyncio.ensure_future(manager.update("s", _appender("lead")))
        await asyncio.sleep(0)

        def unstorable(session: Session) -> None:
            session.state["bad"] = {1, 2}  # not JSON: the save refuses it

        outcomes = await asyncio.gather(
            manager.update("s", _appender("a")),
            manager.update("s", unstorable),
            manager.update("s", _appender("b")),
            starter,
            return_exceptions=True,
        )
        assert isinstance(outcomes[1], SessionSerializationError)
        assert isinstance(outcomes[0], Session) and isinstance(outcomes[2], Session)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["lead", "a", "b"]
        assert stored.state == {}


async def test_read_only_fails_every_call_of_the_group_at_once() -> None:
    async with Counting() as manager:
        await manager.create("s")
        manager.refuse_writes = True
        outcomes = await asyncio.gather(
            *(manager.update("s", _appender(str(i))) for i in range(4)), return_exceptions=True
        )
        assert all(isinstance(o, BackendReadOnlyError) for o in outcomes), outcomes
        manager.refuse_writes = False
        assert (await manager.get("s")).events == []


@pytest.mark.parametrize("group", [True, False])
async def test_a_lock_held_elsewhere_fails_update_at_once(group: bool) -> None:
    """BackendLockedError means nothing was written: update() raises it after one save,
    instead of re-sending it until its deadline as it would an unknown outcome."""
    async with Counting() as manager:
        await manager.create("s")
        manager.locked = True
        calls = [manager.update("s", _appender(str(i)), group=group) for i in range(3)]
        outcomes = await asyncio.gather(*calls, return_exceptions=True)
        assert all(isinstance(o, BackendLockedError) for o in outcomes), outcomes
        assert "update() gave up after waiting 0.5 s for a lock" in str(outcomes[0])
        assert manager.attempts <= 3  # one save per group (or per call), never re-sent
        manager.locked = False
        assert (await manager.get("s")).events == []


async def test_a_waiting_call_cancelled_is_never_applied() -> None:
    async with Counting() as manager:
        await manager.create("s")
        seen: list[str] = []
        starter = asyncio.ensure_future(manager.update("s", _appender("lead", seen)))
        await asyncio.sleep(0)
        doomed = asyncio.ensure_future(manager.update("s", _appender("doomed", seen)))
        kept = asyncio.ensure_future(manager.update("s", _appender("kept", seen)))
        await asyncio.sleep(0)
        doomed.cancel()
        await asyncio.gather(starter, kept)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert seen == ["lead", "kept"]
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["lead", "kept"]


async def test_a_cancelled_call_told_to_lead_hands_the_group_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Counting() as manager:
        await manager.create("s")
        starter = asyncio.ensure_future(manager.update("s", _appender("lead")))
        await asyncio.sleep(0)
        doomed = asyncio.ensure_future(manager.update("s", _appender("doomed")))
        kept = asyncio.ensure_future(manager.update("s", _appender("kept")))
        await asyncio.sleep(0)
        hand_on = _grouping._hand_on

        def then_cancel(*args: Any) -> None:
            hand_on(*args)  # "doomed" is told to lead ...
            doomed.cancel()  # ... and cancelled before it gets to run

        monkeypatch.setattr(_grouping, "_hand_on", then_cancel)
        await starter
        monkeypatch.setattr(_grouping, "_hand_on", hand_on)
        await asyncio.wait_for(kept, 5)
        with pytest.raises(asyncio.CancelledError):
            await doomed
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["lead", "kept"]
        assert not manager._lanes  # nothing left behind


async def test_a_group_whose_save_outlives_its_leader_reports_it_unknown() -> None:
    async with Counting() as manager:
        await manager.create("s")
        real = manager._save
        sending = asyncio.Event()

        async def slow_for_groups(request: SaveRequest, now: datetime) -> None:
            if len(request.new_events) > 1:
                sending.set()
                await asyncio.sleep(30)  # the group's save has not answered yet
            await real(request, now)

        manager._save = slow_for_groups  # type: ignore[method-assign]
        starter = asyncio.ensure_future(manager.update("s", _appender("lead")))
        await asyncio.sleep(0)
        leader = asyncio.ensure_future(manager.update("s", _appender("a")))
        follower = asyncio.ensure_future(manager.update("s", _appender("b")))
        await starter
        await asyncio.wait_for(sending.wait(), 5)
        leader.cancel()  # the call whose save carries "b" ends before the answer
        with pytest.raises(asyncio.CancelledError):
            await leader
        with pytest.raises(BackendTimeoutError, match="stored once or not at all"):
            await asyncio.wait_for(follower, 5)
        assert not manager._lanes


async def test_update_from_inside_fn_on_the_same_session_does_not_wait_for_itself() -> None:
    async with Counting() as manager:
        await manager.create("s")

        async def nested(session: Session) -> None:
            if not session.events:
                await manager.update("s", _appender("inner"))
            session.add_event("user", "outer")

        await asyncio.wait_for(manager.update("s", nested), 5)
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["inner", "outer"]


CALLER: contextvars.ContextVar[str] = contextvars.ContextVar("caller", default="none")


async def test_each_fn_runs_under_its_callers_context_variables() -> None:
    async with Counting() as manager:
        await manager.create("s")
        seen: dict[str, str] = {}

        async def call(label: str, asynchronous: bool) -> None:
            CALLER.set(label)

            def record(session: Session) -> None:
                seen[label] = CALLER.get()
                session.add_event("user", label)

            async def record_later(session: Session) -> None:
                await asyncio.sleep(0)
                record(session)

            await manager.update("s", record_later if asynchronous else record)

        labels = [f"c{i}" for i in range(8)]
        await asyncio.gather(*(call(label, i % 2 == 0) for i, label in enumerate(labels)))
        assert manager.saves == 2  # grouped: most fns ran in the leader's task
        assert seen == {label: label for label in labels}


async def test_a_waiting_calls_fn_may_update_its_own_session_without_waiting() -> None:
    async with Counting() as manager:
        await manager.create("s")

        async def nested(session: Session) -> None:
            if not any(e.content == "inner" for e in session.events):
                await manager.update("s", _appender("inner"))
            session.add_event("user", "outer")

        # The second call waits behind the first and is applied by the next leader:
        # its nested update() must still run alone instead of waiting for its group.
        await asyncio.wait_for(
            asyncio.gather(manager.update("s", _appender("first")), manager.update("s", nested)),
            5,
        )
        stored = await manager.get("s")
        assert [e.content for e in stored.events] == ["first", "inner", "outer"]


async def test_group_false_races_like_a_separate_writer() -> None:
    async with Counting() as manager:
        await manager.create("s")
        attempts: list[str] = []

        def fn(i: int) -> Any:
            def add(session: Session) -> None:
                attempts.append(str(i))
                session.add_event("user", i)

            return add

        await asyncio.gather(*(manager.update("s", fn(i), group=False) for i in range(5)))
        stored = await manager.get("s")
        assert sorted(e.content for e in stored.events) == list(range(5))
        assert manager.saves == 5 and len(attempts) > 5  # every call saved; some lost races


@pytest.mark.parametrize("retries", [-1, 1.5, "3", None])
async def test_update_rejects_bad_retries(retries: Any) -> None:
    async with Counting() as manager:
        await manager.create("s")
        with pytest.raises(InvalidInputError, match="retries"):
            await manager.update("s", _appender("x"), retries=retries)
        assert (await manager.get("s")).version == 1
