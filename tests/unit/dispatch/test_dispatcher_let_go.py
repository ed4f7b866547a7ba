"""A task its worker stopped listing, then the decider's ``task.lease_expired`` of that lease
(a declined task, ADR 24 a), without a broker.

Seen in test_api_workers (1 run in 5): the gateway declined a task; the decider's re-queued
ready record came while the dispatcher still held the task (skipped as a re-delivery); the
gateway's next status no longer listed it, so the dispatcher let it go; the
``task.lease_expired`` that followed was ignored (no longer held), and the task waited for the
reconciler's requeue timer, minutes away. The dispatcher now keeps a task it let go until its
lease's end is read, and queues it again then.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import orjson

from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.kafka.topics import assignment_topic
from tests.unit.dispatch.fakes import T0, FakeOutput, OnFakes, msg, on_fakes, ready_raw, w1_status


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def dispatcher() -> tuple[OnFakes, Clock]:
    clock = Clock()
    f = on_fakes(clock=clock)
    f.d.pool_topics.add(assignment_topic("p", "default"))  # known: a status creates no topic
    return f, clock


def read(f: OnFakes, ready: Any = None, status: Any = None, event: Any = None) -> None:
    """One reading of the inputs, with these records on their topics."""
    f.ready.records += [ready] if ready is not None else []
    f.status.records += [status] if status is not None else []
    f.events.records += [event] if event is not None else []
    f.d.read_inputs(0)


def status_without_tasks(d: Dispatcher, now: datetime) -> Any:
    return w1_status(d, now)


def lease_ended(d: Dispatcher, task_id: str, epoch: int) -> Any:
    doc = {"type": "task.lease_expired", "payload": {"task_id": task_id, "lease_epoch": epoch}}
    return msg(d.topics.events, orjson.dumps(doc))


def dispatched(out: FakeOutput) -> int:
    return sum(e[:2] == ("produce", "p.assignments") for e in out.log)


def queued(d: Dispatcher) -> int:
    return sum(sum(levels) for levels in d.core.queues.depth().values())


def leased_once(f: OnFakes) -> int:
    f.ready.records = [msg(f.d.topics.ready, ready_raw("a"), offset=7)]
    f.d.step(0)
    assert dispatched(f.out) == 1
    return f.d.core.leases.leases["a"].epoch


def test_a_lease_ended_after_its_worker_let_the_task_go_queues_it_again() -> None:
    f, clock = dispatcher()
    d = f.d
    epoch = leased_once(f)
    read(f, ready=msg(d.topics.ready, ready_raw("a"), offset=8))  # the decider's re-queue
    assert "a" in d.journal and queued(d) == 0  # held: skipped as a re-delivery
    clock.now = T0 + timedelta(seconds=d.dispatch_settings.heartbeat_s + 1)
    read(f, status=status_without_tasks(d, clock.now))  # the gateway dropped it
    assert "a" not in d.journal and "a" not in d.core.leases.leases
    read(f, event=lease_ended(d, "a", epoch))
    d.step(0)
    assert dispatched(f.out) == 2, "the task was not queued again"
    assert d.core.leases.leases["a"].epoch > epoch


def test_a_let_go_task_whose_ready_record_came_back_is_queued_once() -> None:
    """Its ready record after the let-go queues it; the lease's end read later adds nothing."""
    f, clock = dispatcher()
    d = f.d
    epoch = leased_once(f)
    clock.now = T0 + timedelta(seconds=d.dispatch_settings.heartbeat_s + 1)
    read(f, status=status_without_tasks(d, clock.now))
    read(f, ready=msg(d.topics.ready, ready_raw("a"), offset=8))
    read(f, event=lease_ended(d, "a", epoch))
    assert queued(d) == 1
    assert "a" not in d.released


def test_an_ended_task_is_not_queued_again_by_a_stale_lease_end() -> None:
    """Let go, then its completion: a lease end of an older epoch read after that is ignored."""
    f, clock = dispatcher()
    d = f.d
    epoch = leased_once(f)
    clock.now = T0 + timedelta(seconds=d.dispatch_settings.heartbeat_s + 1)
    read(f, status=status_without_tasks(d, clock.now))
    done = {"type": "task.completed", "payload": {"task_id": "a"}}
    read(f, event=msg(d.topics.events, orjson.dumps(done)))
    read(f, event=lease_ended(d, "a", epoch))
    d.step(0)
    assert dispatched(f.out) == 1 and "a" not in d.journal
