"""The model-based clause: a Hypothesis state machine with the memory backend as the model.

Every rule performs one operation of the contract on the backend under test and on a
reference `MemorySessionManager`, both on the kit's `FrozenClock`, and asserts that
both gave the same result or raised the same error; after every step every id of the
small pool is read back from both and both full listings are compared, and the raw
storage of every id (the suite's storage hook, `MachineConfig.stored`) is held to what
the model stores: nothing of an id the model holds nothing of, one record, its events
at exactly their positions and its archive for a live session (and nothing of any id
before a run's first step, once the pool is deleted). A difference fails with the step
sequence Hypothesis shrank it to, its message naming the step it followed.

The adopter's manager lives on pytest-asyncio's event loop, and Hypothesis drives a
state machine synchronously, so the machine runs in a worker thread and hands each
operation to the loop (`asyncio.run_coroutine_threadsafe`), with a bounded wait.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any, TypeVar

from agentsessions import (
    BackendUnavailableError,
    Event,
    MemorySessionManager,
    PartialSessionError,
    Session,
    SessionConflictError,
    SessionError,
    SessionManager,
    SessionSummary,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ._clock import FrozenClock
from ._faults import lost_replies
from ._inventory import Inventory

__all__ = ["MachineConfig", "run_machine"]

T = TypeVar("T")
#: The storage hook: what storage holds for a session id, read past the manager.
StorageHook = Callable[[SessionManager, str], Awaitable[Inventory]]

#: Ids that collide only if a backend mangles them, and users that own them.
IDS = ("a", "A", "a:b", " a", "b*", "{c}")
USERS = (None, "u1", "u2")
TTL = 100.0
#: Most copies a run holds for later saves (stale ones included).
MAX_HELD = 6
STEP_WAIT = 30.0


class MachineConfig:
    """What the runs share: the managers under test (one store, emptied of the id pool
    before each run), the loop they live on, the clock, the stop flag, and *stored*,
    the storage hook (the suite's checked `raw_inventory`), which the machine calls on
    the loop for every id of the pool after every step; without it storage is not
    looked at."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        subjects: list[SessionManager],
        clock: FrozenClock,
        ttl: bool,
        stop: threading.Event,
        stored: StorageHook | None = None,
    ) -> None:
        self.loop = loop
        self.subjects = subjects
        self.clock = clock
        self.ttl = ttl
        self.stop = stop
        self.stored = stored
        #: The first failure of the storage check, with the steps of its run, and the
        #: steps of the last run that ended: what a run that starts on leftovers tells.
        self.leaked: str | None = None
        self.last_run = "none (this is the first run)"
        #: Set when a run started on storage left by an earlier one (`_StorageLeft`).
        self.left: str | None = None
        self.compaction = subjects[0].capabilities.compaction
        self.branching = subjects[0].capabilities.branching

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        if self.stop.is_set():
            coro.close()
            raise AssertionError("the state machine was stopped (time limit)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(STEP_WAIT)


def _outcome(result: Any) -> Any:
    if isinstance(result, Session):
        return ("session", result.model_dump())
    if isinstance(result, list) and result and isinstance(result[0], SessionSummary):
        return ("summaries", [asdict(item) for item in result])
    return ("value", result)


async def _attempt(call: Coroutine[Any, Any, Any]) -> tuple[str, Any]:
    try:
        return "ok", await call
    except SessionError as exc:
        return "raised", type(exc)


async def _forget(manager: SessionManager) -> None:
    for session_id in IDS:
        await manager.delete(session_id)


def _differing(got: Session, want: Session) -> str:
    """The fields in which the backend's copy and the model's differ, for a failure message."""
    mine, model = got.model_dump(), want.model_dump()
    fields = [
        f"{name}: backend {mine.get(name)!r:.160}, model {model.get(name)!r:.160}"
        for name in sorted(set(mine) | set(model))
        if mine.get(name) != model.get(name)
    ]
    return "; ".join(fields[:4]) or "no field differs"


def _same(got: tuple[str, Any], want: tuple[str, Any], what: str) -> None:
    if want[0] == "raised":
        assert got[0] == "raised" and issubclass(got[1], want[1]), (
            f"{what}: the reference raised {want[1].__name__}, the backend gave {got[1]!r}"
        )
    else:
        assert got[0] == "ok", f"{what}: the reference succeeded, the backend raised {got[1]}"
        assert _outcome(got[1]) == _outcome(want[1]), f"{what}: results differ"


class _StorageLeft(BaseException):
    """Storage of the id pool holds something before a run's first step, after delete()
    of every id: what an earlier run left, that no operation removes. Every later run,
    and every replay Hypothesis would shrink with, starts on it, so it must not take
    this for one failing example to shrink (not an `Exception`: it does not catch it);
    `run_machine` fails with its message (`MachineConfig.left`) instead."""


def _named(rule: Callable[..., None]) -> Callable[..., None]:
    """Record the step a rule runs, with its arguments, for the failure messages of
    the checks after it (Hypothesis tells invariants nothing of the step before)."""

    @functools.wraps(rule)
    def run(self: Any, **kwargs: Any) -> None:
        arguments = ", ".join(f"{name}={value!r}" for name, value in kwargs.items())
        self.step = f"{rule.__name__}({arguments})"[:300]
        self.steps.append(self.step)
        rule(self, **kwargs)

    return run


def _machine(config: MachineConfig) -> type[RuleBasedStateMachine]:
    when = datetime(2024, 1, 1, tzinfo=timezone.utc)

    class ContractMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            ttl = {"ttl": TTL} if config.ttl else {}
            self.reference: SessionManager = MemorySessionManager.from_url(
                f"memory://kit-model-{uuid.uuid4().hex}", **ttl
            )
            self.reference.clock = config.clock
            self.subjects = config.subjects
            self.observed = 0
            config.call(_forget(self.subjects[0]))
            self.held: list[tuple[Session, Session, object]] = []
            self.serial = 0
            #: The steps run so far and the last of them (set by `_named`), for messages.
            self.steps: list[str] = []
            self.step = "the start of the run, once delete() of every id of the pool returned"
            self.check_storage()

        def teardown(self) -> None:
            config.last_run = "; ".join(self.steps) or "none"
            if not config.stop.is_set():
                config.call(self.reference.close())

        # -- helpers --------------------------------------------------------------------

        def both(
            self,
            via: int,
            op: Callable[[SessionManager], Coroutine[Any, Any, Any]],
            what: str,
        ) -> tuple[Any, Any]:
            subject = self.subjects[via % len(self.subjects)]

            async def pair() -> tuple[tuple[str, Any], tuple[str, Any]]:
                return await _attempt(op(subject)), await _attempt(op(self.reference))

            got, want = config.call(pair())
            _same(got, want, what)
            return got[1], want[1]

        def stored(self, session_id: str) -> Any:
            """The reference's stored object for *session_id*, expired or not (None when
            it holds nothing of it), read from its store as `memory_inventory` does."""
            space = self.reference._store.spaces.get(self.reference.options.namespace, {})  # type: ignore[attr-defined]
            return space.get(session_id)

        def life(self, session_id: str) -> object:
            """The reference's stored object for *session_id*, None when it is absent or
            expired: a new object per create, so it names the life of the id."""
            stored = self.stored(session_id)
            if stored is None:
                return None
            expires = stored.record.expires_at
            return None if expires is not None and expires <= config.clock.now() else stored

        def hold(self, got: Any, want: Any) -> None:
            if isinstance(got, Session) and isinstance(want, Session):
                self.held.append((got, want, self.life(want.session_id)))
                del self.held[:-MAX_HELD]

        def event(self, content: str) -> Event:
            self.serial += 1
            return Event(id=f"e{self.serial}", author="user", content=content, timestamp=when)

        def edit(self, edit: str, *copies: Session) -> None:
            """Make one edit to each held copy of a pair, the same events in both."""
            events: list[Event] = []
            if edit.startswith("append"):
                events = [self.event(edit) for _ in range(3 if edit == "append3" else 1)]
            for copy in copies:
                if edit.startswith("append"):
                    copy.events.extend(events)
                elif edit == "pop" and copy.events:
                    copy.events.pop()
                elif edit == "clear":
                    copy.events.clear()
                elif edit == "rewrite" and copy.events:
                    copy.events[0] = copy.events[0].model_copy(update={"content": "rewritten"})
                elif edit == "state":
                    copy.state["n"] = copy.state.get("n", 0) + 1

        def exported(self, session_id: str, user: str | None, count: int, version: int) -> Session:
            """A session as an export holds it, for restore()."""
            return Session(
                session_id=session_id,
                user_id=user,
                events=[self.event(f"restored{i}") for i in range(count)],
                state={"restored": count},
                created_at=when,
                updated_at=when,
                version=version,
            )

        # -- rules ----------------------------------------------------------------------

        @initialize(
            seeds=st.lists(
                st.tuples(st.sampled_from(IDS), st.sampled_from(USERS), st.integers(0, 4)),
                min_size=1,
                max_size=3,
            ),
            aged=st.integers(0, 3),
        )
        @_named
        def seed(self, seeds: list[tuple[str, str | None, int]], aged: int = 0) -> None:
            # Every run starts from a few sessions with histories, so short runs test too.
            # With a ttl, the clock passes the ttl of the first *aged* of them before the
            # others are made: most runs start with expired, unpurged sessions, which few
            # reached by the clock rule alone (what storage keeps of one after a delete()
            # is seen only so).
            for index, (session_id, user, count) in enumerate(seeds):
                got, want = self.both(
                    0,
                    lambda m, sid=session_id, owner=user: m.create(sid, owner),  # type: ignore[misc]
                    f"create({session_id!r})",
                )
                if isinstance(got, Session) and isinstance(want, Session):
                    events = [self.event(f"seed{i}") for i in range(count)]
                    got.events.extend(events)
                    want.events.extend(events)

                    def save(
                        m: SessionManager, mine: Session = got, theirs: Session = want
                    ) -> Coroutine[Any, Any, None]:
                        return m.save(theirs if m is self.reference else mine)

                    self.both(0, save, "save")
                    self.hold(got, want)
                if config.ttl and index + 1 == aged:
                    config.clock.advance(TTL + 1)

        @rule(
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            state=st.sampled_from([None, {}, {"k": 1}, {"nested": {"x": [1, "two"]}}]),
            via=st.integers(0, 1),
        )
        @_named
        def create(self, session_id: str, user: str | None, state: Any, via: int) -> None:
            got, want = self.both(
                via, lambda m: m.create(session_id, user, state=state), f"create({session_id!r})"
            )
            self.hold(got, want)

        @rule(
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            last_events=st.sampled_from([None, 0, 1, 2, 50]),
            via=st.integers(0, 1),
        )
        @_named
        def get(self, session_id: str, user: str | None, last_events: int | None, via: int) -> None:
            got, want = self.both(
                via,
                lambda m: m.get(session_id, user_id=user, last_events=last_events),
                f"get({session_id!r}, user_id={user!r}, last_events={last_events})",
            )
            self.hold(got, want)

        @rule(session_id=st.sampled_from(IDS), user=st.sampled_from(USERS), via=st.integers(0, 1))
        @_named
        def get_or_create(self, session_id: str, user: str | None, via: int) -> None:
            got, want = self.both(
                via, lambda m: m.get_or_create(session_id, user), f"get_or_create({session_id!r})"
            )
            self.hold(got, want)

        @precondition(lambda self: bool(self.held))
        @rule(
            pick=st.integers(0, MAX_HELD - 1),
            edit=st.sampled_from(["append", "append3", "pop", "clear", "rewrite", "state", "none"]),
            via=st.integers(0, 1),
        )
        @_named
        def save(self, pick: int, edit: str, via: int) -> None:
            index = pick % len(self.held)
            got_copy, want_copy, life = self.held[index]
            now_life = self.life(want_copy.session_id)
            # A copy of an earlier life of the id (deleted or expired, then created
            # again) is stale even where its version matches the new life's.
            earlier_life = now_life is not None and now_life is not life
            self.edit(edit, got_copy, want_copy)
            subject = self.subjects[via % len(self.subjects)]

            async def pair() -> tuple[tuple[str, Any], tuple[str, Any]]:
                return await _attempt(subject.save(got_copy)), await _attempt(
                    self.reference.save(want_copy)
                )

            got, want = config.call(pair())
            what = f"save ({edit}) of {got_copy.session_id!r}"
            # An edit that a copy loaded with last_events cannot save is refused by the
            # manager before any backend sees it, whatever life the copy is of; `_same`
            # still holds the backend to the model's answer.
            if earlier_life and want != ("raised", PartialSessionError):
                assert want == ("raised", SessionConflictError), f"{what}: the model took {want}"
                assert got[0] == "raised" and issubclass(got[1], SessionConflictError), (
                    f"{what}: a copy of an earlier life of the id, at version "
                    f"{got_copy.version}, was not refused as stale (the backend gave {got[1]!r})"
                )
            _same(got, want, what)
            assert got_copy.model_dump() == want_copy.model_dump(), (
                f"{what}: save() must update the caller's copy (version, timestamps, events) "
                "exactly as the reference model updates its own; they differ in "
                f"{_differing(got_copy, want_copy)}"
            )

        @precondition(lambda self: bool(self.held) and config.compaction)
        @rule(
            pick=st.integers(0, MAX_HELD - 1),
            cut=st.integers(0, 8),
            summaries=st.integers(0, 2),
            archive=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def compact(self, pick: int, cut: int, summaries: int, archive: bool, via: int) -> None:
            index = pick % len(self.held)
            got_copy, want_copy, life = self.held[index]
            now_life = self.life(want_copy.session_id)
            if (now_life is not None and now_life is not life) or not want_copy.events:
                del self.held[index]  # as in save(): an earlier life is not compared
                return
            through = want_copy.events[cut % len(want_copy.events)].id
            replacement = [self.event("summary") for _ in range(summaries)]
            subject = self.subjects[via % len(self.subjects)]

            async def pair() -> tuple[tuple[str, Any], tuple[str, Any]]:
                return await _attempt(
                    subject.compact(got_copy, through, replacement, archive=archive)
                ), await _attempt(
                    self.reference.compact(want_copy, through, replacement, archive=archive)
                )

            got, want = config.call(pair())
            what = f"compact({got_copy.session_id!r}, through {through!r})"
            _same(got, want, what)
            assert got_copy.model_dump() == want_copy.model_dump(), (
                f"{what}: compact() must update the caller's copy exactly as the reference "
                f"model updates its own; they differ in {_differing(got_copy, want_copy)}"
            )

        @precondition(lambda self: config.branching)
        @rule(
            source=st.sampled_from(IDS),
            new=st.sampled_from(IDS),
            cut=st.one_of(st.none(), st.integers(0, 8)),
            user=st.sampled_from(USERS),
            state=st.sampled_from([None, {"forked": True}]),
            via=st.integers(0, 1),
        )
        @_named
        def fork(
            self,
            source: str,
            new: str,
            cut: int | None,
            user: str | None,
            state: Any,
            via: int,
        ) -> None:
            stored = config.call(self.reference.get(source))
            through = None
            if cut is not None:
                events = [] if stored is None else stored.events
                through = events[cut % len(events)].id if events else "e-absent"
            self.both(
                via,
                lambda m: m.fork(source, new, through_event_id=through, user_id=user, state=state),
                f"fork({source!r}, {new!r}, through {through!r}, user_id={user!r})",
            )

        @precondition(lambda self: bool(self.held) and config.branching)
        @rule(
            pick=st.integers(0, MAX_HELD - 1),
            cut=st.integers(0, 8),
            archive=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def rewind(self, pick: int, cut: int, archive: bool, via: int) -> None:
            index = pick % len(self.held)
            got_copy, want_copy, life = self.held[index]
            now_life = self.life(want_copy.session_id)
            if (now_life is not None and now_life is not life) or not want_copy.events:
                del self.held[index]  # as in compact(): an earlier life is not compared
                return
            through = want_copy.events[cut % len(want_copy.events)].id
            subject = self.subjects[via % len(self.subjects)]

            async def pair() -> tuple[tuple[str, Any], tuple[str, Any]]:
                return await _attempt(
                    subject.rewind(got_copy, through, archive=archive)
                ), await _attempt(self.reference.rewind(want_copy, through, archive=archive))

            got, want = config.call(pair())
            what = f"rewind({got_copy.session_id!r}, through {through!r})"
            _same(got, want, what)
            assert got_copy.model_dump() == want_copy.model_dump(), (
                f"{what}: rewind() must update the caller's copy exactly as the reference "
                f"model updates its own; they differ in {_differing(got_copy, want_copy)}"
            )

        @rule(
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            count=st.integers(0, 3),
            version=st.sampled_from([1, 7]),
            via=st.integers(0, 1),
        )
        @_named
        def restore(
            self, session_id: str, user: str | None, count: int, version: int, via: int
        ) -> None:
            exported = self.exported(session_id, user, count, version)
            got, want = self.both(
                via,
                lambda m: m.restore(exported.model_copy(deep=True)),
                f"restore({session_id!r}, {count} events, version {version})",
            )
            self.hold(got, want)

        # -- lost replies: a write lands (or not) and its caller is not told -------------

        @precondition(lambda self: bool(self.held))
        @rule(
            pick=st.integers(0, MAX_HELD - 1),
            edit=st.sampled_from(["append", "pop", "rewrite", "state", "none"]),
            landed=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def save_reply_lost(self, pick: int, edit: str, landed: bool, via: int) -> None:
            """A save whose reply (or request) is lost, then saved again unchanged: the
            outcome is the model's one save, landed exactly once."""
            got_copy, want_copy, _ = self.held[pick % len(self.held)]
            self.edit(edit, got_copy, want_copy)
            subject = self.subjects[via % len(self.subjects)]

            async def run() -> tuple[tuple[str, Any], tuple[str, Any]]:
                with lost_replies(subject, "_save", landed=landed) as faults:
                    first = await _attempt(subject.save(got_copy))
                if faults.lost:
                    assert first == ("raised", BackendUnavailableError), first
                    first = await _attempt(subject.save(got_copy))  # the re-send
                return first, await _attempt(self.reference.save(want_copy))

            got, want = config.call(run())
            what = f"save ({edit}) of {got_copy.session_id!r}, reply lost={landed}, retried"
            _same(got, want, what)
            assert got_copy.model_dump() == want_copy.model_dump(), (
                f"{what}: a save() retried after a lost reply must leave the caller's copy "
                "exactly as one save leaves the reference model's; they differ in "
                f"{_differing(got_copy, want_copy)}"
            )

        @rule(
            op=st.sampled_from(["create", "restore", "delete", "compact"]),
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            pick=st.integers(0, MAX_HELD - 1),
            landed=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def write_reply_lost(
            self, op: str, session_id: str, user: str | None, pick: int, landed: bool, via: int
        ) -> None:
            """A create, restore, delete or compaction whose reply (or request) is lost:
            the store then holds what the model holds after that write happened once
            (landed) or never (lost before it was sent), which every later step and
            invariant compares; a create, restore or delete is then retried, and its
            answer is the model's answer to the same retry."""
            exported = self.exported(session_id, user, 2, 3)
            pair: tuple[Session, Session] | None = None
            if op == "compact":
                if not (self.held and config.compaction):
                    return
                pair = self.current(pick)
                if pair is None:
                    return  # an earlier life's copy: the compact rule covers its refusal
                through = pair[1].events[0].id
                summary = [self.event("summary")]
            hook = {"create": "_create", "restore": "_restore", "delete": "_delete"}.get(
                op, "_compact"
            )

            def call(manager: SessionManager) -> Coroutine[Any, Any, Any]:
                if op == "create":
                    return manager.create(session_id, user)
                if op == "restore":
                    return manager.restore(exported.model_copy(deep=True))
                if op == "delete":
                    return manager.delete(session_id)
                assert pair is not None, (
                    "write_reply_lost(op='compact') reached the compaction without a held "
                    "(backend copy, model copy) pair: the rule should have returned earlier"
                )
                copy = pair[1] if manager is self.reference else pair[0]
                return manager.compact(copy, through, summary, archive=True)

            self.lost_write(f"{op}({session_id!r})", (hook,), call, landed, via, pair)

        @precondition(lambda self: config.branching)
        @rule(
            op=st.sampled_from(["fork", "rewind"]),
            source=st.sampled_from(IDS),
            new=st.sampled_from(IDS),
            cut=st.integers(0, 8),
            pick=st.integers(0, MAX_HELD - 1),
            archive=st.booleans(),
            landed=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def branch_reply_lost(
            self,
            op: str,
            source: str,
            new: str,
            cut: int,
            pick: int,
            archive: bool,
            landed: bool,
            via: int,
        ) -> None:
            """A fork or rewind whose reply (or request) is lost, as in `write_reply_lost`:
            the store holds the model's fork or rewind once, or nothing of it; a fork is
            then retried (a landed one is now SessionExistsError, as the model says), a
            rewind's copy that landed is stale (its caller never heard of the rewind)."""
            pair: tuple[Session, Session] | None = None
            if op == "fork":
                stored = config.call(self.reference.get(source))
                events = [] if stored is None else stored.events
                through = events[cut % len(events)].id if events else None
                # A fork is one `_fork`, or (encrypted, or across Redis Cluster slots)
                # the one `_restore` a fork by copy stores it with.
                hooks: tuple[str, ...] = ("_fork", "_restore")
                what = f"fork({source!r}, {new!r}, through {through!r})"
            else:
                pair = self.current(pick)
                if pair is None:
                    return  # an earlier life's copy: the rewind rule covers its refusal
                through = pair[1].events[cut % len(pair[1].events)].id
                hooks = ("_rewind",)
                what = f"rewind({pair[1].session_id!r}, through {through!r}, archive={archive})"

            def call(manager: SessionManager) -> Coroutine[Any, Any, Any]:
                if pair is None:
                    return manager.fork(source, new, through_event_id=through)
                copy = pair[1] if manager is self.reference else pair[0]
                assert through is not None, (
                    "branch_reply_lost(op='rewind') has no event to rewind through: the rule "
                    "takes only a held copy with events"
                )
                return manager.rewind(copy, through, archive=archive)

            self.lost_write(what, hooks, call, landed, via, pair)

        @rule(
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            create=st.booleans(),
            landed=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def update_reply_lost(
            self, session_id: str, user: str | None, create: bool, landed: bool, via: int
        ) -> None:
            """An update whose save loses its reply (or request): update() re-sends that
            save itself, the same request with its token, so it succeeds and its change
            lands exactly once (the model's one update), never twice nor as a conflict."""
            event = self.event("update")

            def fn(session: Session) -> None:
                session.events.append(event)
                session.state["updates"] = session.state.get("updates", 0) + 1

            subject = self.subjects[via % len(self.subjects)]

            async def run() -> tuple[tuple[str, Any], tuple[str, Any], int]:
                with lost_replies(subject, "_save", landed=landed) as faults:
                    got = await _attempt(
                        subject.update(session_id, fn, user_id=user, create=create)
                    )
                want = await _attempt(
                    self.reference.update(session_id, fn, user_id=user, create=create)
                )
                return got, want, faults.lost

            got, want, lost = config.call(run())
            what = (
                f"update({session_id!r}, user_id={user!r}, create={create}) whose save's "
                f"reply lost={landed}"
            )
            _same(got, want, what)
            if want[0] == "ok":
                assert lost == 1, (
                    f"{what}: the update succeeded, so its save must have reached the "
                    f"backend's _save and lost its reply once, but {lost} were lost"
                )

        # -- lost-reply helpers -----------------------------------------------------------

        def current(self, pick: int) -> tuple[Session, Session] | None:
            """The held (backend copy, model copy) at *pick* when it is of the id's
            current life and holds events, else None."""
            if not self.held:
                return None
            got_copy, want_copy, life = self.held[pick % len(self.held)]
            if self.life(want_copy.session_id) is not life or not want_copy.events:
                return None
            return got_copy, want_copy

        def lost_write(
            self,
            what: str,
            hooks: tuple[str, ...],
            call: Callable[[SessionManager], Coroutine[Any, Any, Any]],
            landed: bool,
            via: int,
            pair: tuple[Session, Session] | None,
        ) -> None:
            """Run *call* on the subject with its write hook's reply (*landed*) or request
            lost, and on the model once (landed) or not at all; then retry it on both,
            unless it wrote through the held copies *pair* (compact, rewind)."""
            subject = self.subjects[via % len(self.subjects)]
            what = f"{what} with its reply lost={landed}"

            async def run() -> tuple[tuple[str, Any], tuple[str, Any] | None, int]:
                with lost_replies(subject, hooks, landed=landed) as faults:
                    first = await _attempt(call(subject))
                if faults.calls and not landed:
                    return first, None, faults.calls  # never sent: the model does nothing
                return first, await _attempt(call(self.reference)), faults.calls

            first, want, calls = config.call(run())
            if want is None or (calls and want[0] == "ok"):
                assert first == ("raised", BackendUnavailableError), f"{what}: {first}"
            else:
                _same(first, want, what)  # refused, with the same answer, before any loss
            if pair is not None:
                if want is not None and want[0] == "ok":
                    # The subject's copy never heard of its write: it is stale now.
                    self.held = [held for held in self.held if held[0] is not pair[0]]
                return
            got, model = self.both(via, call, f"{what}, retried")
            self.hold(got, model)

        @rule(
            session_id=st.sampled_from(IDS),
            user=st.sampled_from(USERS),
            create=st.booleans(),
            via=st.integers(0, 1),
        )
        @_named
        def update(self, session_id: str, user: str | None, create: bool, via: int) -> None:
            event = self.event("update")

            def fn(session: Session) -> None:
                session.events.append(event)
                session.state["updates"] = session.state.get("updates", 0) + 1

            self.both(
                via,
                lambda m: m.update(session_id, fn, user_id=user, create=create),
                f"update({session_id!r}, user_id={user!r}, create={create})",
            )

        @rule(session_id=st.sampled_from(IDS), user=st.sampled_from(USERS), via=st.integers(0, 1))
        @_named
        def delete(self, session_id: str, user: str | None, via: int) -> None:
            self.both(
                via,
                lambda m: m.delete(session_id, user_id=user),
                f"delete({session_id!r}, user_id={user!r})",
            )

        @precondition(lambda self: bool(self.held))
        @rule(pick=st.integers(0, MAX_HELD - 1), via=st.integers(0, 1))
        @_named
        def recreate(self, pick: int, via: int) -> None:
            """Delete a held copy's id and create it again: the copy is now of an earlier
            life, at the new life's version when it was held at 1."""
            want_copy = self.held[pick % len(self.held)][1]
            session_id, owner = want_copy.session_id, want_copy.user_id
            self.both(via, lambda m: m.delete(session_id), f"delete({session_id!r})")
            got, want = self.both(
                via, lambda m: m.create(session_id, owner), f"create({session_id!r})"
            )
            self.hold(got, want)

        @rule(user=st.sampled_from(USERS[1:]), via=st.integers(0, 1))
        @_named
        def delete_user(self, user: str, via: int) -> None:
            self.both(via, lambda m: m.delete_user(user), f"delete_user({user!r})")

        @rule(
            user=st.sampled_from(USERS),
            limit=st.sampled_from([1, 2, 3, 100]),
            via=st.integers(0, 1),
        )
        @_named
        def list_pages(self, user: str | None, limit: int, via: int) -> None:
            async def walk(manager: SessionManager) -> list[Any]:
                pages: list[Any] = []
                cursor = None
                for _ in range(len(IDS) + 2):
                    page = await manager.list_sessions(user_id=user, limit=limit, cursor=cursor)
                    pages.append([asdict(item) for item in page.items])
                    cursor = page.next_cursor
                    if cursor is None:
                        return pages
                raise AssertionError("paging did not end")

            self.both(via, walk, f"list_sessions(user_id={user!r}, limit={limit}) page by page")

        @rule(via=st.integers(0, 1))
        @_named
        def purge_expired(self, via: int) -> None:
            self.both(via, lambda m: m.purge_expired(), "purge_expired()")

        # Whole milliseconds, like every timestamp of a run (the clock starts on one):
        # the kit holds expiry exact to the millisecond, as BSON dates store it.
        @rule(seconds=st.sampled_from([0.001, 1.0, TTL / 2, TTL + 1]))
        @_named
        def advance_clock(self, seconds: float) -> None:
            config.clock.advance(seconds)

        # -- after every step -----------------------------------------------------------

        @invariant()
        def everything_agrees(self) -> None:
            async def observe(manager: SessionManager) -> Any:
                sessions = {}
                archives = {}
                for session_id in IDS:
                    found = await manager.get(session_id)
                    sessions[session_id] = None if found is None else found.model_dump()
                    if config.compaction:
                        archived = await manager.archived_events(session_id)
                        archives[session_id] = [event.model_dump() for event in archived]
                listing = await manager.list_sessions(limit=100)
                return sessions, [asdict(item) for item in listing.items], archives

            # Through each manager in turn: a manager that serves what it remembers
            # instead of what is stored disagrees after the other one's writes.
            self.observed += 1
            subject = self.subjects[self.observed % len(self.subjects)]

            async def everyone() -> list[Any]:
                return [await observe(m) for m in (self.reference, subject)]

            want, *gots = config.call(everyone())
            for got in gots:
                assert got[0] == want[0], "stored sessions differ from the reference"
                assert got[1] == want[1], "listings differ from the reference"
                assert got[2] == want[2], "archives of compacted events differ from the reference"

        @invariant()
        def storage_agrees(self) -> None:
            """Raw storage of every id of the pool against what the model stores: a
            backend whose reads are right can still keep what they never show (events
            of an earlier life, rows an erasure forgot, an archive twice)."""
            self.check_storage()

        def check_storage(self) -> None:
            """`storage_agrees`, and before a run's first step, once the pool is deleted:
            storage an earlier run left there (rows that no delete() removes) fails the
            clause at once, with what that run did, since no later run, nor a replay
            of the earlier one, can start clean (`_StorageLeft`)."""
            hook = config.stored
            if hook is None:
                return
            manager = self.subjects[0]

            async def look() -> list[Inventory]:
                return [await hook(manager, session_id) for session_id in IDS]

            found = config.call(look())
            now = config.clock.now()
            problems = [
                problem
                for session_id, held in zip(IDS, found, strict=True)
                if (problem := self.storage_problem(session_id, held, now)) is not None
            ]
            if problems and not self.steps:
                earlier = (
                    f"an earlier run's check failed first: {config.leaked}"
                    if config.leaked is not None
                    else f"the run before took the steps: {config.last_run[-1200:]}"
                )
                config.left = f"{problems[0]}; {earlier}"
                raise _StorageLeft(config.left)
            if problems and config.leaked is None:
                config.leaked = f"{problems[0]} (its steps: {'; '.join(self.steps)[-1200:]})"
            assert not problems, problems[0]

        def storage_problem(self, session_id: str, held: Inventory, now: datetime) -> str | None:
            """What is wrong with *held*, the backend's storage of *session_id*, against
            the model's store; None if nothing is."""
            model = self.stored(session_id)
            where = f"after {self.step}: storage of id {session_id!r}"
            if model is None:
                if held.erased:
                    return None
                return (
                    f"{where} must be erased (no record, events, index entries or archive: "
                    f"the model holds nothing of it), found {held!r:.400}"
                )
            expires = model.record.expires_at
            if expires is not None and expires <= now:
                return None  # expired, unpurged: an engine's own expiry may have dropped it
            count, archived = len(model.events), len(model.archive)
            if (
                held.records == 1
                and sorted(held.events) == list(range(count))
                and held.archived == archived
            ):
                return None
            positions = f"events at positions 0..{count - 1}" if count else "no events"
            return (
                f"{where} must hold its live session as the model does: 1 record, "
                f"{positions} (no orphans of an earlier life, none twice) and {archived} "
                f"archived events, found {held!r:.400}"
            )

    return ContractMachine


def run_machine(
    config: MachineConfig,
    examples: int,
    steps: int,
    shrink_seconds: float,
    derandomize: bool = False,
) -> None:
    """Run the machine (blocking: call it in a worker thread).

    Hypothesis shrinks a failure for up to five minutes, far past any clause's time
    limit on a slow backend; *shrink_seconds* caps that (through the engine's module
    constant, the only knob it has), so a failure still comes back shrunk, if less so.
    Storage left where a run starts fails unshrunk (`_StorageLeft`), as an AssertionError.
    """
    saved = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if saved is not None:
        engine.MAX_SHRINKING_SECONDS = shrink_seconds  # type: ignore[assignment]
    try:
        run_state_machine_as_test(
            _machine(config),
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                report_multiple_bugs=False,
                derandomize=derandomize,
            ),
        )
    except (_StorageLeft, Exception):
        # A run started on leftovers: whatever Hypothesis made of that (its replays
        # cannot start clean, so it may call them flaky), that is the failure.
        if config.left is not None:
            raise AssertionError(config.left) from None
        raise
    finally:
        if saved is not None:
            engine.MAX_SHRINKING_SECONDS = saved
