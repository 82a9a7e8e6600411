"""Faults on the wire, through the kit's `FaultProxy`: frozen, reset, lost replies, refused.

For a backend whose URL names one host:port the kit rewrites the URL to go through a
proxy on loopback by itself (`WireFaultTests.proxied_url`); an adopter overrides that
hook for another layout, or returns None from it (with `wire_faults_skip_reason`) to
declare the capability absent, which shows as a skip. Every call here has a short
``timeout`` so a frozen server costs seconds, not the default deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from agentsessions import (
    BackendTimeoutError,
    BackendUnavailableError,
    Session,
    SessionManager,
)

from .._proxy import FaultProxy, ProxyMode
from ._base import SuiteBase

#: The deadline of the managers that talk through the proxy, in seconds.
WIRE_TIMEOUT = 1.0
#: What a call may take beyond its deadline before the kit calls it hung.
SLACK = 1.0


def _target(manager: SessionManager) -> tuple[str, int, str] | str:
    """(host, port, URL with {proxy} for the proxy's host:port), or why there is none."""
    url: str = manager._url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if "+cluster" in scheme or "+sentinel" in scheme or scheme.endswith("+srv"):
        return (
            f"{scheme}:// deployments announce their own node addresses, which a single "
            "proxy cannot stand in for"
        )
    if "," in parts.netloc:
        return "a multi-host URL would need one proxy per host"
    try:
        host, port = parts.hostname, parts.port or manager.default_port
    except ValueError as exc:
        return f"the URL's port cannot be read ({exc})"
    if not host or not port or "unix" in scheme:
        return "the URL names no host:port (a file, socket or in-process engine)"
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (userinfo + "@" if userinfo else "") + "{proxy}"
    query = parts.query
    if scheme == "mongodb" and "directconnection" not in query.lower():
        # Else the driver follows the address the server announces, around the proxy.
        query = f"{query}&directConnection=true" if query else "directConnection=true"
    return host, port, urlunsplit(parts._replace(netloc=netloc, query=query))


class WireFaultTests(SuiteBase):
    def proxied_url(self, manager: SessionManager, proxy_port: int) -> str | None:
        """*manager*'s URL rewritten to reach its server through ``127.0.0.1:proxy_port``,
        or None if it cannot be (the clauses then skip, saying why). Override it for a
        layout the kit cannot derive; see `wire_target`."""
        found = _target(manager)
        if isinstance(found, str):
            return None
        return found[2].replace("{proxy}", f"127.0.0.1:{proxy_port}")

    def wire_target(self, manager: SessionManager) -> tuple[str, int] | str:
        """The (host, port) the proxy forwards to, or the reason there is none."""
        found = _target(manager)
        return found if isinstance(found, str) else (found[0], found[1])

    @asynccontextmanager
    async def through_proxy(
        self, manager: SessionManager, **changes: Any
    ) -> AsyncIterator[tuple[FaultProxy, SessionManager]]:
        target = self.wire_target(manager)
        if isinstance(target, str):
            pytest.skip(f"no fault proxy for this backend: {target}")
        async with FaultProxy(*target) as proxy:
            url = self.proxied_url(manager, proxy.port)
            if url is None:
                pytest.skip("no fault proxy for this backend: proxied_url() returned None")
            merged = {**manager.options.model_dump(exclude_unset=True), **changes}
            merged["timeout"] = changes.get("timeout", WIRE_TIMEOUT)
            other = type(manager)(url, manager.parse_options(merged))
            other.clock = manager.clock
            other.encryption = manager.encryption
            try:
                yield proxy, other
            finally:
                proxy.mode = ProxyMode.PASS
                await _bounded(other.close(), 10, "close() after the faults")

    async def _expect_failure(
        self, what: str, call: Any, kind: type[BaseException], deadline: float
    ) -> BaseException:
        started = time.monotonic()
        with pytest.raises(kind) as caught:
            await _bounded(call, deadline + 10, what)
        took = time.monotonic() - started
        assert took <= deadline + SLACK, (
            f"{what} raised {type(caught.value).__name__} only after {took:.1f} s; "
            f"its deadline was {deadline:g} s"
        )
        return caught.value

    async def test_wire_frozen_server_times_out_then_recovers(
        self, manager: SessionManager
    ) -> None:
        """Against a frozen server every public call raises BackendTimeoutError within its
        timeout + 1 s (never hangs, never a raw exception); once traffic flows again the
        same manager works (no poisoned pool)."""
        async with self.through_proxy(manager) as (proxy, wired):
            session_id = self.new_id()
            session = await wired.create(session_id)
            session.add_event("user", "hello")
            await wired.save(session)
            proxy.mode = ProxyMode.FREEZE

            def append(current: Session) -> None:
                current.add_event("user", "frozen")

            calls: dict[str, Any] = {
                "get": lambda: wired.get(session_id),
                "save": lambda: wired.save(session),
                "update": lambda: wired.update(session_id, append),
                "delete": lambda: wired.delete(self.new_id()),
                "list_sessions": lambda: wired.list_sessions(limit=1),
            }
            for name, call in calls.items():
                await self._expect_failure(
                    f"{name}() against a frozen server", call(), BackendTimeoutError, WIRE_TIMEOUT
                )
            proxy.mode = ProxyMode.PASS
            stored = await _bounded(
                wired.get(session_id), WIRE_TIMEOUT + 10, "get() once traffic flowed again"
            )
            assert stored is not None, "the manager did not recover once the server answered"
            fresh = await wired.get(session_id)
            assert fresh is not None
            fresh.add_event("user", "after")
            await wired.save(fresh)

    async def test_wire_reset_is_backend_unavailable_then_recovers(
        self, manager: SessionManager
    ) -> None:
        """Connections reset by the network surface as BackendUnavailableError (never a
        raw driver exception) within the deadline; then the same manager works again."""
        async with self.through_proxy(manager) as (proxy, wired):
            session_id = self.new_id()
            await wired.create(session_id)
            proxy.mode = ProxyMode.RESET
            await self._expect_failure(
                "get() over reset connections",
                wired.get(session_id),
                BackendUnavailableError,
                WIRE_TIMEOUT,
            )
            proxy.mode = ProxyMode.PASS
            assert await _bounded(wired.get(session_id), WIRE_TIMEOUT + 10) is not None

    async def test_wire_lost_reply_save_retry_lands_exactly_once(
        self, manager: SessionManager
    ) -> None:
        """A save whose replies the network drops after its requests reached the server is
        ambiguous (BackendUnavailableError); retried unchanged once traffic flows, it has
        landed exactly once: one version step, its event once."""
        async with self.through_proxy(manager) as (proxy, wired):
            session_id = self.new_id()
            session = await wired.create(session_id)
            version = session.version
            session.add_event("user", "exactly-once")
            proxy.mode = ProxyMode.DROP_REPLIES
            await self._expect_failure(
                "save() whose replies are lost",
                wired.save(session),
                BackendUnavailableError,
                WIRE_TIMEOUT,
            )
            assert proxy.dropped_replies >= 1
            proxy.mode = ProxyMode.PASS
            await _bounded(wired.save(session), WIRE_TIMEOUT + 10)
            stored = await self.readback(manager, session_id)
            assert stored is not None
            assert [e.content for e in stored.events] == ["exactly-once"]
            assert stored.version == version + 1
            await self.check_positions(manager, session_id, 1)

    async def test_wire_refused_connection_is_backend_unavailable(
        self, manager: SessionManager
    ) -> None:
        """A server that refuses connections gives BackendUnavailableError within the
        deadline, never a raw exception."""
        async with self.through_proxy(manager) as (proxy, wired):
            await proxy.refuse()
            await self._expect_failure(
                "get() against a refused port",
                wired.get(self.new_id()),
                BackendUnavailableError,
                WIRE_TIMEOUT,
            )


async def _bounded(awaitable: Any, seconds: float, what: str = "a call") -> Any:
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        pytest.fail(f"{what} did not return within {seconds:g} s: it hangs", pytrace=False)
