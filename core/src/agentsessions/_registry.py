"""Finding backends: entry points named by URL scheme, loaded through pluggy.

A backend distribution declares, in the entry-point group ``agentsessions.backends``,
one entry per URL scheme it serves, each naming a light plugin module (no driver
import) that implements the `agentsessions_backends` hook. The manager class itself
is named by an import path and imported only when its scheme is used, so
``connect("memory://")`` imports no database driver.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from . import _instrumentation
from ._clock import Clock
from ._errors import (
    BackendConflictError,
    InvalidInputError,
    InvalidOptionError,
    UnknownBackendError,
)
from ._manager import SessionManager
from ._urls import mask_url

__all__ = [
    "BackendSpec",
    "hookimpl",
    "hookspec",
    "installed_backends",
    "connect",
    "register_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "agentsessions.backends"
hookspec = pluggy.HookspecMarker("agentsessions")
hookimpl = pluggy.HookimplMarker("agentsessions")

# Our own backends, so an unknown scheme can say which distribution to install.
_KNOWN_DISTRIBUTIONS = {
    "sqlite": "agentsessions-sqlite",
    "postgresql": "agentsessions-postgres",
    "postgres": "agentsessions-postgres",
    "redis": "agentsessions-redis",
    "rediss": "agentsessions-redis",
    "redis+cluster": "agentsessions-redis",
    "rediss+cluster": "agentsessions-redis",
    "unix": "agentsessions-redis",
    "mongodb": "agentsessions-mongo",
    "mongodb+srv": "agentsessions-mongo",
}


@dataclass(frozen=True)
class BackendSpec:
    """One backend as a plugin describes it.

    ``manager`` is ``"package.module:ClassName"``, imported on first use; or the class
    itself when registered from code.
    """

    schemes: tuple[str, ...]
    manager: str | type[SessionManager]
    distribution: str = "(registered in code)"
    version: str = ""
    description: str = ""
    _loaded: list[type[SessionManager]] = field(default_factory=list, compare=False, repr=False)

    def load(self) -> type[SessionManager]:
        """The manager class, importing its module (and so its driver) now."""
        if not isinstance(self.manager, str):
            return self.manager
        if not self._loaded:
            module_name, _, attr = self.manager.partition(":")
            cls = getattr(importlib.import_module(module_name), attr)
            if not (isinstance(cls, type) and issubclass(cls, SessionManager)):
                raise TypeError(f"{self.manager} is not a SessionManager subclass")
            self._loaded.append(cls)
        return self._loaded[0]


class _HookSpecs:
    @hookspec
    def agentsessions_backends(self) -> list[BackendSpec]:  # type: ignore[empty-body]
        """Return the backends this plugin provides."""


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._from_code: dict[str, BackendSpec] = {}
        self._discovered: dict[str, BackendSpec] | None = None
        self._broken: dict[str, str] = {}

    def _discover(self) -> dict[str, BackendSpec]:
        manager = pluggy.PluginManager("agentsessions")
        manager.add_hookspecs(_HookSpecs)
        claims: dict[str, list[EntryPoint]] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            claims.setdefault(ep.name, []).append(ep)
        for scheme, eps in claims.items():
            owners = sorted({_dist_name(ep) for ep in eps})
            if len(owners) > 1:
                raise BackendConflictError(
                    f"URL scheme {scheme!r} is claimed by several distributions: "
                    f"{', '.join(owners)}; uninstall all but one"
                )
            for ep in eps:
                plugin = ep.load()
                if not manager.is_registered(plugin):
                    manager.register(plugin, name=ep.value)
        found: dict[str, BackendSpec] = {}
        for specs in manager.hook.agentsessions_backends():
            for spec in specs:
                for scheme in spec.schemes:
                    if scheme not in claims:
                        continue  # only schemes declared as entry points are served
                    found[scheme] = spec
        # A scheme declared as an entry point whose plugin does not provide it is a
        # packaging bug of that one distribution: it must not break every other scheme.
        self._broken = {
            scheme: _dist_name(claims[scheme][0]) for scheme in set(claims) - set(found)
        }
        return found

    def all(self) -> dict[str, BackendSpec]:
        with self._lock:
            if self._discovered is None:
                self._discovered = self._discover()
            return {**self._discovered, **self._from_code}

    def broken(self, scheme: str) -> str | None:
        """The distribution that declares *scheme* without providing it, if any."""
        return self._broken.get(scheme)

    def register(self, spec: BackendSpec, replace: bool) -> None:
        with self._lock:
            for scheme in spec.schemes:
                if not replace and scheme in self._from_code:
                    raise BackendConflictError(f"URL scheme {scheme!r} is already registered")
            for scheme in spec.schemes:
                self._from_code[scheme] = spec

    def unregister(self, scheme: str) -> None:
        with self._lock:
            self._from_code.pop(scheme, None)


def _dist_name(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else ep.value


_registry = _Registry()


def installed_backends() -> dict[str, BackendSpec]:
    """Every usable URL scheme and the backend that serves it."""
    return _registry.all()


def register_backend(
    scheme: str | tuple[str, ...], manager: type[SessionManager], *, replace: bool = False
) -> None:
    """Serve *scheme* with *manager* in this process (tests, private backends)."""
    schemes = (scheme,) if isinstance(scheme, str) else scheme
    _registry.register(BackendSpec(schemes=schemes, manager=manager), replace)


def unregister_backend(scheme: str) -> None:
    """Undo `register_backend` for *scheme*."""
    _registry.unregister(scheme)


def scheme_of(url: str) -> str:
    """The URL's scheme, lower-cased; an `InvalidInputError` if there is none."""
    if not isinstance(url, str):
        raise InvalidInputError(f"url must be a str, not {type(url).__name__}")
    scheme, sep, _ = url.partition("://")
    if not sep or not scheme:
        raise InvalidInputError(f"{mask_url(url)!r} is not a URL (expected scheme://...)")
    return scheme.lower()


def connect(
    url: str, *, clock: Clock | None = None, instrument: object = None, **options: Any
) -> SessionManager:
    """A manager for *url*, e.g. ``connect("sqlite:///sessions.db?ttl=3600")``.

    Cheap and synchronous: nothing connects until first use (or ``await manager.open()``).
    Options come from the URL's query string and from keyword arguments. *clock* (an
    `agentsessions.Clock`) replaces the system clock as the source of "now".
    *instrument* turns instrumentation on for this manager: ``True`` (OpenTelemetry),
    a plugin, a plugin's name, or a list of them (see `agentsessions.instrument`).
    """
    if clock is not None and not isinstance(clock, Clock):
        raise InvalidOptionError(
            f"clock must have a now() method (agentsessions.Clock), not {type(clock).__name__}"
        )
    scheme = scheme_of(url)
    backends = installed_backends()
    spec = backends.get(scheme)
    if spec is None:
        broken = _registry.broken(scheme)
        dist = _KNOWN_DISTRIBUTIONS.get(scheme)
        if broken:
            hint = f"{broken} declares it but its plugin does not provide it"
        else:
            hint = f"pip install {dist}" if dist else ""
        raise UnknownBackendError(scheme, backends, hint)
    manager = spec.load().from_url(url, **options)
    if clock is not None:
        manager.clock = clock
    if instrument is not None and instrument is not False:
        plugins = instrument if isinstance(instrument, (list, tuple)) else [instrument]
        _instrumentation.instrument(*plugins, manager=manager)
    return manager
