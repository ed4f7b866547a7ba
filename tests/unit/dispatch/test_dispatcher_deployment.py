"""A dispatcher and workers of two deployments on one topic prefix (ADR 63), without a broker:
each assignment carries the dispatcher's deployment, and a worker whose status names another
deployment is left out of the fleet, so nothing is placed on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from es_sched.kafka.topics import assignment_topic
from es_sched.serialization import wire
from tests.unit.dispatch.fakes import T0, OnFakes, msg, on_fakes, ready_raw, w1_status


def dispatcher() -> tuple[OnFakes, list[tuple[str, bytes | None]]]:
    f = on_fakes()
    f.d.pool_topics.add(assignment_topic("p", "default"))  # known: a status creates no topic
    sent: list[tuple[str, bytes | None]] = []
    produce = f.out.produce

    def spy(topic: str, key: str, value: bytes | None, now: datetime, partition: int = -1) -> None:
        sent.append((topic, value))
        produce(topic, key, value, now, partition)

    f.out.produce = spy  # type: ignore[method-assign]
    return f, sent


def status(f: OnFakes, deployment: str) -> Any:
    return w1_status(f.d, T0, deployment=deployment)


def assignments(sent: list[tuple[str, bytes | None]]) -> list[wire.Record]:
    return [wire.decode(v) for t, v in sent if t == "p.assignments"]


def test_each_assignment_carries_the_dispatchers_deployment() -> None:
    f, sent = dispatcher()
    f.status.records.append(status(f, f.d.deployment))
    f.ready.records = [msg(f.d.topics.ready, ready_raw("a"), offset=7)]
    f.d.step(0)
    [a] = assignments(sent)
    assert isinstance(a, wire.Assignment) and a.task_id == "a"
    assert a.deployment == f.d.deployment != ""


def test_a_worker_of_another_deployment_is_left_out_and_gets_nothing() -> None:
    f, sent = dispatcher()
    assert "w1" in f.d.core.fleet.workers
    f.status.records.append(status(f, "another-deployment"))
    f.ready.records = [msg(f.d.topics.ready, ready_raw("a"), offset=7)]
    f.d.step(0)
    assert "w1" not in f.d.core.fleet.workers
    assert assignments(sent) == []
    assert sum(sum(levels) for levels in f.d.core.queues.depth().values()) == 1  # still waiting
