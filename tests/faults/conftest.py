"""The fault suite prints what it saw: calls, errors by type, lost and doubled saves,
recovery times (one line per scenario), at the end of the run."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from faults._load import REPORT
    from faults._tools import DEADLINES

    if not REPORT and not DEADLINES:
        return
    terminalreporter.section("agentsessions fault suite")
    for what, deadline, slowest, calls in DEADLINES:
        terminalreporter.write_line(
            f"deadline {deadline:g} s, {what}: {calls} calls, slowest {slowest:.2f} s"
        )
    for report in REPORT:
        terminalreporter.write_line(report.line())
    if not REPORT:
        return
    total_calls = sum(report.calls for report in REPORT)
    lost = sum(report.lost for report in REPORT)
    twice = sum(report.applied_twice for report in REPORT)
    terminalreporter.write_line(
        f"total: {len(REPORT)} scenarios, {total_calls} calls, lost={lost}, applied-twice={twice}"
    )
