"""What the plugin remembers during a run: the backend under test and each clause's outcome.

Kept apart from the plugin hooks so the harness fixture can record into it, and apart
from the suite so that loading the plugin (which pytest does in every run, through the
``pytest11`` entry point) imports neither the clause tests nor a backend.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from agentsessions import SessionManager

__all__ = ["BackendInfo", "ClauseResult", "Recorder", "recorder_of", "RECORDER_KEY"]


@dataclass(frozen=True)
class BackendInfo:
    """The backend a suite ran against; ``url`` is masked (no password)."""

    manager_class: str
    url: str
    capabilities: dict[str, Any]

    @classmethod
    def of(cls, manager: SessionManager) -> BackendInfo:
        kind = type(manager)
        return cls(
            manager_class=f"{kind.__module__}.{kind.__qualname__}",
            url=manager.url,
            capabilities=asdict(manager.capabilities),
        )

    def describe(self) -> str:
        flags = ", ".join(f"{name}={value}" for name, value in self.capabilities.items())
        return f"{self.manager_class} at {self.url} ({flags})"


@dataclass
class ClauseResult:
    """One clause test's outcome, as the JSON report and the CLI table show it."""

    suite: str
    test: str
    clause: str
    outcome: str = "not run"
    duration: float = 0.0
    message: str = ""
    nodeid: str = ""


@dataclass(eq=False)  # registered as a pytest plugin object, which must be hashable
class Recorder:
    """Collects backends and outcomes of every `SessionManagerTests` subclass in the run."""

    backends: dict[str, BackendInfo] = field(default_factory=dict)
    results: dict[str, ClauseResult] = field(default_factory=dict)
    #: The backend of ``--session-url`` mode, known before any test runs.
    url_backend: BackendInfo | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Registered as a plugin object, so it sees every phase report of the run."""
        self.record_report(report)

    def expect(self, item: pytest.Item, suite: str, clause: str) -> None:
        self.results[item.nodeid] = ClauseResult(
            suite=suite, test=item.name, clause=clause, nodeid=item.nodeid
        )

    def record_backend(self, item: pytest.Item, info: BackendInfo) -> None:
        result = self.results.get(item.nodeid)
        if result is not None:
            self.backends.setdefault(result.suite, info)

    def record_report(self, report: pytest.TestReport) -> None:
        result = self.results.get(report.nodeid)
        if result is None:
            return
        result.duration += report.duration
        outcome = _outcome(report)
        if outcome is None:
            return
        # Setup decides for skips; call decides normally; a teardown error still counts.
        if report.when == "teardown" and outcome != "error":
            if result.outcome == "not run":
                result.outcome = outcome
            return
        result.outcome = outcome
        result.message = _message(report)

    def to_json(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for result in self.results.values():
            counts[result.outcome] = counts.get(result.outcome, 0) + 1
        return {
            "url_backend": None if self.url_backend is None else asdict(self.url_backend),
            "backends": {suite: asdict(info) for suite, info in self.backends.items()},
            "summary": counts,
            "clauses": [asdict(result) for result in self.results.values()],
        }

    def write(self, path: str | os.PathLike[str]) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(self.to_json(), indent=2) + "\n", encoding="utf-8")


def _outcome(report: pytest.TestReport) -> str | None:
    if hasattr(report, "wasxfail"):
        if report.skipped:
            return "xfailed"
        # A strict xfail that passed is reported as failed by pytest itself.
        return "xpassed" if report.passed else "failed"
    if report.when == "call":
        return report.outcome
    if report.failed:
        return "error"
    if report.skipped:
        return "skipped"
    return None


def _message(report: pytest.TestReport) -> str:
    wasxfail = getattr(report, "wasxfail", None)
    if report.skipped:
        if wasxfail is not None:
            return f"known divergence: {wasxfail}".rstrip(": ")
        longrepr = report.longrepr
        if isinstance(longrepr, tuple):
            return str(longrepr[2]).removeprefix("Skipped: ")
        return str(longrepr)
    if report.failed:
        # A strict xfail that passed carries "[XPASS(strict)] reason" as a plain string.
        crash = getattr(report.longrepr, "reprcrash", None)
        if crash is not None:
            return str(crash.message)
        return report.longreprtext.strip().splitlines()[-1] if report.longreprtext else ""
    return ""


RECORDER_KEY = pytest.StashKey[Recorder]()


def recorder_of(config: pytest.Config) -> Recorder | None:
    """The run's recorder, or None when the plugin is not loaded."""
    return config.stash.get(RECORDER_KEY, None)
