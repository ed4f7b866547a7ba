"""Dynamic timeouts in the pure core (ADR 65): a TaskDef's ``dynamicTimeout`` sets a worker
task's total timeout from the learned run time of its type and size class (percentile x
factor, clamped to [floor, ceiling]), falls back to the static ``timeoutSeconds`` until enough
runs were measured, records what it used in ``task.scheduled``, and the timers come from that
record; bad policies are refused with a reason."""

from __future__ import annotations

import dataclasses
import math
from datetime import timedelta
from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.effects import SetTimer, effects
from es_sched.domain.events import TaskScheduled, TaskTimedOut
from es_sched.domain.learned import CUT_BY_TIMEOUT, RunStats
from es_sched.domain.timeouts import Learned
from es_sched.domain.validation import validate_workflow
from es_sched.serialization import decode_event, encode_event
from tests.unit.domain.harness import Driver, task, workflow

POLICY = {"floorSeconds": 1, "ceilingSeconds": 600, "minSamples": 5}
RENDER = {
    "name": "render",
    "retryCount": 1,
    "retryDelaySeconds": 0,
    "timeoutSeconds": 3600,
    "timeoutPolicy": "RETRY",
    "dynamicTimeout": POLICY,
}
FLOW = workflow(task("r", "render"))


def stats(p95: float, samples: int = 40, size: str = "any", p99: float = 0.0) -> RunStats:
    return RunStats(
        task_type="render",
        size_class=size,
        window_end="2026-03-01T11:55:00Z",
        samples=samples,
        run_p50_s=p95 / 2,
        run_p95_s=p95,
        run_p99_s=p99 or p95 * 1.5,
        wait_p50_s=0.1,
        wait_p95_s=0.2,
        failures=0,
        failure_rate=0.0,
    )


class Lookup:
    """A stats view that answers ``current`` and remembers what it was asked."""

    def __init__(self, current: RunStats | None) -> None:
        self.current = current
        self.asked: list[tuple[str, str]] = []

    def __call__(self, task_type: str, size_class: str) -> RunStats | None:
        self.asked.append((task_type, size_class))
        return self.current


def scheduled(d: Driver, ref: str = "r") -> TaskScheduled:
    found = [
        e.payload for e in d.events if isinstance(e.payload, TaskScheduled) and e.payload.ref == ref
    ]
    return found[-1]


def run(learned: Learned | None, taskdef: dict[str, Any] = RENDER, **kw: Any) -> Driver:
    return Driver(FLOW, taskdefs=[taskdef], learned=learned, **kw)


def test_the_learned_p95_times_the_factor_is_recorded_and_timed() -> None:
    view = Lookup(stats(2.0))
    d = run(view)
    assert view.asked == [("render", "any")]
    assert scheduled(d).timeout == {
        "source": "learned",
        "timeout_seconds": 2.4,
        "percentile": 95,
        "run_s": 2.0,
        "factor": 1.2,
        "samples": 40,
        "size_class": "any",
        "window_end": "2026-03-01T11:55:00Z",
    }
    assert d.latest("r").timeout_s == 2.4
    started = d.report("r", "STARTED")
    timers = [fx.timer for fx in effects(d.st, started) if isinstance(fx, SetTimer)]
    total = next(t for t in timers if t.kind == "total_timeout")
    assert total.due_at - started[-1].occurred_at == timedelta(seconds=2.4)
    d.advance(2.3)
    assert d.fire("total_timeout", "r") == []  # not due by the recorded figure
    d.advance(0.1)
    [out] = [e.payload for e in d.fire("total_timeout", "r") if isinstance(e.payload, TaskTimedOut)]
    assert out.kind == "total"


@pytest.mark.parametrize(
    ("p95", "expected"),
    [
        pytest.param(0.1, 1.0, id="below-the-floor"),
        pytest.param(10.0, 12.0, id="inside"),
        pytest.param(1000.0, 600.0, id="above-the-ceiling"),
    ],
)
def test_the_learned_timeout_is_clamped(p95: float, expected: float) -> None:
    recorded = scheduled(run(Lookup(stats(p95)))).timeout
    assert (recorded["source"], recorded["timeout_seconds"], recorded["run_s"]) == (
        "learned",
        expected,
        p95,
    )


