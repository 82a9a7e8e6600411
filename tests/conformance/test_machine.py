"""The kit's state machine itself: sequences it once got wrong, replayed step by step."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentsessions import MemorySessionManager, SessionManager, connect
from agentsessions_conformance import FrozenClock, Inventory, memory_inventory
from agentsessions_conformance._machine import (
    TTL,
    MachineConfig,
    _machine,
    _StorageLeft,
    run_machine,
)
from agentsessions_sqlite import SQLiteSessionManager
from agentsessions_sqlite._conformance import sqlite_inventory

from conformance.broken import TokenIgnoringSaveManager
from conformance.broken_machine import DeleteOfExpiredOrphansEventsManager


async def _inventory(manager: SessionManager, session_id: str) -> Inventory:
    """The storage hook the machine's storage check calls, for the backends used here."""
    if isinstance(manager, SQLiteSessionManager):
        return await sqlite_inventory(manager, session_id)
    return memory_inventory(manager, session_id)


def _config(subject: SessionManager, *, ttl: bool) -> MachineConfig:
    """A machine's config over *subject* alone, on a fresh `FrozenClock`, with the storage
    check on (call it on the loop the runs will use)."""
    clock = FrozenClock()
    subject.clock = clock
    return MachineConfig(
        asyncio.get_running_loop(),
        [subject],
        clock,
        ttl=ttl,
        stop=threading.Event(),
        stored=_inventory,
    )


async def test_a_partial_copy_of_an_earlier_life_may_be_refused_as_partial() -> None:
    """A copy loaded with last_events, its id deleted and created again, then edited in a
    way a partial copy cannot save: the manager refuses the edit (PartialSessionError)
    before the backend is asked, and the machine must accept that instead of insisting
    on a conflict. Hypothesis found this sequence; the machine failed it."""
    async with connect("memory://") as subject:
        config = _config(subject, ttl=False)

        def replay() -> None:
            state: Any = _machine(config)()  # its rules are made by decorators
            try:
                state.seed(seeds=[("A", None, 1)])
                state.everything_agrees()
                state.storage_agrees()
                state.get(last_events=1, session_id="A", user=None, via=0)
                state.everything_agrees()
                state.recreate(pick=0, via=0)
                state.everything_agrees()
                state.storage_agrees()
                state.save(edit="rewrite", pick=1, via=0)
                state.everything_agrees()
                state.storage_agrees()
            finally:
                state.teardown()

        await asyncio.wait_for(asyncio.to_thread(replay), 60)


def _memory_url() -> str:
    return f"memory://machine-{uuid.uuid4().hex}"


def _sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'kit.db'}"


def _replay(subject: SessionManager, steps: Callable[[Any], None], *, ttl: bool = True) -> None:
    """Run *steps* on a fresh machine over *subject*, on a loop of its own."""

    async def run() -> None:
        config = _config(subject, ttl=ttl)

        def replay() -> None:
            state: Any = _machine(config)()
            try:
                steps(state)
            finally:
                state.teardown()

        try:
            await asyncio.wait_for(asyncio.to_thread(replay), 60)
        finally:
            await subject.close()

    asyncio.run(run())


def _checked(state: Any) -> None:
    """The checks after every step: reads, then raw storage."""
    state.everything_agrees()
    state.storage_agrees()


def _lost_replies(state: Any) -> None:
    """Every lost-reply rule once, landed and not, then the checks after each step."""
    state.seed(seeds=[("a", "u1", 3), ("b*", None, 2)])
    _checked(state)
    for landed in (True, False):
        state.get(session_id="a", user=None, last_events=None, via=0)  # held at pick 0
        _checked(state)
        state.save_reply_lost(pick=0, edit="append", landed=landed, via=0)
        _checked(state)
        for op in ("compact", "create", "restore", "delete"):
            state.write_reply_lost(op=op, session_id="{c}", user="u2", pick=1, landed=landed, via=0)
            _checked(state)
        for new in ("A", "b*"):  # a fork onto a fresh id, then onto a live one (refused)
            state.branch_reply_lost(
                op="fork", source="a", new=new, cut=1, pick=0, archive=False, landed=landed, via=0
            )
            _checked(state)
        state.delete(session_id="A", user=None, via=0)
        _checked(state)
        state.branch_reply_lost(
            op="rewind", source="a", new="a", cut=0, pick=0, archive=landed, landed=landed, via=0
        )
        _checked(state)
        for create in (True, False):
            for session_id in ("a", " a"):  # a live session, and an absent one
                state.update_reply_lost(
                    session_id=session_id, user=None, create=create, landed=landed, via=0
                )
                _checked(state)
    state.restore(session_id="A", user=None, count=2, version=7, via=0)
    _checked(state)
    state.get(session_id="a", user=None, last_events=None, via=0)
    state.save(pick=0, edit="append", via=0)
    _checked(state)


def test_lost_reply_rules_agree_on_the_reference() -> None:
    """The machine's lost-reply and restore rules, and its storage check after each,
    hold on the reference backend itself."""
    _replay(MemorySessionManager.from_url(_memory_url(), ttl=TTL), _lost_replies)


