"""Finding backends: entry points named by URL scheme, loaded through pluggy, per scheme.

A backend distribution declares, in the entry-point group ``agentsessions.backends``,
one entry per URL scheme it serves (the entry point's *name* is the scheme), each
naming a light plugin module (no driver import) that implements the
`agentsessions_backends` hook. Nothing is imported until a scheme is used: then only
the entry points of that scheme are loaded, in a plugin manager of their own, so a
plugin that fails to import, fails pluggy's hook validation or claims a scheme
another distribution claims breaks that scheme alone, with an error naming the
distributions and the way out, while every other scheme keeps working.

Precedence when several distributions declare one scheme:

1. ``AGENTSESSIONS_BACKENDS="scheme=distribution,..."`` (the documented override)
   chooses one of them explicitly;
2. else one of our own distributions (``agentsessions``, ``agentsessions-sqlite``, ...)
   keeps its schemes: another distribution's claim is ignored, with a warning that says
   how to choose it instead, so a scheme of ours is never taken over silently;
3. else it is a conflict: that scheme raises `BackendConflictError` naming them all.

`register_backend` (code in the application itself) comes before all of these.
"""

from __future__ import annotations

import importlib
import os
import threading
import warnings
from dataclasses import dataclass, field, replace
from importlib.metadata import EntryPoint, distributions
from typing import TYPE_CHECKING, Any

import pluggy

from . import _instrumentation
from ._clock import Clock
from ._errors import (
    BackendConflictError,
    BackendPluginError,
    InvalidInputError,
    InvalidOptionError,
    SessionError,
    UnknownBackendError,
)
from ._manager import SessionManager
from ._urls import mask_url

if TYPE_CHECKING:
    from .encryption import Keyring

__all__ = [
    "OVERRIDE_ENV",
    "BackendProblem",
    "BackendSpec",
    "backend_problems",
    "connect",
    "hookimpl",
    "hookspec",
    "installed_backends",
    "register_backend",
    "unregister_backend",
]

ENTRY_POINT_GROUP = "agentsessions.backends"
#: The override: ``scheme=distribution`` pairs, comma-separated.
OVERRIDE_ENV = "AGENTSESSIONS_BACKENDS"
#: Marks the hook specification (the core's `agentsessions_backends`).
hookspec = pluggy.HookspecMarker("agentsessions")
#: Marks a plugin's ``agentsessions_backends()``, which returns its `BackendSpec` list.
hookimpl = pluggy.HookimplMarker("agentsessions")

# Our own backends, so an unknown scheme can say which distribution to install.
_KNOWN_DISTRIBUTIONS = {
    "memory": "agentsessions",
    "sqlite": "agentsessions-sqlite",
    "postgresql": "agentsessions-postgres",
    "postgres": "agentsessions-postgres",
    "redis": "agentsessions-redis",
    "rediss": "agentsessions-redis",
    "redis+unix": "agentsessions-redis",
    "unix": "agentsessions-redis",
    "redis+cluster": "agentsessions-redis",
    "rediss+cluster": "agentsessions-redis",
    "redis+sentinel": "agentsessions-redis",
    "rediss+sentinel": "agentsessions-redis",
    "mongodb": "agentsessions-mongo",
    "mongodb+srv": "agentsessions-mongo",
}
_OURS = frozenset(_KNOWN_DISTRIBUTIONS.values())


@dataclass(frozen=True)
class BackendSpec:
    """One backend as a plugin describes it.

    ``manager`` is ``"package.module:ClassName"``, imported on first use; or the class
    itself when registered from code. ``distribution`` and ``version`` are filled in
    from the installed distribution that declared the entry point: a plugin leaves
    them unset (whatever it gave would be replaced).
    """

    schemes: tuple[str, ...]
    manager: str | type[SessionManager]
    distribution: str = "(registered in code)"
    version: str = ""
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


@dataclass(frozen=True)
class BackendProblem:
    """A scheme that cannot be used as installed, or a claim on it that is ignored.

    ``distributions`` are ``"name version"`` of every distribution involved; ``error``
    is what `connect` raises for the scheme (for an ignored claim, the warning's text
    as a `BackendConflictError`, while the scheme itself works).
    """

    scheme: str
    distributions: tuple[str, ...]
    error: SessionError
    usable: bool = False


class _HookSpecs:
    @hookspec
    def agentsessions_backends(self) -> list[BackendSpec]:  # type: ignore[empty-body]
        """Return the backends this plugin provides."""


@dataclass(frozen=True)
class _Claim:
    """One installed distribution's entry point for one scheme."""

    entry_point: EntryPoint
    distribution: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.distribution} {self.version}".rstrip()