@pytest.mark.parametrize(
    ("learned", "samples"),
    [
        pytest.param(None, 0, id="no-stats-view"),
        pytest.param(Lookup(None), 0, id="nothing-learned-for-the-type"),
        pytest.param(Lookup(stats(2.0, samples=4)), 4, id="too-few-samples"),
        pytest.param(Lookup(stats(math.nan)), 40, id="an-unusable-figure"),
        pytest.param(Lookup(stats(-1.0)), 40, id="a-negative-figure"),
    ],
)
def test_the_static_timeout_applies_until_enough_is_learned(
    learned: Learned | None, samples: int
) -> None:
    d = run(learned)
    assert scheduled(d).timeout == {
        "source": "static",
        "timeout_seconds": 3600,
        "samples": samples,
        "size_class": "any",
    }
    d.report("r", "STARTED")
    d.advance(3599)
    assert d.fire("total_timeout", "r") == []
    d.advance(1)
    assert [e.type for e in d.fire("total_timeout", "r")][:1] == ["task.timed_out"]


@pytest.mark.parametrize(
    ("completed", "cut", "fallen_back"),
    [
        pytest.param(19, 1, False, id="1-of-20-cut-a-stuck-task-is-what-p95-allows"),
        pytest.param(18, 2, True, id="2-of-20-cut-the-p95-is-unknown"),
        pytest.param(6, 6, True, id="a-type-that-slowed-down-past-its-timeout"),
    ],
)
def test_runs_cut_by_their_timeout_hide_the_percentile(
    completed: int, cut: int, fallen_back: bool
) -> None:
    figures = dataclasses.replace(
        stats(0.5, samples=completed), failures_by_reason={CUT_BY_TIMEOUT: cut, "boom": 5}
    )
    recorded = scheduled(run(Lookup(figures))).timeout
    if not fallen_back:
        assert (recorded["source"], recorded["timeout_seconds"]) == ("learned", 1.0)
        return
    assert recorded == {
        "source": "static",
        "timeout_seconds": 3600,
        "samples": completed,
        "size_class": "any",
        "censored": cut,
        "window_end": "2026-03-01T11:55:00Z",
    }


def test_a_task_without_a_policy_records_nothing_and_writes_no_field() -> None:
    view = Lookup(stats(2.0))
    plain = {k: v for k, v in RENDER.items() if k != "dynamicTimeout"}
    d = run(view, plain)
    assert view.asked == [] and scheduled(d).timeout == {} and d.latest("r").timeout_s is None
    event = next(e for e in d.events if isinstance(e.payload, TaskScheduled))
    assert b'"timeout"' not in encode_event(event)  # a record as it was before the field


def test_a_workflow_task_may_turn_its_taskdef_s_policy_off() -> None:
    off = workflow(task("r", "render", dynamicTimeout=None))
    d = Driver(off, taskdefs=[RENDER], learned=Lookup(stats(2.0)))
    assert scheduled(d).timeout == {}


def test_the_percentile_and_factor_and_the_media_size_class_are_the_policy_s() -> None:
    policy = {**POLICY, "percentile": 99, "factor": 1.5}
    media = {**RENDER, "dynamicTimeout": policy}
    flow = workflow(
        task(
            "r",
            "render",
            inputParameters={"height": 720, "codec": "h264", "duration_s": 42},
        )
    )
    view = Lookup(stats(2.0, size="h720-d60-h264", p99=4.0))
    d = Driver(flow, taskdefs=[media], learned=view)
    assert view.asked == [("render", "h720-d60-h264")]
    recorded = scheduled(d).timeout
    assert (recorded["timeout_seconds"], recorded["percentile"], recorded["factor"]) == (
        6.0,
        99,
        1.5,
    )


