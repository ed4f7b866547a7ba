"""The one table of operator actions by workflow status (ADR 59), as Conductor's rules say."""

from __future__ import annotations

import pytest

from es_sched.domain.actions import ORDER, RULES, permits, state_refusal

pytestmark = pytest.mark.unit

STATUSES = ("RUNNING", "PAUSED", "COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED")
EXPECTED = {
    "retry": {"FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"},
    "restart": {"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"},
    "rerun": {"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"},
    "pause": {"RUNNING"},
    "resume": {"PAUSED"},
    "terminate": {"RUNNING", "PAUSED"},
    "cancel": {"RUNNING", "PAUSED"},
    "signal": {"RUNNING", "PAUSED"},
    "review": {"RUNNING", "PAUSED"},  # a parked task's retry or fail (ADR 71)
}


@pytest.mark.parametrize("action", sorted(EXPECTED))
def test_each_action_applies_to_conductors_statuses_only(action: str) -> None:
    allowed = {s for s in STATUSES if permits(action, s)}
    assert allowed == EXPECTED[action]
    for status in STATUSES:
        why = state_refusal(action, status)
        assert (why is None) == (status in allowed)
        if why is not None:  # the reason names what it needs and what it found
            assert f"it is {status}" in why and "only a" in why


def test_every_action_needs_an_operator_and_unknown_ones_are_refused() -> None:
    assert set(ORDER) == set(RULES) == set(EXPECTED)
    assert {rule.role for rule in RULES.values()} == {"operator"}
    assert not permits("explode", "RUNNING")
    assert "unknown action 'explode'" in (state_refusal("explode", "RUNNING") or "")
