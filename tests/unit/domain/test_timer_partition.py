"""ADR 48: the decider writes a workflow's timers, and their tombstones, on the workflow's
partition of ``timers`` (keyed by timer id, so compaction still keeps one record per timer), so a
transaction touches the partitions of the workflows it decided and not every timers partition."""

from __future__ import annotations

from es_sched.domain import commands as c
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import Record, outbound
from tests.unit.domain.harness import Driver, task, workflow

TOPICS = Topics("p", 12)
TASKDEFS = [{"name": "encode", "responseTimeoutSeconds": 60, "timeoutSeconds": 600}]


def _timers(records: list[Record], topic: str = "p.timers") -> list[Record]:
    return [r for r in records if r.topic == topic]


def test_timers_and_their_tombstones_go_to_the_workflows_partition() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=TASKDEFS)
    t = d.latest("enc")
    lease = dict(task_id=t.task_id, attempt=1, worker_id="w", lease_epoch=1, lease_token="a")
    queued = outbound(TOPICS, d.st, d.events, lambda *_: None, 300.0, partition=7)
    d.send(c.DispatchTask("in-d", d.workflow_id, **lease))  # type: ignore[arg-type]
    started = d.send(c.ReportStarted("in-s", d.workflow_id, **lease))  # type: ignore[arg-type]
    armed = outbound(TOPICS, d.st, started, lambda *_: None, 300.0, partition=7)
    ended = d.send(c.ReportCompleted("in-c", d.workflow_id, **lease))  # type: ignore[arg-type]
    cleared = outbound(TOPICS, d.st, ended, lambda *_: None, 300.0, partition=7)
    sets = _timers(queued) + _timers(armed)
    tombstones = _timers(cleared)
    assert len(sets) == 3  # the requeue, then the response and total timeouts at the start
    assert len(tombstones) == 3 and all(r.value is None for r in tombstones)
    assert {r.partition for r in sets + tombstones} == {7}
    assert {r.key for r in tombstones} <= {r.key for r in sets}  # each clears one it armed
    # the events stay keyed by workflow id, placed by the producer's partitioner
    assert {r.partition for r in _timers(cleared, "p.events")} == {None}


def test_without_a_partition_timers_are_placed_by_their_key() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=TASKDEFS)
    assert {
        r.partition for r in _timers(outbound(TOPICS, d.st, d.events, lambda *_: None, 300.0))
    } == {None}
