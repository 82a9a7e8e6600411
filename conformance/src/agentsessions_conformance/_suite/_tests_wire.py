"""Faults on the wire, through the kit's `FaultProxy`: frozen, reset, lost replies, refused.

The kit puts one proxy before every server the manager talks to: for a URL that names
its hosts it rewrites each host:port (`WireFaultTests.wire_targets`, `proxied_url`); a
distribution whose clients follow addresses the servers announce (a Redis Cluster or
Sentinel deployment) registers a wire route instead (`agentsessions_conformance_wire_route`).
An adopter overrides `WireFaultTests.wire_route` for another layout, or returns the
reason there is none, which shows as a skip. Every call here has a short ``timeout`` so
a frozen server costs seconds, not the default deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from agentsessions import (
    BackendTimeoutError,
    BackendUnavailableError,
    Session,
    SessionConflictError,
    SessionManager,
)

from .._plugins import find_wire_route
from .._proxy import FaultProxy, ProxyMode
from ._base import SuiteBase
from ._operations import NEEDS, OPERATIONS, Target, call_of
from ._tests_restore import _exported

#: The deadline of the managers that talk through the proxy, in seconds.
WIRE_TIMEOUT = 1.0
#: What a call may take beyond its deadline before the kit calls it hung.
SLACK = 1.0
_WARM_UP_TRIES = 3
#: Operations an engine may answer without its server: an engine that expires data
#: itself has nothing to purge.
ANSWERABLE_WITHOUT_SERVER = {"purge_expired"}


def _target(manager: SessionManager) -> tuple[list[tuple[str, int]], str] | str:
    """The (host, port) of every server the URL names, and the URL with ``{proxy0}``,
    ``{proxy1}``... for the proxies' host:port in their place; or why there is none."""
    url: str = manager._url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if "+cluster" in scheme:
        return (
            f"a {scheme}:// client connects to every node at the address the cluster "
            "announces (CLUSTER SLOTS), not the URL's: a proxy per URL host is bypassed"
        )
    if "+sentinel" in scheme:
        return (
            f"a {scheme}:// client connects to the primary at the address the Sentinels "
            "announce, not one the URL names: a proxy per Sentinel is bypassed"
        )
    if scheme.endswith("+srv"):
        return f"a {scheme}:// URL's hosts come from DNS, not from the URL"
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    hosts = hostlist.split(",")
    if len(hosts) > 1 and scheme.startswith("mongodb"):
        return (
            "a MongoDB replica set's members are reached at the addresses the set "
            "announces, not the URL's: a proxy per URL host is bypassed"
        )
    targets: list[tuple[str, int]] = []
    for host in hosts:
        try:
            one = urlsplit(f"//{host}")
            name, port = one.hostname, one.port or manager.default_port
        except ValueError as exc:
            return f"the URL's port cannot be read ({exc})"
        if not name or not port or "unix" in scheme:
            return "the URL names no host:port (a file, socket or in-process engine)"
        targets.append((name, port))
    proxies = ",".join(f"{{proxy{index}}}" for index in range(len(targets)))
    netloc = (userinfo + "@" if userinfo else "") + proxies
    query = parts.query
    if scheme == "mongodb" and "directconnection" not in query.lower():
        # Else the driver follows the address the server announces, around the proxy.
        query = f"{query}&directConnection=true" if query else "directConnection=true"
    return targets, urlunsplit(parts._replace(netloc=netloc, query=query))


class _Proxies:
    """One `FaultProxy` per server of a URL, set to one mode together."""

    def __init__(self, proxies: list[FaultProxy]) -> None:
        self.proxies = proxies

    @property
    def mode(self) -> ProxyMode:
        return self.proxies[0].mode

    @mode.setter
    def mode(self, mode: ProxyMode) -> None:
        for proxy in self.proxies:
            proxy.mode = mode

    @property
    def dropped_replies(self) -> int:
        return sum(proxy.dropped_replies for proxy in self.proxies)

    async def refuse(self) -> None:
        for proxy in self.proxies:
            await proxy.refuse()


