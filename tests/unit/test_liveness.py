"""Worker liveness (``es_sched.liveness``): the one rule the dispatcher places by and the read
side reports, from when a worker was last heard from."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from es_sched.api.fleet import health_of
from es_sched.dispatch.core.placement import Fleet, WorkerView
from es_sched.liveness import Liveness, heard_at
from es_sched.serialization import wire

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def test_silence_makes_a_worker_suspect_then_dead() -> None:
    rule = Liveness(suspect_after_s=15, dead_after_s=60)
    assert [rule.health(T0, T0 + s(x)) for x in (0, 14.9, 15, 59.9, 60)] == [
        "alive",
        "alive",
        "suspect",
        "suspect",
        "dead",
    ]
    assert rule.health(None, T0) == "dead"  # never heard from


def test_a_report_is_heard_when_read_unless_older_than_a_dead_workers_silence() -> None:
    assert heard_at(T0, T0 + s(59), dead_after_s=60) == T0 + s(59)
    assert heard_at(T0, T0 + s(61), dead_after_s=60) == T0  # a compacted report of long ago
    assert heard_at(None, T0, dead_after_s=60) == T0
    assert heard_at(T0, T0 + s(1), dead_after_s=0) == T0  # the read side: when it was sent
    assert heard_at(T0 + s(1), T0, dead_after_s=0) == T0  # sent "later" (clocks): now


@pytest.mark.parametrize("silence", [0.0, 20.0, 90.0])
def test_the_read_side_reports_the_health_the_dispatcher_places_by(silence: float) -> None:
    rule, now = Liveness(15, 60), T0 + s(silence)
    status = wire.WorkerStatus("w1", "default", "1.0", ["t"], 4, 8000, sent_at=T0.isoformat())
    fleet = Fleet(15, 60)
    view = WorkerView("w1", "default", "1.0", frozenset({"t"}), 4, 8000, last_seen=T0)
    assert health_of(status, rule, now) == fleet.status(view, now) == rule.health(T0, now)


def test_a_report_without_its_time_is_of_unknown_health() -> None:
    status = wire.WorkerStatus("w1", "default", "1.0", ["t"], 4, 8000)
    assert health_of(status, Liveness(), T0) == "unknown"
