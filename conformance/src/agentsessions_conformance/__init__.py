"""The agentsessions conformance kit: check any backend against the SessionManager contract.

Subclass `SessionManagerTests` in a test module and give it one async ``manager``
fixture, or run ``pytest -p agentsessions_conformance --session-url URL``. See the
README for capabilities, ``known_divergences`` and the JSON report.

The suite is imported on first access: pytest loads this package's plugin in every
run of a project that has the kit installed, and that must stay cheap and must not
import the clause modules before assertion rewriting is set up for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._state import BackendInfo, ClauseResult

if TYPE_CHECKING:
    from ._runner import ConformanceRun, run
    from ._suite import SessionManagerTests

__all__ = ["BackendInfo", "ClauseResult", "ConformanceRun", "SessionManagerTests", "run"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "SessionManagerTests":
        from ._suite import SessionManagerTests

        return SessionManagerTests
    if name in ("ConformanceRun", "run"):
        from . import _runner

        return getattr(_runner, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
