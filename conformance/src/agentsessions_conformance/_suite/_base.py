"""What every clause test shares: the harness fixture, fresh ids, variants, read-back.

A clause test only ever receives the adopter's ``manager`` fixture. Everything else
(other namespaces, a ttl, a second manager to race, a fresh manager to read back what
was really written) is derived from it with ``manager.with_options(...)``, so an
adopter writes one fixture and the kit can still look at the store from outside.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import pytest_asyncio
from agentsessions import Session, SessionManager

from .._state import BackendInfo, recorder_of

__all__ = ["SuiteBase", "snapshot"]


def snapshot(session: Session | None) -> dict[str, Any] | None:
    """A plain, comparable picture of everything a session holds (None stays None)."""
    return None if session is None else session.model_dump()


class SuiteBase:
    """Fixtures, helpers and the adopter hooks; the clause mixins build on this."""

    #: Test name (``"test_x"`` or ``"test_x[param]"``) -> why this backend is known to
    #: fail it. Each listed test becomes a STRICT expected failure: once the backend is
    #: fixed the run fails until the entry is removed.
    known_divergences: ClassVar[dict[str, str]] = {}

    # Strict-mode pytest-asyncio needs the marker; auto mode ignores the duplicate.
    pytestmark: ClassVar[list[pytest.MarkDecorator]] = [pytest.mark.asyncio]

    _created: list[str]
    _variants: list[tuple[SessionManager, bool]]
    _observers: dict[Any, SessionManager]

    # -- hooks an adopter may override ------------------------------------------------

    async def raw_event_positions(
        self, manager: SessionManager, session_id: str
    ) -> list[int] | None:
        """The positions of *session_id*'s events exactly as stored, read from storage.

        Override to let the kit check that saves leave no orphaned or duplicated event
        rows behind (for example ``SELECT position FROM events WHERE ...``). Return the
        positions in storage order, or None (the default) when you do not provide it.
        """
        return None

    # -- harness ----------------------------------------------------------------------

    @pytest_asyncio.fixture(autouse=True)
    async def _conformance_harness(
        self, manager: SessionManager, request: pytest.FixtureRequest
    ) -> AsyncIterator[None]:
        # Pytest makes one instance per test, so per-test bookkeeping lives on self.
        self._created = []
        self._variants = []
        self._observers = {}
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
        for variant, purge in reversed(self._variants):
            if purge:
                await _purge_namespace(variant)
            with contextlib.suppress(Exception):
                await variant.close()
        for session_id in self._created:
            # Best effort: the delete clause has its own tests, and a test that closed
            # or broke the manager must not turn cleanup into a second failure.
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
        key = manager.options
        observer = self._observers.get(key)
        if observer is None:
            observer = manager.with_options()
            self._variants.append((observer, False))
            await observer.open()
            self._observers[key] = observer
        return await observer.get(session_id, **kwargs)

    async def check_positions(
        self, manager: SessionManager, session_id: str, expected_count: int
    ) -> None:
        """Through the adopter's storage hook: events sit at exactly 0..count-1."""
        positions = await self.raw_event_positions(manager, session_id)
        if positions is None:
            return
        assert sorted(positions) == list(range(expected_count)), (
            f"stored event positions of {session_id!r} are {sorted(positions)[:20]}..., "
            f"expected 0..{expected_count - 1}"
        )

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
        assert loaded is not None
        return loaded


async def _purge_namespace(manager: SessionManager) -> None:
    with contextlib.suppress(Exception):
        cursor = None
        doomed: list[str] = []
        while True:
            page = await manager.list_sessions(limit=1000, cursor=cursor)
            doomed.extend(item.session_id for item in page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
        for session_id in doomed:
            await manager.delete(session_id)
