"""What every clause test shares: the harness fixture, fresh ids, variants, read-back.

A clause test only ever receives the adopter's ``manager`` fixture. Everything else
(other namespaces, a ttl, a frozen clock, a second manager to race, a fresh manager
to read back what was really written) is derived from it with
``manager.with_options(...)``, so an adopter writes one fixture and the kit can still
look at the store from outside; `SuiteBase.raw_inventory` is how it looks at storage
itself.

Every clause runs under a time limit (`SuiteBase.time_limit`, ``--conformance-time-limit``):
a backend that hangs fails the clause it hangs in instead of stalling the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar, TypeVar

import pytest
import pytest_asyncio
from agentsessions import Session, SessionManager, SessionSummary

from .._clock import FrozenClock
from .._inventory import Inventory
from .._plugins import find_inventory
from .._state import BackendInfo, recorder_of

__all__ = ["DEFAULT_TIME_LIMIT", "SuiteBase", "pictured", "short", "snapshot", "within"]

#: Seconds a clause may take by default; generous, since a failure is what it buys.
DEFAULT_TIME_LIMIT = 60.0
#: Most pages any listing walk of the kit reads before it calls the paging broken.
MAX_PAGES = 2_000
_CLEANUP_LIMIT = 30.0

T = TypeVar("T")


def snapshot(session: Session | None) -> dict[str, Any] | None:
    """A plain, comparable picture of everything a session holds (None stays None)."""
    return None if session is None else session.model_dump()


def short(value: Any, limit: int = 160) -> str:
    """``repr(value)``, cut to *limit* characters for a failure message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def pictured(picture: dict[str, Any] | None) -> str:
    """A short description of a `snapshot` (version, events, state) for a failure message."""
    if picture is None:
        return "no session"
    contents = [event["content"] for event in picture["events"]]
    return (
        f"version {picture['version']} with {len(contents)} events {short(contents[:8])} "
        f"and state {short(picture['state'])}"
    )


