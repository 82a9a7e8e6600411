"""A file engine's write lock held by another process: writes fail within the documented wait.

The analogue, for an engine that is a file, of the frozen server on the wire: another
process takes the database's write lock and keeps it. Every write must then give up
within the engine's own lock wait (SQLite's ``busy_timeout``), not the call's whole
deadline, write nothing, and work again once the lock is gone. How to hold the lock is
the engine's distribution's to say (the ``agentsessions_conformance_write_lock`` hook,
which SQLite's implements); an adopter may instead override
`FileLockTests.write_lock_holder`, or the clause skips with the reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agentsessions import BackendUnavailableError, Session, SessionManager

from .._plugins import find_write_lock
from ._base import SuiteBase
from ._tests_restore import _exported

#: The lock wait the clause sets, and what a write may take beyond it.
LOCK_WAIT = 1.0
SLACK = 1.0
#: The deadline of the clause's manager: far past the lock wait, so a write that waits
#: for its deadline instead of the lock wait is told apart.
DEADLINE = 10.0


class FileLockTests(SuiteBase):
    def write_lock_holder(self, manager: SessionManager) -> tuple[list[str], dict[str, Any]] | str:
        """The command of a process that takes *manager*'s write lock (printing one line
        once it holds it, keeping it until its stdin closes) and the options that set
        the engine's lock wait to `LOCK_WAIT` seconds; or why there is none (a skip)."""
        found = find_write_lock(manager, LOCK_WAIT)
        if found is None:
            return (
                "no installed distribution registers a write lock for this backend "
                "(agentsessions_conformance_write_lock; or override write_lock_holder)"
            )
        if isinstance(found, str):
            return found
        command, options = found
        return command, {**options, "timeout": DEADLINE}

    @contextlib.asynccontextmanager
    async def _lock_held(self, command: list[str]) -> AsyncIterator[None]:
        holder = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert holder.stdout is not None, (
                f"the lock holder {command[:4]!r} was started with stdout=PIPE, yet asyncio gave "
                "it no stdout to read its ready line from"
            )
            line = await asyncio.wait_for(holder.stdout.readline(), 20)
            if not line:
                error = await holder.stderr.read() if holder.stderr else b""
                pytest.fail(f"the lock holder did not take the lock: {error.decode()[-500:]}")
            yield
        finally:
            if holder.stdin is not None:
                holder.stdin.close()
            try:
                await asyncio.wait_for(holder.wait(), 10)
            except asyncio.TimeoutError:
                holder.kill()
                await holder.wait()

    async def test_file_lock_held_by_another_process_fails_writes_within_the_wait(
        self, manager: SessionManager
    ) -> None:
        """While another process holds the file's write lock, create, save, update,
        delete, delete_user, fork and restore (these two with branching) each raise
        BackendUnavailableError within the engine's lock wait + 1 s (not the call's
        deadline) and write nothing; once it lets go, the same manager saves the same
        copy."""
        found = self.write_lock_holder(manager)
        if isinstance(found, str):
            pytest.skip(f"no write lock to hold for this backend: {found}")
        command, options = found
        locked = manager.with_options(**options)
        await locked.open()
        try:
            session_id, fresh_id = self.new_id(), self.new_id()
            owner, fork_id = self.new_user(), self.new_id("fork")
            export = _exported(self.new_id(), owner)
            session = await locked.create(session_id, owner, state={"n": 0})
            version = session.version
            session.add_event("user", "blocked")

            def append(current: Session) -> None:
                current.add_event("user", "from update")

            calls: dict[str, Any] = {
                "create": lambda: locked.create(fresh_id),
                "save": lambda: locked.save(session),
                "update": lambda: locked.update(session_id, append),
                "delete": lambda: locked.delete(session_id),
                "delete_user": lambda: locked.delete_user(owner),
            }
            if manager.capabilities.branching:
                calls["fork"] = lambda: locked.fork(session_id, fork_id)
            calls["restore"] = lambda: locked.restore(export.model_copy(deep=True))
            async with self._lock_held(command):
                for name, call in calls.items():
                    started = time.monotonic()
                    with pytest.raises(BackendUnavailableError) as caught:
                        await asyncio.wait_for(call(), DEADLINE + 10)
                    took = time.monotonic() - started
                    assert took <= LOCK_WAIT + SLACK, (
                        f"{name}() against a write lock held by another process raised "
                        f"{type(caught.value).__name__} only after {took:.1f} s; the "
                        f"engine's lock wait was {LOCK_WAIT:g} s (the deadline {DEADLINE:g} s)"
                    )
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"delete() and delete_user() refused for the write lock must erase nothing: "
                f"get({session_id!r}) found no session"
            )
            assert stored.version == version and stored.events == [], (
                "a write refused for the lock was stored"
            )
            for name, written in (
                ("create", fresh_id),
                ("fork", fork_id),
                ("restore", export.session_id),
            ):
                assert await self.readback(manager, written) is None, (
                    f"{name}() of {written!r} refused for the write lock must store nothing: "
                    "get() found the session"
                )
            await locked.save(session)
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None after save() once the lock was "
                "released: the session must be stored"
            )
            assert [e.content for e in stored.events] == ["blocked"], (
                "save() of the same copy once the write lock is released must land its event "
                f"once: expected ['blocked'], found {[e.content for e in stored.events[:8]]!r}"
            )
            assert stored.version == version + 1, (
                "save() once the write lock is released must take one version step: expected "
                f"version {version + 1}, found {stored.version}"
            )
        finally:
            await locked.close()
