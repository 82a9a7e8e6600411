"""Run the kit against a URL in this process and hand back each clause's outcome.

This is what ``agentsessions conformance URL`` uses. Running pytest in-process keeps
the URL (and any password in it) out of a child process's command line, and the
results come straight from the plugin's recorder instead of a parsed file.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ._state import BackendInfo, ClauseResult, recorder_of

__all__ = ["ConformanceRun", "run"]

# The caller's project configuration (addopts, plugins, conftest files) must not leak
# into a conformance run, so pytest gets an ini file of its own in a scratch rootdir.
_INI = """\
[pytest]
asyncio_default_fixture_loop_scope = function
xfail_strict = true
"""


@dataclass
class ConformanceRun:
    """The outcome of one run: pytest's exit code, the backend, every clause's result."""

    exit_code: int
    backend: BackendInfo | None = None
    results: list[ClauseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and bool(self.results)


class _Collector:
    def __init__(self) -> None:
        self.backend: BackendInfo | None = None
        self.results: list[ClauseResult] = []

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        recorder = recorder_of(session.config)
        if recorder is not None:
            self.backend = recorder.url_backend
            self.results = list(recorder.results.values())


def run(
    url: str,
    *,
    keyword: str | None = None,
    report: str | Path | None = None,
    pytest_args: Sequence[str] = (),
) -> ConformanceRun:
    """Run the whole kit (or the clauses matching *keyword*, as ``-k``) against *url*."""
    collector = _Collector()
    with tempfile.TemporaryDirectory(prefix="agentsessions-conformance-") as scratch:
        ini = Path(scratch) / "pytest.ini"
        ini.write_text(_INI, encoding="utf-8")
        args = [
            "-c",
            str(ini),
            "--rootdir",
            scratch,
            "-p",
            "agentsessions_conformance",
            "-p",
            "no:cacheprovider",
            "--session-url",
            url,
            "-q",
            "--tb=no",
            "--no-header",
            # The caller imported this package before pytest started; the clause modules
            # themselves are still rewritten, so the warning about the package is noise.
            "-W",
            "ignore::pytest.PytestAssertRewriteWarning",
        ]
        if keyword:
            args += ["-k", keyword]
        if report is not None:
            args += ["--conformance-report", str(report)]
        args += list(pytest_args)
        exit_code = int(pytest.main(args, plugins=[collector]))
    return ConformanceRun(exit_code, collector.backend, collector.results)
