"""The analytics role's publishing rule (ADR 64): each changed key once per tick, never a
window that closed longer ago than windows are kept."""

from __future__ import annotations

import pytest

from es_sched.analytics import Analytics
from es_sched.domain import analytics as fold
from es_sched.domain.learned import FailureRate, RunStats
from testkit.settings import settings_with

pytestmark = pytest.mark.unit


def test_publishes_changed_keys_once_and_skips_stale_windows() -> None:
    settings = settings_with(
        {"ES_SCHED_ANALYTICS_WINDOW_S": "60", "ES_SCHED_ANALYTICS_KEEP_WINDOWS": "2"}
    )
    role = Analytics(settings)
    now = 10_000.0
    acc = fold.empty()
    acc = {**acc, "outcomes": 2, "failures": 1, "run": [[1, 3.0]], "wait": [[1, 0.5]]}
    role._pending = {
        "runtime|t|any": ("runtime", "t", "any", now + 30, acc),
        "version|t|1.0": ("version", "t", "1.0", now - 60, acc),  # closed a window ago: kept
        "worker|t|w1": ("worker", "t", "w1", now - 121, acc),  # closed beyond 2 windows
    }
    due = dict(role._due(now))
    assert set(due) == {"runtime|t|any", "version|t|1.0"}
    runtime, version = due["runtime|t|any"], due["version|t|1.0"]
    assert isinstance(runtime, RunStats) and runtime.run_p95_s == 3.0 and runtime.samples == 1
    assert isinstance(version, FailureRate) and version.failure_rate == 0.5
    assert role._due(now) == []  # nothing changed since