def test_each_attempt_uses_the_figure_learned_when_it_is_scheduled() -> None:
    view = Lookup(stats(2.0))
    d = run(view, {**RENDER, "retryDelaySeconds": 1})
    d.report("r", "STARTED")
    d.advance(2.4)
    d.fire("total_timeout", "r")  # timed out; its retry waits a second
    assert d.latest("r").attempt == 1
    view.current = stats(5.0)  # a new window's proposal meanwhile
    d.advance(1)
    d.fire("retry", "r")
    second = d.latest("r")
    assert second.attempt == 2 and second.timeout_s == 6.0
    assert [scheduled_event.timeout["timeout_seconds"] for scheduled_event in _all(d)] == [
        2.4,
        6.0,
    ]


def _all(d: Driver) -> list[TaskScheduled]:
    return [e.payload for e in d.events if isinstance(e.payload, TaskScheduled)]


def test_the_recorded_timeout_survives_the_wire_and_drives_the_fold() -> None:
    d = run(Lookup(stats(2.0)))
    event = next(e for e in d.events if isinstance(e.payload, TaskScheduled))
    again = decode_event(encode_event(event))  # validated against task.scheduled v2
    assert again == event


def test_the_timer_input_is_decided_from_the_state_not_the_view() -> None:
    """A later proposal changes nothing already scheduled: the fire reads the recorded 2.4."""
    view = Lookup(stats(2.0))
    d = run(view)
    d.report("r", "STARTED")
    view.current = stats(100.0)
    d.advance(2.4)
    out = d.send(
        c.FireTimer("fire-1", d.workflow_id, kind="total_timeout", task_id=d.latest("r").task_id)
    )
    assert [e.type for e in out][:1] == ["task.timed_out"]


# -- validation --------------------------------------------------------------------------------
def problems(policy: Any, where: str = "taskdef") -> list[str]:
    if where == "taskdef":
        return validate_workflow(FLOW, [{**RENDER, "dynamicTimeout": policy}])
    return validate_workflow(workflow(task("r", "render", dynamicTimeout=policy)), [])


@pytest.mark.parametrize("where", ["taskdef", "workflow-task"])
def test_a_good_policy_and_null_are_accepted(where: str) -> None:
    full = {**POLICY, "percentile": 50, "factor": 2, "minSamples": 1}
    assert problems(POLICY, where) == [] and problems(full, where) == []
    assert problems(None, where) == []


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("fast", "dynamicTimeout must be an object or null, got 'fast'"),
        ({"ceilingSeconds": 60}, "dynamicTimeout.floorSeconds is required"),
        ({"floorSeconds": 5}, "dynamicTimeout.ceilingSeconds is required"),
        (
            {**POLICY, "floorSeconds": 0},
            "dynamicTimeout.floorSeconds must be a number of seconds above 0, got 0",
        ),
        (
            {**POLICY, "ceilingSeconds": "1h"},
            "dynamicTimeout.ceilingSeconds must be a number of seconds above 0, got '1h'",
        ),
        (
            {**POLICY, "floorSeconds": 90, "ceilingSeconds": 60},
            "dynamicTimeout.ceilingSeconds (60) must not be below floorSeconds (90)",
        ),
        ({**POLICY, "percentile": 90}, "dynamicTimeout.percentile must be one of 50, 95, 99"),
        ({**POLICY, "percentile": 95.0}, "dynamicTimeout.percentile must be one of 50, 95, 99"),
        ({**POLICY, "factor": 0.8}, "dynamicTimeout.factor must be a number of at least 1"),
        ({**POLICY, "factor": True}, "dynamicTimeout.factor must be a number of at least 1"),
        ({**POLICY, "minSamples": 0}, "dynamicTimeout.minSamples must be an integer of at least 1"),
        ({**POLICY, "floor": 3}, "dynamicTimeout: unknown key 'floor'"),
    ],
)
@pytest.mark.parametrize("where", ["taskdef", "workflow-task"])
def test_a_bad_policy_is_refused_with_its_reason(policy: Any, reason: str, where: str) -> None:
    found = problems(policy, where)
    assert len(found) == 1 and reason in found[0], found
    assert found[0].startswith("taskdef 'render': " if where == "taskdef" else "task 'r': ")