def _installed_claims() -> dict[str, list[_Claim]]:
    """Every scheme declared in the group, with the distributions declaring it.

    Reads metadata only (nothing is imported). A distribution found twice on
    ``sys.path`` counts once: the first, as the import system would use.
    """
    claims: dict[str, list[_Claim]] = {}
    for dist in distributions():
        name = dist.metadata["Name"] or "(unnamed distribution)"
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP:
                continue
            found = claims.setdefault(ep.name.lower(), [])
            if all(claim.distribution != name for claim in found):
                found.append(_Claim(ep, name, dist.version or ""))
    return claims


def _overrides() -> dict[str, str]:
    raw = os.environ.get(OVERRIDE_ENV, "")
    chosen: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        scheme, sep, dist = item.partition("=")
        if not sep or not scheme.strip() or not dist.strip():
            raise InvalidOptionError(
                f"{OVERRIDE_ENV}={raw!r}: expected scheme=distribution pairs separated "
                f"by commas, e.g. {OVERRIDE_ENV}=redis=acme-redis"
            )
        chosen[scheme.strip().lower()] = dist.strip()
    return chosen


def _same_dist(a: str, b: str) -> bool:
    def norm(name: str) -> str:
        return name.lower().replace("_", "-").replace(".", "-")

    return norm(a) == norm(b)


class _Registry:
    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._from_code: dict[str, BackendSpec] = {}
        self._claims: dict[str, list[_Claim]] | None = None
        self._resolved: dict[str, BackendSpec | BackendProblem] = {}
        self._ignored: dict[str, BackendProblem] = {}

    def claims(self) -> dict[str, list[_Claim]]:
        with self._lock:
            if self._claims is None:
                self._claims = _installed_claims()
            return self._claims

    def resolve(self, scheme: str) -> BackendSpec | BackendProblem | None:
        """What serves *scheme*: a spec, the problem that stops it, or None (undeclared)."""
        with self._lock:
            if scheme in self._from_code:
                return self._from_code[scheme]
            if scheme not in self._resolved:
                claims = self.claims().get(scheme)
                if not claims:
                    return None
                self._resolved[scheme] = self._resolve(scheme, claims)
            return self._resolved[scheme]

    def _resolve(self, scheme: str, claims: list[_Claim]) -> BackendSpec | BackendProblem:
        labels = tuple(claim.label for claim in claims)
        try:
            claim = self._choose(scheme, claims)
            return _load(scheme, claim, single=len(claims) == 1)
        except (BackendConflictError, BackendPluginError, InvalidOptionError) as exc:
            return BackendProblem(scheme, labels, exc)

    def _choose(self, scheme: str, claims: list[_Claim]) -> _Claim:
        wanted = _overrides().get(scheme)
        if wanted is not None:
            for claim in claims:
                if _same_dist(claim.distribution, wanted):
                    return claim
            raise BackendConflictError(
                f"{OVERRIDE_ENV} chooses {wanted!r} for URL scheme {scheme!r}, but it is "
                f"declared only by {', '.join(c.label for c in claims)}"
            )
        if len(claims) == 1:
            return claims[0]
        ours = [c for c in claims if any(_same_dist(c.distribution, name) for name in _OURS)]
        if len(ours) == 1:
            others = [claim for claim in claims if claim is not ours[0]]
            message = (
                f"URL scheme {scheme!r} is also declared by "
                f"{', '.join(c.label for c in others)}; it is ignored and {ours[0].label} "
                f"serves {scheme}://. To use {others[0].distribution} instead, set "
                f"{OVERRIDE_ENV}={scheme}={others[0].distribution}"
            )
            self._ignored[scheme] = BackendProblem(
                scheme, tuple(c.label for c in claims), BackendConflictError(message), True
            )
            warnings.warn(message, RuntimeWarning, stacklevel=5)
            return ours[0]
        raise BackendConflictError(
            f"URL scheme {scheme!r} is declared by several distributions: "
            f"{', '.join(c.label for c in claims)}. Uninstall all but one, or choose one "
            f"with {OVERRIDE_ENV}={scheme}={claims[0].distribution}"
        )

    def all(self) -> tuple[dict[str, BackendSpec], list[BackendProblem]]:
        with self._lock:
            schemes = set(self.claims()) | set(self._from_code)
            specs: dict[str, BackendSpec] = {}
            problems: list[BackendProblem] = []
            for scheme in sorted(schemes):
                found = self.resolve(scheme)
                if isinstance(found, BackendSpec):
                    specs[scheme] = found
                elif isinstance(found, BackendProblem):
                    problems.append(found)
            problems.extend(self._ignored[s] for s in sorted(self._ignored) if s in specs)
            return specs, problems

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


