"""The analytics role's pure fold (ADR 64): task facts between events, outcomes, windows,
bounded samples, nearest-rank percentiles and failure rates by worker, host and version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from es_sched.domain import analytics as fold
from es_sched.domain.events import (
    Event,
    LeaseExpired,
    Payload,
    TaskCanceled,
    TaskCompleted,
    TaskDispatched,
    TaskFailed,
    TaskScheduled,
    TaskStarted,
    TaskTimedOut,
    WorkflowPaused,
)
from es_sched.domain.learned import CUT_BY_TIMEOUT, FailureRate, RunStats

pytestmark = pytest.mark.unit
T0 = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
WORKERS = {"w1": ("host-a", "1.4.0")}
MEDIA_INPUT = {"height": 720, "codec": "h264", "duration_s": 42}


def ev(payload: Payload, at_s: float, workflow_id: str = "wf") -> Event:
    return Event("e", workflow_id, 1, T0 + timedelta(seconds=at_s), "c", "c", payload)


def scheduled(task_id: str = "t1", task_input: dict[str, Any] | None = None) -> TaskScheduled:
    return TaskScheduled(task_id, "r", "r", "transcode", "transcode", 1, task_input or {})


def run(events: list[Event]) -> tuple[dict[str, Any] | None, list[fold.Outcome]]:
    facts: dict[str, Any] | None = None
    outcomes = []
    for e in events:
        facts, out = fold.track(facts, e, WORKERS)
        if out is not None:
            outcomes.append(out)
    return facts, outcomes


def test_a_completed_task_yields_its_run_time_wait_and_worker() -> None:
    facts, [out] = run(
        [
            ev(scheduled(task_input=MEDIA_INPUT), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 4),
            ev(TaskStarted("t1", "w1"), 5),
            ev(TaskCompleted("t1", {}), 15),
        ]
    )
    assert facts is None  # forgotten once ended
    assert out.ok and out.run_s == 10.0 and out.wait_s == 4.0  # run from its start
    assert (out.task_type, out.size_class) == ("transcode", "h720-d60-h264")
    assert (out.worker_id, out.host, out.version) == ("w1", "host-a", "1.4.0")
    assert fold.Outcome.from_record(out.to_record()) == out


def test_run_time_counts_from_dispatch_when_the_worker_never_said_started() -> None:
    _, [out] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w9", 1, "l"), 1),
            ev(TaskCompleted("t1", {}), 7),
        ]
    )
    assert out.run_s == 6.0
    assert (out.host, out.version) == (fold.UNKNOWN, fold.UNKNOWN)  # no record of w9


def test_failures_carry_a_bounded_reason_and_time_outs_their_kind() -> None:
    long_reason = "x" * 200 + ": detail"
    _, [failed] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 1),
            ev(TaskFailed("t1", long_reason), 2),
        ]
    )
    assert not failed.ok and failed.run_s is None
    assert failed.reason == "x" * fold.REASON_CHARS
    _, [timed_out] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 1),
            ev(TaskTimedOut("t1", "response"), 9),
        ]
    )
    assert timed_out.reason == "timed_out_response"
    _, [host] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 1),
            ev(TaskFailed("t1", "disk full: /tmp", host_fault=True), 2),
        ]
    )
    assert host.reason == "host_fault"


def test_a_terminal_failure_is_the_inputs_and_counts_against_no_worker() -> None:
    _, [out] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 1),
            ev(TaskFailed("t1", "bad input: no such file", terminal=True), 2),
        ]
    )
    assert out.input_fault
    assert fold.subjects(out) == [("runtime", "any")]


def test_an_expired_lease_fails_the_worker_and_the_task_waits_again() -> None:
    facts, [lost] = run(
        [
            ev(scheduled(), 0),
            ev(TaskDispatched("t1", 1, "w1", 1, "l"), 2),
            ev(LeaseExpired("t1", 1), 30),
        ]
    )
    assert lost.reason == "lease_expired" and lost.worker_id == "w1"
    assert facts is not None and facts["scheduled_at"] == (T0 + timedelta(seconds=30)).timestamp()
    facts, out = fold.track(facts, ev(TaskDispatched("t1", 1, "w2", 2, "l"), 31), WORKERS)
    facts, out = fold.track(facts, ev(TaskCompleted("t1", {}), 41), WORKERS)
    assert out is not None and out.ok and out.wait_s == 1.0 and out.worker_id == "w2"


def test_nothing_is_counted_for_system_tasks_cancels_strangers_and_repeats() -> None:
    # a system task: scheduled, completed, never dispatched
    assert run([ev(scheduled(), 0), ev(TaskCompleted("t1", {}), 1)]) == (None, [])
    assert run([ev(scheduled(), 0), ev(TaskCanceled("t1", "terminated"), 1)]) == (None, [])
    # an end whose task this role never saw (or already counted: a redelivered completion)
    assert fold.track(None, ev(TaskCompleted("t1", {}), 1), WORKERS) == (None, None)
    # an event that is not about a task's run keeps the facts
    facts = {"type": "x", "size": "any", "attempt": 1, "scheduled_at": 0.0}
    assert fold.track(facts, ev(WorkflowPaused(), 1), WORKERS) == (facts, None)


def test_a_task_that_timed_out_in_the_queue_is_a_failure_of_its_type_only() -> None:
    _, [out] = run([ev(scheduled(), 0), ev(TaskTimedOut("t1", "total"), 60)])
    assert out.worker_id == fold.UNKNOWN and out.wait_s is None
    assert fold.subjects(out) == [("runtime", "any")]


def outcome(i: int, run_s: float | None, wait_s: float = 1.0, reason: str = "") -> fold.Outcome:
    return fold.Outcome(
        task_id=f"t{i}",
        attempt=1,
        task_type="transcode",
        size_class="any",
        ended_at=100.0,
        ok=run_s is not None,
        run_s=run_s,
        wait_s=wait_s,
        reason=reason,
        worker_id="w1",
        host="host-a",
        version="1.4.0",
    )


def test_percentiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(20, 0, -1)]
    assert fold.percentile(values, 0.50) == 10.0
    assert fold.percentile(values, 0.95) == 19.0
    assert fold.percentile(values, 0.99) == 20.0
    assert fold.percentile([3.0], 0.95) == 3.0
    assert fold.percentile([], 0.95) == 0.0


def test_a_window_proposes_run_stats_with_failures_by_reason() -> None:
    acc: dict[str, Any] | None = None
    for i in range(20):
        acc = fold.add(acc, "runtime", outcome(i, float(i + 1), wait_s=0.5 * (i + 1)), 512)
    acc = fold.add(acc, "runtime", outcome(20, None, reason="ffmpeg exited 1"), 512)
    acc = fold.add(acc, "runtime", outcome(21, None, reason="timed_out_response"), 512)
    end = datetime(2026, 12, 7, 12, 5, tzinfo=UTC)
    stats = fold.figures(acc, "runtime", "transcode", "any", end)
    assert isinstance(stats, RunStats)
    assert (stats.run_p50_s, stats.run_p95_s, stats.run_p99_s) == (10.0, 19.0, 20.0)
    assert (stats.samples, stats.failures) == (20, 2)
    assert stats.failure_rate == pytest.approx(2 / 22)
    assert stats.failures_by_reason == {"ffmpeg exited 1": 1, "timed_out_response": 1}
    assert stats.window_end == end.isoformat() and stats.key == "runtime|transcode|any"


def test_failure_rates_by_worker_host_and_version() -> None:
    ok, bad = outcome(1, 2.0), outcome(2, None, reason="boom")
    assert fold.subjects(ok) == [
        ("runtime", "any"),
        ("worker", "w1"),
        ("host", "host-a"),
        ("version", "1.4.0"),
    ]
    acc = fold.add(
        fold.add(fold.add(None, "version", ok, 10), "version", bad, 10),
        "version",
        outcome(3, 1.0),
        10,
    )
    rate = fold.figures(acc, "version", "transcode", "1.4.0", T0)
    assert rate == FailureRate("version", "transcode", "1.4.0", T0.isoformat(), 3, 1, 1 / 3)
    assert acc["run"] == []  # failure-rate keys keep no samples


def test_the_sample_is_bounded_deterministic_and_ignores_a_repeat() -> None:
    size = 16
    acc: dict[str, Any] | None = None
    for i in range(1000):
        acc = fold.add(acc, "runtime", outcome(i, float(i)), size)
    assert acc is not None and len(acc["run"]) == size and acc["outcomes"] == 1000
    hashes = sorted(fold.sample_hash(f"t{i}", 1) for i in range(1000))[:size]
    assert sorted(int(h) for h, _ in acc["run"]) == hashes  # the bottom-k by hash
    again = fold.add(acc, "runtime", outcome(int(acc["run"][0][1]), acc["run"][0][1]), size)
    assert again["run"] == acc["run"]  # a redelivered outcome takes no second slot
    p95 = fold.figures(acc, "runtime", "transcode", "any", T0)
    assert isinstance(p95, RunStats) and 800 <= p95.run_p95_s <= 1000  # a uniform sample


def test_distinct_failure_reasons_are_capped() -> None:
    acc: dict[str, Any] | None = None
    for i in range(fold.MAX_REASONS + 5):
        acc = fold.add(acc, "runtime", outcome(i, None, reason=f"r{i}"), 8)
    assert acc is not None
    assert len(acc["reasons"]) == fold.MAX_REASONS + 1
    assert acc["reasons"]["other"] == 5
    # a run cut by its total timeout keeps its own count past the cap (timeouts.censored)
    acc = fold.add(acc, "runtime", outcome(99, None, reason=CUT_BY_TIMEOUT), 8)
    assert (acc["reasons"][CUT_BY_TIMEOUT], acc["reasons"]["other"]) == (1, 5)


def test_windows_are_aligned_tumbling() -> None:
    assert fold.window_start(1000.0, 300) == 900.0
    assert fold.window_start(1200.0, 300) == 1200.0
    assert fold.reason_class("ffmpeg exited 1: invalid data") == "ffmpeg exited 1"
    assert fold.reason_class(": nothing") == "failed"


def test_measured_cost_is_learned_as_the_median_ratio_and_p95_memory() -> None:
    ratios = []
    acc: dict[str, Any] | None = None
    for i, ratio in enumerate([0.5, 0.6, 0.7, 2.0, 0.65]):
        cost = {"ratio": ratio, "peak_memory_mb": 100.0 + 10 * i, "model": "media-cost/1"}
        _, [out] = run(
            [
                ev(scheduled(f"t{i}", MEDIA_INPUT), 0),
                ev(TaskDispatched(f"t{i}", 1, "w1", 1, "l"), 1),
                ev(TaskCompleted(f"t{i}", {"cost": cost}), 5),
            ]
        )
        assert fold.Outcome.from_record(out.to_record()) == out
        ratios.append(out.cost_ratio)
        acc = fold.add(acc, "runtime", out, 512)
    assert ratios == [0.5, 0.6, 0.7, 2.0, 0.65]
    assert acc is not None
    stats = fold.figures(acc, "runtime", "transcode", "h720-d60-h264", T0)
    assert isinstance(stats, RunStats)
    assert stats.cost_ratio == 0.65  # the median: one slow run does not move it
    assert stats.memory_p95_mb == 140.0


def test_no_cost_block_or_a_nonsense_one_learns_no_cost() -> None:
    for output in ({}, {"cost": "fast"}, {"cost": {"ratio": -1, "peak_memory_mb": "x"}}):
        _, [out] = run(
            [
                ev(scheduled(task_input=MEDIA_INPUT), 0),
                ev(TaskDispatched("t1", 1, "w1", 1, "l"), 1),
                ev(TaskCompleted("t1", output), 5),
            ]
        )
        assert (out.cost_ratio, out.peak_memory_mb) == (None, None)
    stats = fold.figures(fold.add(None, "runtime", out, 512), "runtime", "t", "any", T0)
    assert isinstance(stats, RunStats)
    assert (stats.cost_ratio, stats.memory_p95_mb) == (None, None)


def test_an_outcome_delivered_again_is_counted_once_in_every_kind() -> None:
    ok, bad = outcome(1, 2.0), outcome(2, None, reason="boom")
    for kind in ("runtime", "version"):
        acc: dict[str, Any] | None = None
        for o in (ok, bad, ok, bad):
            acc = fold.add(acc, kind, o, 512)
        assert acc is not None and (acc["outcomes"], acc["failures"]) == (2, 1), kind
