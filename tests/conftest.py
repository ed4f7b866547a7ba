"""Session hooks for the whole suite: the fault tests' table (testkit/fault_report.py)."""

from __future__ import annotations

import pytest

from testkit import ROOT, fault_report

TIERS = {"unit": pytest.mark.unit, "integration": pytest.mark.integration, "e2e": pytest.mark.e2e}
# The longest modules (minutes each, mostly waiting on the system they load) go first, so that
# under ``pytest -n`` (``make test``) the rest of the suite runs beside them rather than after.
FIRST = (
    "test_role_faults.py",
    "test_broker_faults.py",
    "test_cluster.py",
    "test_secured_kafka.py",
    "test_api_schema.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = TIERS.get(item.path.parent.relative_to(ROOT / "tests").parts[0])
        if tier is not None:
            item.add_marker(tier)
    rank = {name: i for i, name in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(FIRST)))  # stable: else as found


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # once, in the run's controlling process
        fault_report.reset()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = fault_report.rows()
    if found:
        terminalreporter.section("faults survived (issue 13)")
        terminalreporter.write_line(fault_report.table(found))
