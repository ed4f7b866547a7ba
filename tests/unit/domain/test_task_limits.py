"""A task's Conductor limits travel from its pinned TaskDef to its ready record (ADR 13): the
rate and concurrency on ``QueueTask`` and in the record, the rateLimitKey evaluated when the
task is scheduled and used as the record's key."""

from __future__ import annotations

from es_sched.domain.definitions import TaskLimits
from es_sched.domain.effects import QueueTask, effects
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import outbound
from es_sched.serialization.records import decode_ready, ready_limits
from tests.unit.domain.harness import Driver, task, workflow

TASKDEF = {
    "name": "encode",
    "rateLimitPerFrequency": 50,
    "rateLimitFrequencyInSeconds": 60,
    "concurrentExecLimit": 4,
    "rateLimitKey": "cdn-${workflow.input.region}",
}
TOPICS = Topics("p", 4)


def test_the_pinned_taskdef_limits_ride_on_the_queue_effect_and_the_ready_record() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[TASKDEF], inp={"region": "eu"})
    t = d.latest("enc")
    assert t.rate_limit_key == "cdn-eu"  # evaluated like an input, recorded in task.scheduled
    limits = TaskLimits(rate_per_frequency=50, frequency_s=60, concurrent=4)
    assert effects(d.st, d.events) == [
        QueueTask("wf-1", t.task_id, "enc", "encode", 1, limits=limits)
    ]
    [ready] = [r for r in outbound(TOPICS, d.st, d.events, lambda *_: None) if r.topic == "p.ready"]
    assert ready.key == "cdn-eu"  # every task this key limits shares one partition
    doc = decode_ready(ready.value)
    assert (doc.get("rate_limit_key"), ready_limits(doc)) == ("cdn-eu", limits)


def test_a_workflow_task_overrides_its_taskdef_and_no_key_keys_by_name() -> None:
    plain = {k: v for k, v in TASKDEF.items() if k != "rateLimitKey"}
    d = Driver(workflow(task("enc", name="encode", concurrentExecLimit=1)), taskdefs=[plain])
    [fx] = effects(d.st, d.events)
    assert isinstance(fx, QueueTask) and fx.limits == TaskLimits(50, 60, 1)
    [ready] = [r for r in outbound(TOPICS, d.st, d.events, lambda *_: None) if r.topic == "p.ready"]
    assert ready.key == "encode"


def test_a_key_resolving_to_null_means_no_key_and_to_an_object_fails_the_task() -> None:
    wf = workflow(task("enc", name="encode", rateLimitKey="${workflow.input.k}"))
    assert Driver(wf, inp={}).latest("enc").rate_limit_key is None
    bad = Driver(wf, inp={"k": {"no": "key"}}).latest("enc")
    assert bad.status == "FAILED_WITH_TERMINAL_ERROR"
    assert "rateLimitKey" in (bad.reason or "")


def test_a_task_without_taskdef_limits_carries_none() -> None:
    d = Driver(workflow(task("a")))
    [fx] = effects(d.st, d.events)
    assert isinstance(fx, QueueTask) and fx.limits == TaskLimits()
    [ready] = [r for r in outbound(TOPICS, d.st, d.events, lambda *_: None) if r.topic == "p.ready"]
    assert decode_ready(ready.value).get("limits") is None