class WireFaultTests(SuiteBase):
    def proxied_url(self, manager: SessionManager, proxy_ports: list[int]) -> str | None:
        """*manager*'s URL rewritten to reach its servers through ``127.0.0.1:port``, one
        port of *proxy_ports* per server of `wire_targets` in its order, or None if it
        cannot be (the clauses then skip, saying why). Override it for a layout the kit
        cannot derive."""
        found = _target(manager)
        if isinstance(found, str):
            return None
        url = found[1]
        for index, port in enumerate(proxy_ports):
            url = url.replace(f"{{proxy{index}}}", f"127.0.0.1:{port}")
        return url

    def wire_targets(self, manager: SessionManager) -> list[tuple[str, int]] | str:
        """The (host, port) of every server the manager talks to, each to get a proxy of
        its own (a multi-host URL: one per host), or the reason there is none."""
        found = _target(manager)
        return found if isinstance(found, str) else found[0]

    async def wire_route(
        self, manager: SessionManager
    ) -> tuple[list[tuple[str, int]], Callable[[list[int]], str | None]] | str:
        """The servers to put a proxy before and the URL through the proxies (from their
        ports, in that order), or why there is none: the route *manager*'s distribution
        registers (`agentsessions_conformance_wire_route`: a Redis Cluster or Sentinel
        deployment, whose clients follow the addresses the servers announce), else
        `wire_targets` and `proxied_url`. Override it for full control."""
        registered = find_wire_route(manager)
        if registered is not None:
            return await registered(manager)
        targets = self.wire_targets(manager)
        if isinstance(targets, str):
            return targets
        return targets, lambda ports: self.proxied_url(manager, ports)

    @asynccontextmanager
    async def through_proxy(
        self, manager: SessionManager, **changes: Any
    ) -> AsyncIterator[tuple[_Proxies, SessionManager]]:
        route = await self.wire_route(manager)
        if isinstance(route, str):
            pytest.skip(f"no fault proxy for this backend: {route}")
        targets, proxied = route
        async with contextlib.AsyncExitStack() as stack:
            proxies = _Proxies(
                [await stack.enter_async_context(FaultProxy(*target)) for target in targets]
            )
            url = proxied([proxy.port for proxy in proxies.proxies])
            if url is None:
                pytest.skip("no fault proxy for this backend: proxied_url() returned None")
            merged = {**manager.options.model_dump(exclude_unset=True), **changes}
            merged["timeout"] = changes.get("timeout", WIRE_TIMEOUT)
            # from_url: a route may add options of its own to the URL (Redis's address_map).
            other = type(manager).from_url(url, **merged)
            other.clock = manager.clock
            other.encryption = manager.encryption
            try:
                await _warm_up(other)
                yield proxies, other
            finally:
                proxies.mode = ProxyMode.PASS
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
            assert fresh is not None, (
                f"get({session_id!r}) through the proxy returned None once the server answered "
                "again: the session created before the freeze must be found"
            )
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
            assert await _bounded(wired.get(session_id), WIRE_TIMEOUT + 10) is not None, (
                f"get({session_id!r}) after connections were reset and traffic flows again must "
                "find the session created before: it returned None (the manager did not recover)"
            )

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
            assert proxy.dropped_replies >= 1, (
                "no reply was lost while the proxy dropped replies, so save() never reached the "
                f"server: the clause proved nothing (dropped_replies={proxy.dropped_replies})"
            )
            proxy.mode = ProxyMode.PASS
            await _bounded(wired.save(session), WIRE_TIMEOUT + 10)
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None after save() was retried: the "
                "session must still be stored"
            )
            assert [e.content for e in stored.events] == ["exactly-once"], (
                "save() whose replies were lost, retried unchanged, must have landed its event "
                "exactly once: expected ['exactly-once'], found "
                f"{[e.content for e in stored.events[:8]]!r}"
            )
            assert stored.version == version + 1, (
                "save() whose replies were lost, retried unchanged, must take one version step: "
                f"expected version {version + 1}, found {stored.version}"
            )
            await self.check_positions(manager, session_id, 1)

    async def test_wire_one_lost_reply_save_lands_once(self, manager: SessionManager) -> None:
        """A save whose one reply is lost (its request reached the server, then the
        connection reset) either succeeds (re-sent by the backend itself) or raises
        BackendUnavailableError and succeeds when retried: never a conflict with itself,
        and it landed once (one version step, its event once)."""
        async with self.through_proxy(manager) as (proxy, wired):
            session_id = self.new_id()
            session = await wired.create(session_id)
            # One save of the same kind first: a driver that prepares a statement on its
            # first use would otherwise lose the prepare's reply, before anything ran.
            session.add_event("user", "before")
            await wired.save(session)
            version = session.version
            session.add_event("user", "once")
            proxy.mode = ProxyMode.LOSE_NEXT_REPLY
            try:
                await _bounded(wired.save(session), WIRE_TIMEOUT + 10, "save() losing one reply")
            except BackendUnavailableError:
                proxy.mode = ProxyMode.PASS
                await _bounded(wired.save(session), WIRE_TIMEOUT + 10, "save() retried")
            except SessionConflictError as exc:
                pytest.fail(
                    "save() losing one reply raised SessionConflictError: its own write "
                    "landed and was sent again as a new save (a re-send must carry the "
                    f"save's token, and the backend recognise it): {exc}",
                    pytrace=False,
                )
            assert proxy.dropped_replies >= 1, "no reply was lost: the clause proved nothing"
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None after a save() that lost one "
                "reply: the session must still be stored"
            )
            assert [e.content for e in stored.events] == ["before", "once"], (
                "save() that lost one reply must have landed its event exactly once: expected "
                f"['before', 'once'], found {[e.content for e in stored.events[:8]]!r}"
            )
            assert stored.version == version + 1, "the save took more than one version step"
            await self.check_positions(manager, session_id, 2)

    async def test_wire_one_lost_reply_update_applies_fn_once(
        self, manager: SessionManager
    ) -> None:
        """update() whose save loses one reply on the wire applies its function once:
        one event, one version step, and the call succeeds."""
        async with self.through_proxy(manager) as (proxy, wired):
            session_id = self.new_id()
            session = await wired.create(session_id)
            session.add_event("user", "before")  # prepares the save's statement (see above)
            await wired.save(session)
            version = session.version
            calls = 0

            def append(current: Session) -> None:
                nonlocal calls
                calls += 1
                current.add_event("assistant", f"append-{calls}")
                if calls == 1:
                    proxy.mode = ProxyMode.LOSE_NEXT_REPLY  # the save's reply, not the load's

            done = await _bounded(
                wired.update(session_id, append, group=False),
                WIRE_TIMEOUT + 10,
                "update() losing one reply",
            )
            assert proxy.dropped_replies >= 1, "no reply was lost: the clause proved nothing"
            stored = await self.readback(manager, session_id)
            assert stored is not None, (
                f"get({session_id!r}) (read-back) returned None after an update() that lost one "
                "reply: the session must still be stored"
            )
            assert [e.content for e in stored.events] == ["before", "append-1"], (
                "update() applied its function again after one lost reply: the save "
                "that landed was taken for a lost race"
            )
            assert calls == 1 and stored.version == version + 1 == done.version, (
                "update() whose save lost one reply must apply fn once and take one version "
                f"step: expected 1 call and version {version + 1} stored and returned, found "
                f"{calls} calls, stored version {stored.version}, returned version "
                f"{done.version}"
            )
            await self.check_positions(manager, session_id, 2)

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

    async def _every_operation(
        self, manager: SessionManager, wired: SessionManager, operation: str
    ) -> Callable[[], Any]:
        """What *operation* does through *wired*, set up (while traffic flows) so that it
        would succeed: a stored session of 6 events, owned, and a loaded copy of it."""
        if operation in NEEDS:
            self.require(manager, NEEDS[operation])
        owner = self.new_user()
        session = await wired.create(self.new_id(), owner, state={"n": 1})
        for index in range(6):
            session.add_event("user", f"event {index}")
        await wired.save(session)
        target = Target(
            manager=wired,
            session_id=session.session_id,
            owner=owner,
            copy=session,
            create_id=self.new_id(),
            export=_exported(self.new_id(), owner),
            fork_id=self.new_id("fork"),
        )
        return call_of(operation, target)

    @pytest.mark.parametrize("operation", OPERATIONS)
    async def test_wire_frozen_server_every_operation_ends_at_its_deadline(
        self, manager: SessionManager, operation: str
    ) -> None:
        """Against a frozen server each public operation raises BackendTimeoutError
        within its timeout + 1 s: never hangs, never answers as if the store were empty
        (purge_expired may also end at once with nothing to purge, on an engine that
        expires data itself)."""
        async with self.through_proxy(manager) as (proxy, wired):
            call = await self._every_operation(manager, wired, operation)
            proxy.mode = ProxyMode.FREEZE
            await self._expect_outcome(
                f"{operation} against a frozen server", call(), BackendTimeoutError, operation
            )

    @pytest.mark.parametrize("operation", OPERATIONS)
    async def test_wire_outage_every_operation_raises_backend_unavailable(
        self, manager: SessionManager, operation: str
    ) -> None:
        """With every connection to the server reset (an outage), each public operation
        raises BackendUnavailableError within its timeout + 1 s: a read never returns
        None, an empty page or an empty archive instead ("the rule: an outage is an
        error, never an answer"; purge_expired may end at once, as above)."""
        async with self.through_proxy(manager) as (proxy, wired):
            call = await self._every_operation(manager, wired, operation)
            proxy.mode = ProxyMode.RESET
            await self._expect_outcome(
                f"{operation} during an outage", call(), BackendUnavailableError, operation
            )

    async def _expect_outcome(
        self, what: str, call: Any, kind: type[BaseException], operation: str
    ) -> None:
        started = time.monotonic()
        try:
            answer = await _bounded(call, WIRE_TIMEOUT + 10, what)
        except kind:
            took = time.monotonic() - started
            assert took <= WIRE_TIMEOUT + SLACK, (
                f"{what} raised {kind.__name__} only after {took:.1f} s; its deadline "
                f"was {WIRE_TIMEOUT:g} s (the rule: every call ends at its deadline)"
            )
            return
        except BackendUnavailableError as exc:
            pytest.fail(
                f"{what} raised {type(exc).__name__}, expected {kind.__name__}: {exc}",
                pytrace=False,
            )
        if operation in ANSWERABLE_WITHOUT_SERVER:
            return
        pytest.fail(
            f"{what} returned {answer!r} instead of raising {kind.__name__}: with no "
            "server to ask, no answer is the store's (the rule: an outage is an error)",
            pytrace=False,
        )


async def _warm_up(manager: SessionManager) -> None:
    """Open *manager* and connect it to its servers, before any fault: under the short
    deadline a loaded machine can make the first connections (a cluster's topology
    through the proxies) miss it, which proves nothing about faults. A few tries."""
    for attempt in range(_WARM_UP_TRIES):
        try:
            await _bounded(manager.open(), WIRE_TIMEOUT + 10, "open() through the proxies")
            for _ in range(8):  # reads of ids spread over a cluster's slots
                await _bounded(manager.get(f"kit-warm-up-{uuid.uuid4().hex}"), WIRE_TIMEOUT + 10)
            return
        except BackendTimeoutError:
            if attempt == _WARM_UP_TRIES - 1:
                raise


async def _bounded(awaitable: Any, seconds: float, what: str = "a call") -> Any:
    try:
        return await asyncio.wait_for(awaitable, seconds)
    except asyncio.TimeoutError:
        pytest.fail(f"{what} did not return within {seconds:g} s: it hangs", pytrace=False)
