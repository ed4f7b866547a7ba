"""ADR 44: a short task's start travels with its outcome (``worker.task_completed`` and
``worker.task_failed`` v2, ``started``). The decider records ``task.started`` then the outcome
from one input; a v1 outcome (no ``started``) is decided as before, so I5 holds on old logs; a
timer armed and cleared by one decision is not written, nor its tombstone when no earlier
decision can have armed it (ADR 48)."""

from __future__ import annotations

from typing import Any

import pytest

from es_sched.domain import commands as c
from es_sched.domain.effects import ClearTimer, SetTimer, effects
from es_sched.domain.events import TaskCompleted, TaskFailed, TaskStarted
from es_sched.domain.ids import timer_id
from es_sched.domain.timers import TASK_TIMERS
from es_sched.serialization.codec import decode_input, encode_input
from tests.unit.domain.harness import Driver, task, workflow

FLOW = workflow(task("enc", "encode"), name="short")
TASKDEFS = [
    {"name": "encode", "retryCount": 1, "responseTimeoutSeconds": 60, "timeoutSeconds": 600}
]


def _lease(d: Driver, epoch: int = 1) -> dict[str, Any]:
    t = d.latest("enc")
    return dict(
        task_id=t.task_id, attempt=t.attempt, worker_id="w1", lease_epoch=epoch, lease_token="a"
    )


def _dispatched() -> Driver:
    d = Driver(FLOW, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("in-d", d.workflow_id, **_lease(d)))
    return d


def test_a_completion_with_its_start_records_both_from_one_input() -> None:
    d = _dispatched()
    tid = d.latest("enc").task_id
    d.advance(0.2)
    out = d.send(
        c.ReportCompleted("in-c", d.workflow_id, **_lease(d), output={"x": 1}, started=True)
    )
    assert [e.payload for e in out[:2]] == [TaskStarted(tid, "w1"), TaskCompleted(tid, {"x": 1})]
    assert out[0].occurred_at == out[1].occurred_at == d.now
    assert d.latest("enc").started_at == d.now and d.st.status == "COMPLETED"


def test_a_failure_with_its_start_is_retried_as_a_started_one_is() -> None:
    d = _dispatched()
    tid = d.latest("enc").task_id
    out = d.send(c.ReportFailed("in-f", d.workflow_id, **_lease(d), reason="boom", started=True))
    assert [e.payload for e in out[:2]] == [TaskStarted(tid, "w1"), TaskFailed(tid, "boom")]
    assert [e.type for e in out[2:]] == ["task.retry_scheduled"]


def test_a_start_reported_on_its_own_is_not_recorded_twice() -> None:
    d = _dispatched()
    d.send(c.ReportStarted("in-s", d.workflow_id, **_lease(d)))
    out = d.send(c.ReportCompleted("in-c", d.workflow_id, **_lease(d), started=True))
    assert [e.type for e in out] == ["task.completed", "workflow.completed"]


def test_a_v1_completion_of_a_task_not_started_is_decided_as_before() -> None:
    d = _dispatched()
    v1 = (
        encode_input(c.ReportCompleted("in-c", d.workflow_id, **_lease(d)))
        .replace(b'"schema_version":2', b'"schema_version":1')
        .replace(b',"started":false', b"")
    )
    assert b'"schema_version":1' in v1 and b"started" not in v1
    inp = decode_input(v1)
    assert isinstance(inp, c.ReportCompleted) and inp.started is False
    out = d.send(inp)
    assert [e.type for e in out] == ["task.completed", "workflow.completed"]
    assert d.latest("enc").started_at is None


@pytest.mark.parametrize("started", [True, False])
def test_a_v2_outcome_round_trips(started: bool) -> None:
    for inp in (
        c.ReportCompleted("in-c", "wf", task_id="t", output={"a": 1}, started=started),
        c.ReportFailed("in-f", "wf", task_id="t", reason="r", terminal=True, started=started),
    ):
        raw = encode_input(inp)
        version = inp.SCHEMA_VERSION  # worker.task_failed is v3 since ADR 58 (host_fault)
        assert version >= 2 and f'"schema_version":{version}'.encode() in raw
        assert decode_input(raw) == inp


def test_timers_armed_and_cleared_by_one_decision_are_not_written() -> None:
    d = _dispatched()
    out = d.send(c.ReportCompleted("in-c", d.workflow_id, **_lease(d), started=True))
    fx = effects(d.st, out)
    assert not [f for f in fx if isinstance(f, SetTimer) and f.timer.task_id is not None]
    tid = d.latest("enc").task_id
    cleared = {f.timer_id for f in fx if isinstance(f, ClearTimer)}
    # ADR 48: under its first lease the task never started before, so no earlier decision
    # armed its timeouts: only the requeue timer (armed when it was queued) is cleared
    assert cleared == {timer_id(d.workflow_id, "requeue", tid)}
    # A start on its own arms the timeouts, and the outcome's decision clears them.
    d2 = _dispatched()
    fx_started = effects(d2.st, d2.send(c.ReportStarted("in-s", d2.workflow_id, **_lease(d2))))
    kinds = sorted(f.timer.kind for f in fx_started if isinstance(f, SetTimer))
    assert kinds == ["response_timeout", "total_timeout"]


def test_a_task_started_under_an_earlier_lease_has_its_timeouts_cleared() -> None:
    """Started under lease 1 (its timeouts armed), the lease expired, dispatched again: the
    start and outcome under lease 2 clear all three timers, since lease 1's start armed two."""
    d = _dispatched()
    tid = d.latest("enc").task_id
    armed = effects(d.st, d.send(c.ReportStarted("in-s", d.workflow_id, **_lease(d))))
    assert sorted(f.timer.kind for f in armed if isinstance(f, SetTimer)) == [
        "response_timeout",
        "total_timeout",
    ]
    assert [
        e.type for e in d.send(c.ExpireLease("in-x", d.workflow_id, task_id=tid, lease_epoch=1))
    ] == ["task.lease_expired"]
    d.send(c.DispatchTask("in-d2", d.workflow_id, **_lease(d, 2)))
    out = d.send(c.ReportCompleted("in-c2", d.workflow_id, **_lease(d, 2), started=True))
    assert [e.type for e in out[:2]] == ["task.started", "task.completed"]
    cleared = {f.timer_id for f in effects(d.st, out) if isinstance(f, ClearTimer)}
    assert cleared == {timer_id(d.workflow_id, k, tid) for k in TASK_TIMERS}
