"""Session hooks for the whole suite: the fault tests' table (testkit/fault_report.py)."""

from __future__ import annotations

import pytest

from testkit import ROOT, fault_report

TIERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration, "e2e": pytest.mark.e2e}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = TIERS.get(item.path.parent.relative_to(ROOT / "tests").parts[0])
        if tier is not None:
            item.add_marker(tier)


def pytest_sessionstart(session: pytest.Session) -> None:
    fault_report.reset()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = fault_report.rows()
    if found:
        terminalreporter.section("faults survived (issue 13)")
        terminalreporter.write_line(fault_report.table(found))
