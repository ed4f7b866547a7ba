"""Kafka records <-> dispatcher core objects."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
import pytest

from es_sched.dispatch import records as dr
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.errors import SchemaError
from es_sched.kafka.topics import Topics
from es_sched.liveness import heard_at
from es_sched.runtime.outbox import outbound
from es_sched.serialization import wire
from tests.unit.domain.harness import Driver, task, workflow

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
TOPICS = Topics("p", 12)


def _ready(**extra: object) -> bytes:
    doc = {
        "workflow_id": "wf",
        "task_id": "t1",
        "name": "probe",
        "ref": "p",
        "attempt": 2,
        "priority": 1,
        "input": {"uri": "x"},
        "resources": {"cpu": 1, "gpu_memory_mb": 4096},
        "tenant": "acme",
        "rate_limit_key": None,
        **extra,
    }
    return orjson.dumps(doc)


def test_ready_record_becomes_a_ready_task() -> None:
    started = NOW - timedelta(hours=1)
    task = dr.ready_task(_ready(workflow_started_at=started.isoformat()), NOW, NOW)
    assert (task.task_id, task.workflow_id, task.task_type, task.priority, task.attempt) == (
        "t1",
        "wf",
        "probe",
        1,
        2,
    )
    assert task.workflow_started_at == started and task.enqueued_at == NOW
    assert task.tenant == "acme" and task.resources["gpu_memory_mb"] == 4096
    later = dr.ready_task(_ready(), None, NOW)  # no start time, no record time: now
    assert later.workflow_started_at == NOW == later.enqueued_at
    assert later.steps_to_end == 0  # a record without it: no depth preference (ADR 69)
    assert dr.ready_task(_ready(steps_to_end=3), NOW, NOW).steps_to_end == 3


@pytest.mark.parametrize(
    "raw",
    [
        b"nope",
        b"[]",
        orjson.dumps({"task_id": "t"}),
        _ready(resources=[1]),
        _ready(priority="high"),
    ],
)
def test_bad_ready_records_are_schema_errors(raw: bytes) -> None:
    with pytest.raises(SchemaError):
        dr.ready_task(raw, None, NOW)


def test_worker_view_takes_reported_gpu_memory_and_ignores_stale_reports_as_heartbeats() -> None:
    status = wire.WorkerStatus(
        "w1",
        "",
        "v1",
        ["probe"],
        4,
        8192,
        gpus=[wire.GpuStatus(0, 16384, 2048)],
        sent_at=NOW.isoformat(),
    )
    view = dr.worker_view(status, heard_at(wire.sent_time(status), NOW, dead_after_s=60))
    assert view.pool == "default" and view.last_seen == NOW
    assert view.gpus[0].free_mb == 2048
    later = NOW + timedelta(hours=1)
    stale = dr.worker_view(status, heard_at(wire.sent_time(status), later, dead_after_s=60))
    assert stale.last_seen == NOW


def test_assignment_and_take_back_records() -> None:
    core = DispatchCore()
    status = wire.WorkerStatus(
        "w1", "default", "v1", ["probe"], 4, 8192, gpus=[wire.GpuStatus(0, 16384, 8192)]
    )
    core.fleet.upsert(dr.worker_view(status, NOW))
    core.enqueue(dr.ready_task(_ready(), NOW, NOW))
    (decision,) = core.dispatch(NOW, lambda: "tok")
    assert isinstance(decision, Assignment)
    record, dispatched = dr.assignment(decision)
    assert (record.worker_id, record.gpu, record.lease_epoch, record.lease_token) == (
        "w1",
        0,
        1,
        "tok",
    )
    assert record.input == {"uri": "x"} and record.ref == "p"
    assert dispatched.input_id == "dispatch:t1:1:tok" and dispatched.workflow_id == "wf"
    assert (dispatched.worker_id, dispatched.attempt, dispatched.lease_token) == ("w1", 2, "tok")
    cancel, expired = dr.take_back(decision.lease, "wf", "preempted")
    assert cancel == wire.Cancel("w1", "t1", 1, "preempted")
    assert expired.input_id == "expire:t1:1" and expired.lease_epoch == 1


@pytest.mark.parametrize(
    ("event_type", "reason"),
    [
        ("task.canceled", "canceled"),
        ("task.timed_out", "timed out"),
        ("task.completed", None),
        ("task.failed", None),
        ("task.completed_with_errors", None),
    ],
)
def test_a_task_ended_without_its_workers_report_is_stopped_on_the_worker(
    event_type: str, reason: str | None
) -> None:
    core = DispatchCore()
    status = wire.WorkerStatus(
        "w1", "default", "v1", ["probe"], 4, 8192, gpus=[wire.GpuStatus(0, 16384, 8192)]
    )
    core.fleet.upsert(dr.worker_view(status, NOW))
    core.enqueue(dr.ready_task(_ready(), NOW, NOW))
    (decision,) = core.dispatch(NOW, lambda: "tok")
    assert isinstance(decision, Assignment)
    cancel = dr.stop_on_worker(decision.lease, event_type)
    expected = None if reason is None else wire.Cancel("w1", "t1", 1, reason)
    assert cancel == expected


def test_the_deciders_ready_record_carries_the_steps_left_to_the_dispatcher() -> None:
    """QueueTask -> ready record -> ReadyTask: the depth the downstream-first rule reads."""
    d = Driver(workflow(task("probe"), task("encode"), task("notify")))
    (ready,) = [
        r for r in outbound(TOPICS, d.st, d.events, lambda *_: None) if r.topic == "p.ready"
    ]
    assert dr.ready_task(ready.value, NOW, NOW).steps_to_end == 2
