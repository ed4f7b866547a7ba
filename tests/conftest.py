"""Session hooks for the whole suite: the fault tests' table (testkit/fault_report.py)."""

from __future__ import annotations

import pytest

from testkit import fault_report


def pytest_sessionstart(session: pytest.Session) -> None:
    fault_report.reset()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = fault_report.rows()
    if found:
        terminalreporter.section("faults survived (issue 13)")
        terminalreporter.write_line(fault_report.table(found))