async def within(seconds: float, awaitable: Awaitable[T], what: str) -> T:
    """Await *awaitable*, failing (never hanging) if it takes longer than *seconds*."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        # A backend that swallows the cancellation must not hang us here either.
        await asyncio.wait({task}, timeout=5)
        pytest.fail(
            f"{what} did not finish within {seconds:g} s: the backend hangs or loops "
            "(raise the limit with --conformance-time-limit if it is only slow)",
            pytrace=False,
        )
    return task.result()


def _time_limited(test: Callable[..., Awaitable[None]]) -> Callable[..., Awaitable[None]]:
    @functools.wraps(test)
    async def limited(self: SuiteBase, *args: Any, **kwargs: Any) -> None:
        await within(self._time_limit, test(self, *args, **kwargs), test.__name__)

    limited._kit_time_limited = True  # type: ignore[attr-defined]
    return limited


class SuiteBase:
    """Fixtures, helpers and the adopter hooks; the clause mixins build on this."""

    #: Test name (``"test_x"`` or ``"test_x[param]"``) -> why this backend is known to
    #: fail it. Each listed test becomes a STRICT expected failure: once the backend is
    #: fixed the run fails until the entry is removed.
    known_divergences: ClassVar[dict[str, str]] = {}

    #: Seconds each clause may run before it fails as hung. The command line option
    #: ``--conformance-time-limit`` (or ini ``conformance_time_limit``) overrides it.
    time_limit: ClassVar[float] = DEFAULT_TIME_LIMIT

    # Strict-mode pytest-asyncio needs the marker; auto mode ignores the duplicate.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    _created: list[str]
    _variants: list[tuple[SessionManager, bool]]
    _observers: dict[Any, SessionManager]
    _time_limit: float
    _machine_examples: int | None
    clock: FrozenClock

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in list(vars(cls).items()):
            if (
                name.startswith("test")
                and inspect.iscoroutinefunction(value)
                and not getattr(value, "_kit_time_limited", False)
            ):
                setattr(cls, name, _time_limited(value))

    # -- the hook an adopter must implement --------------------------------------------

    async def raw_inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        """What *manager*'s storage holds for *session_id*, read straight from the engine.

        The erasure and no-orphan clauses use it, so that a backend which forgets event
        rows behind a delete, or duplicates them in a save, fails. Read it without the
        manager's own logic (a SQL query, ``EXISTS``/``LLEN``, a ``count_documents``),
        in *manager*'s namespace, expired sessions included. By default it is the
        inventory the backend's distribution registers (entry-point group
        ``agentsessions_conformance``); override it, or register one, otherwise.
        """
        hook = find_inventory(manager)
        if hook is None:
            pytest.fail(
                f"{type(self).__name__} does not implement raw_inventory(manager, session_id) "
                f"and no installed distribution registers an inventory for "
                f"{type(manager).__qualname__}: the kit needs an independent look at storage "
                "to prove erasure (see the agentsessions-conformance README, 'The storage hook')",
                pytrace=False,
            )
        return await hook(manager, session_id)

    # -- harness ----------------------------------------------------------------------

    @pytest_asyncio.fixture(autouse=True)
    async def _conformance_harness(
        self, manager: SessionManager, request: pytest.FixtureRequest
    ) -> AsyncIterator[None]:
        # Pytest makes one instance per test, so per-test bookkeeping lives on self.
        self._created = []
        self._variants = []
        self._observers = {}
        self._time_limit = _configured_limit(request.config, type(self).time_limit)
        examples = request.config.getoption("conformance_machine_examples", None)
        self._machine_examples = int(examples) if examples else None
        self.clock = FrozenClock()
        recorder = recorder_of(request.config)
        if recorder is None and type(self).known_divergences:
            pytest.fail(
                "known_divergences needs the agentsessions_conformance pytest plugin; "
                "it was not loaded (plugin autoload disabled?): add -p agentsessions_conformance",
                pytrace=False,
            )
        if recorder is not None:
            recorder.record_backend(request.node, BackendInfo.of(manager))
        yield
        # Best effort and bounded: the delete clause has its own tests, and a test that
        # closed or broke the manager must not turn cleanup into a second failure.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await asyncio.wait_for(self._cleanup(manager), _CLEANUP_LIMIT)

    async def _cleanup(self, manager: SessionManager) -> None:
        for variant, purge in reversed(self._variants):
            if purge:
                await _purge_namespace(variant)
            with contextlib.suppress(Exception):
                await variant.close()
        for session_id in self._created:
            with contextlib.suppress(Exception):
                await manager.delete(session_id)

    # -- helpers ----------------------------------------------------------------------

    def new_id(self, prefix: str = "s") -> str:
        """A fresh random session id, deleted from the adopter's store after the test."""
        session_id = f"{prefix}-{uuid.uuid4().hex}"
        self._created.append(session_id)
        return session_id

    def track(self, session_id: str) -> str:
        """Delete *session_id* (made up by the test itself) after the test."""
        self._created.append(session_id)
        return session_id

    @staticmethod
    def new_user() -> str:
        return f"u-{uuid.uuid4().hex}"

    @staticmethod
    def new_namespace() -> str:
        return f"kit_{uuid.uuid4().hex[:20]}"

    async def variant(self, manager: SessionManager, **changes: Any) -> SessionManager:
        """An opened ``manager.with_options(**changes)``, closed after the test.

        A variant in another namespace has everything in that namespace deleted after
        the test (it is a fresh random namespace, so nothing else lives there).
        """
        other = manager.with_options(**changes)
        purge = "namespace" in changes and changes["namespace"] != manager.options.namespace
        self._variants.append((other, purge))
        await other.open()
        return other

    async def frozen(self, manager: SessionManager, **changes: Any) -> SessionManager:
        """A variant whose clock is the test's `FrozenClock` (``self.clock``).

        It lives in a fresh namespace when the backend has namespaces, so listings
        see only what the test made there.
        """
        if manager.capabilities.namespaces and "namespace" not in changes:
            changes["namespace"] = self.new_namespace()
        other = manager.with_options(**changes)
        other.clock = self.clock
        purge = other.options.namespace != manager.options.namespace
        self._variants.append((other, purge))
        await other.open()
        return other

    async def namespaced(self, manager: SessionManager) -> list[SessionManager]:
        """*manager* and, when the backend has namespaces, a variant in a fresh one.

        Clauses about ids, listing and erasure run in each: a backend may get its
        default namespace right and another wrong, or the other way round.
        """
        if not manager.capabilities.namespaces:
            return [manager]
        return [manager, await self.variant(manager, namespace=self.new_namespace())]

    def require(self, manager: SessionManager, capability: str) -> None:
        """Skip, with the reason, unless the backend declares *capability*."""
        if not getattr(manager.capabilities, capability):
            pytest.skip(f"{type(manager).__name__} does not declare the {capability!r} capability")

    async def readback(
        self, manager: SessionManager, session_id: str, **kwargs: Any
    ) -> Session | None:
        """What is really stored: read through a fresh manager when the store is shared.

        A fresh manager holds no cache or object of the first one, so this sees what
        was written, not what the first manager remembers.
        """
        if not manager.capabilities.shared:
            return await manager.get(session_id, **kwargs)
        key = (manager.options, id(manager.clock))
        observer = self._observers.get(key)
        if observer is None:
            observer = manager.with_options()
            self._variants.append((observer, False))
            await observer.open()
            self._observers[key] = observer
        return await observer.get(session_id, **kwargs)

    async def inventory(self, manager: SessionManager, session_id: str) -> Inventory:
        """The adopter's `raw_inventory`, checked for shape."""
        found = await self.raw_inventory(manager, session_id)
        assert isinstance(found, Inventory), (
            f"raw_inventory must return an agentsessions_conformance.Inventory, not {found!r}"
        )
        return found

    async def check_positions(
        self, manager: SessionManager, session_id: str, expected_count: int
    ) -> None:
        """Storage holds the session once, its events at exactly 0..count-1, nothing twice."""
        found = await self.inventory(manager, session_id)
        assert found.records == 1, (
            f"storage holds {found.records} records for {session_id!r}, expected exactly 1"
        )
        assert sorted(found.events) == list(range(expected_count)), (
            f"stored event positions of {session_id!r} are {sorted(found.events)[:20]}"
            f"{'...' if len(found.events) > 20 else ''} ({len(found.events)} rows), "
            f"expected 0..{expected_count - 1}: orphaned, missing or duplicated events"
        )

    async def check_erased(self, manager: SessionManager, session_id: str, why: str) -> None:
        """Storage holds nothing at all of *session_id* any more."""
        found = await self.inventory(manager, session_id)
        assert found.erased, f"{why}, yet storage still holds for {session_id!r}: {found}"

    async def list_all(
        self, manager: SessionManager, *, user_id: str | None = None, limit: int = 100
    ) -> list[SessionSummary]:
        """Every summary, page by page; a cursor that does not advance fails, never loops."""
        items: list[SessionSummary] = []
        seen: set[str] = set()
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            page = await manager.list_sessions(user_id=user_id, limit=limit, cursor=cursor)
            assert len(page.items) <= limit, f"a page of limit={limit} held {len(page.items)}"
            for item in page.items:
                assert item.session_id not in seen, (
                    f"paging returned {item.session_id!r} twice: the cursor is not honoured"
                )
                seen.add(item.session_id)
            items.extend(page.items)
            if page.next_cursor is None:
                return items
            assert page.next_cursor != cursor, "next_cursor did not advance"
            assert page.items, "a page with a next_cursor held no sessions"
            cursor = page.next_cursor
        raise AssertionError(f"paging never ended after {MAX_PAGES} pages")

    async def session_with_events(
        self, manager: SessionManager, count: int, *, user_id: str | None = None
    ) -> Session:
        """A stored session holding *count* events ``e0..e{count-1}``, freshly loaded."""
        session_id = self.new_id()
        session = await manager.create(session_id, user_id)
        for index in range(count):
            session.add_event("user", f"e{index}")
        await manager.save(session)
        loaded = await manager.get(session_id)
        assert loaded is not None, (
            f"get({session_id!r}) returned None right after create() and save() of a session "
            f"with {count} events: a session just saved must be found"
        )
        return loaded


def _configured_limit(config: pytest.Config, default: float) -> float:
    raw = config.getoption("conformance_time_limit", None) or config.getini(
        "conformance_time_limit"
    )
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise pytest.UsageError(f"conformance time limit must be seconds, not {raw!r}") from None
    if value <= 0:
        raise pytest.UsageError(f"conformance time limit must be > 0, not {raw!r}")
    return value


async def _purge_namespace(manager: SessionManager) -> None:
    with contextlib.suppress(Exception):
        cursor = None
        doomed: set[str] = set()
        for _ in range(MAX_PAGES):
            page = await manager.list_sessions(limit=1000, cursor=cursor)
            fresh = {item.session_id for item in page.items} - doomed
            doomed |= fresh
            if page.next_cursor is None or not fresh:
                break
            cursor = page.next_cursor
        for session_id in doomed:
            await manager.delete(session_id)
        await manager.purge_expired()
