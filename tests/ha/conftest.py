"""The failover drills print what they saw (one line per drill) at the end of the run:
writes attempted and acknowledged, acknowledged writes lost, time until a new primary
and until writes succeed again, and the error types seen."""

from __future__ import annotations

import os

import pytest

REQUIRE_SERVERS = os.environ.get("AGENTSESSIONS_REQUIRE_SERVERS") == "1"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from ha._drill import REPORTS

    if not REPORTS:
        return
    terminalreporter.section("agentsessions failover drills")
    for report in REPORTS:
        terminalreporter.write_line(report.line())