def _load(scheme: str, claim: _Claim, *, single: bool) -> BackendSpec:
    """Load *claim*'s plugin in a plugin manager of its own and take its spec for *scheme*.

    A lone claim is loaded by pluggy's own entry-point loader, by name; one chosen among
    several is loaded directly (pluggy's loader would take whichever it meets first).
    Either way pluggy validates the hook implementation against our hookspec.
    """
    plugins = pluggy.PluginManager("agentsessions")
    plugins.add_hookspecs(_HookSpecs)
    try:
        if single:
            plugins.load_setuptools_entrypoints(ENTRY_POINT_GROUP, name=claim.entry_point.name)
        else:
            plugins.register(claim.entry_point.load(), name=scheme)
        plugins.check_pending()
        provided = plugins.hook.agentsessions_backends()
    except Exception as exc:
        raise _broken(scheme, claim, f"{type(exc).__name__}: {exc}") from exc
    for specs in provided:
        for spec in specs if isinstance(specs, list | tuple) else ():
            if isinstance(spec, BackendSpec) and scheme in spec.schemes:
                return replace(spec, distribution=claim.distribution, version=claim.version)
    raise _broken(
        scheme,
        claim,
        f"its plugin {claim.entry_point.value} returns no BackendSpec for {scheme!r}",
    )


def _broken(scheme: str, claim: _Claim, reason: str) -> BackendPluginError:
    return BackendPluginError(
        scheme,
        (claim.label,),
        f"the plugin of {claim.label} for URL scheme {scheme!r} is broken: {reason}. "
        f"Reinstall or upgrade {claim.distribution}, or uninstall it",
    )


_registry = _Registry()


def installed_backends() -> dict[str, BackendSpec]:
    """Every usable URL scheme and the backend that serves it (see `backend_problems`)."""
    return _registry.all()[0]


def backend_problems() -> list[BackendProblem]:
    """Schemes that are declared but unusable (broken or conflicting plugins), and
    claims that are ignored because one of our own distributions serves the scheme."""
    return _registry.all()[1]


def register_backend(
    scheme: str | tuple[str, ...], manager: type[SessionManager], *, replace: bool = False
) -> None:
    """Serve *scheme* with *manager* in this process (tests, private backends); it takes
    precedence over every installed distribution."""
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


def _manager_class(scheme: str, spec: BackendSpec) -> type[SessionManager]:
    try:
        return spec.load()
    except Exception as exc:
        raise BackendPluginError(
            scheme,
            (f"{spec.distribution} {spec.version}".rstrip(),),
            f"{spec.distribution} {spec.version} serves URL scheme {scheme!r} but its "
            f"manager {spec.manager} cannot be loaded: {type(exc).__name__}: {exc}. "
            f"Reinstall {spec.distribution} (with its dependencies)",
        ) from exc


def connect(
    url: str,
    *,
    clock: Clock | None = None,
    instrument: object = None,
    encryption: Keyring | None = None,
    **options: Any,
) -> SessionManager:
    """A manager for *url*, e.g. ``connect("sqlite:///sessions.db?ttl=3600")``.

    Cheap and synchronous: nothing connects until first use (or ``await manager.open()``).
    Options come from the URL's query string and from keyword arguments. *clock* (an
    `agentsessions.Clock`) replaces the system clock as the source of "now".
    *instrument* turns instrumentation on for this manager: ``True`` (OpenTelemetry),
    a plugin, a plugin's name, or a list of them (see `agentsessions.instrument`).
    Only the plugins declaring the URL's scheme are loaded. *encryption* (an
    `agentsessions.encryption.Keyring`) encrypts event content and metadata and the
    state before the backend sees them (``pip install "agentsessions[encryption]"``).
    """
    if clock is not None and not isinstance(clock, Clock):
        raise InvalidOptionError(
            f"clock must have a now() method (agentsessions.Clock), not {type(clock).__name__}"
        )
    if encryption is not None and not _is_keyring(encryption):
        raise InvalidOptionError(
            "encryption must be an agentsessions.encryption.Keyring, not "
            f"{type(encryption).__name__}"
        )
    scheme = scheme_of(url)
    found = _registry.resolve(scheme)
    if found is None:
        dist = _KNOWN_DISTRIBUTIONS.get(scheme)
        known = set(_registry.claims()) | set(_registry._from_code)
        raise UnknownBackendError(scheme, known, f"pip install {dist}" if dist else "")
    if isinstance(found, BackendProblem):
        raise found.error.with_traceback(None)
    manager = _manager_class(scheme, found).from_url(url, **options)
    if clock is not None:
        manager.clock = clock
    if encryption is not None:
        manager.encryption = encryption
    if instrument is not None and instrument is not False:
        plugins = instrument if isinstance(instrument, (list, tuple)) else [instrument]
        _instrumentation.instrument(*plugins, manager=manager)
    return manager


def _is_keyring(value: object) -> bool:
    # Imported only when asked for: the encryption module needs the optional cryptography.
    from .encryption import Keyring

    return isinstance(value, Keyring)