def test_lost_reply_rules_agree_on_sqlite(tmp_path: Path) -> None:
    """The same on SQLite: its own `_fork`, `_rewind` and token checks, and its storage
    read by its inventory."""
    _replay(SQLiteSessionManager.from_url(_sqlite_url(tmp_path), ttl=TTL), _lost_replies)


def test_lost_reply_rule_catches_a_backend_that_ignores_its_tokens() -> None:
    """A save whose reply was lost and that is saved again lands twice on a backend that
    does not recognise its own token: the machine's rule fails on it."""
    subject = TokenIgnoringSaveManager.from_url(_memory_url(), ttl=TTL)
    with pytest.raises(AssertionError, match="reply lost=True"):
        _replay(subject, _lost_replies)


def _orphaning(state: Any) -> None:
    """Sessions with events, past their ttl, then delete() of one."""
    state.seed(seeds=[("a", "u1", 3), ("b*", "u2", 1)])
    _checked(state)
    state.advance_clock(seconds=TTL + 1)
    _checked(state)
    state.delete(session_id="a", user=None, via=0)
    state.everything_agrees()  # every read agrees: only storage shows the orphans
    state.storage_agrees()


def test_storage_check_passes_the_real_delete_of_an_expired_session(tmp_path: Path) -> None:
    """delete() of an expired session erases its rows on SQLite: the check holds."""
    _replay(SQLiteSessionManager.from_url(_sqlite_url(tmp_path), ttl=TTL), _orphaning)


def test_storage_check_catches_orphans_no_read_shows(tmp_path: Path) -> None:
    """A delete() of an expired session that leaves its events behind agrees with the
    model on every read; the storage check after the step fails on it, naming the step."""
    subject = DeleteOfExpiredOrphansEventsManager.from_url(_sqlite_url(tmp_path), ttl=TTL)
    expected = (
        r"after delete\(session_id='a', user=None, via=0\): storage of id 'a' must be "
        r"erased .*found Inventory\(records=0, events=\[0, 1, 2\]"
    )
    with pytest.raises(AssertionError, match=expected):
        _replay(subject, _orphaning)


def test_leftovers_fail_before_the_next_run_with_what_the_run_before_did(
    tmp_path: Path,
) -> None:
    """A run that ends with an expired session leaves orphans when the next run deletes
    the pool (on the broken backend): that run fails before its first step, with the
    steps of the run before, and not as an example Hypothesis could shrink."""
    subject = DeleteOfExpiredOrphansEventsManager.from_url(_sqlite_url(tmp_path), ttl=TTL)

    async def run() -> None:
        config = _config(subject, ttl=True)

        def replay() -> None:
            state: Any = _machine(config)()
            try:
                state.seed(seeds=[("{c}", "u2", 2)])
                state.advance_clock(seconds=TTL + 1)
                _checked(state)
            finally:
                state.teardown()
            _machine(config)()  # deletes the pool, then looks at storage

        try:
            await asyncio.wait_for(asyncio.to_thread(replay), 60)
        finally:
            await subject.close()

    expected = (
        r"after the start of the run, once delete\(\) of every id of the pool returned: "
        r"storage of id '\{c\}' must be erased .*the run before took the steps: "
        r"seed\(seeds=\[\('\{c\}', 'u2', 2\)\]\); advance_clock\(seconds=101\.0\)"
    )
    with pytest.raises(_StorageLeft, match=expected):
        asyncio.run(run())


def test_the_machine_catches_the_broken_delete_unshrunk_and_unflaky(tmp_path: Path) -> None:
    """The whole machine, as the clause runs it, on the broken backend: it fails with the
    storage check's message (an AssertionError, not Hypothesis's flakiness errors)."""
    subject = DeleteOfExpiredOrphansEventsManager.from_url(_sqlite_url(tmp_path), ttl=TTL)

    async def run() -> None:
        config = _config(subject, ttl=True)
        try:
            await asyncio.wait_for(asyncio.to_thread(run_machine, config, 50, 20, 2.0, True), 60)
        finally:
            config.stop.set()
            await subject.close()

    with pytest.raises(AssertionError, match=r"storage of id .* must be erased"):
        asyncio.run(run())


def test_storage_check_catches_an_orphan_of_a_live_session() -> None:
    """A live session whose storage holds an event more than the model's (an orphan of
    an earlier life that reads skip) fails the storage check."""

    def steps(state: Any) -> None:
        state.seed(seeds=[("a", None, 2)])
        _checked(state)
        state.create(session_id="A", user=None, state=None, via=0)
        stored = subject._store.spaces[subject.options.namespace]["A"]
        stored.events.append(stored.events[0] if stored.events else "{}")  # hidden orphan
        with pytest.raises(
            AssertionError,
            match=r"after create\(session_id='A'.*1 record, no events .*events=\[0\]",
        ):
            state.storage_agrees()

    subject = MemorySessionManager.from_url(_memory_url(), ttl=TTL)
    _replay(subject, steps)
