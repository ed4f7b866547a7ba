"""Leases survive a dispatcher restart (issue 12, item 3).

kill -9 of the dispatcher process, a fresh dispatcher process, then kill -9 of the worker that
holds a leased task: the restarted dispatcher rebuilt the lease from the ``<prefix>.leases``
journal, so the lease expires k x heartbeat after the worker's last heartbeat and the task goes
to another worker at the same attempt (no retry spent) with the next epoch. A task taken back
(its worker went silent) and waiting in the queue when the dispatcher dies is dispatched by the
restarted one, also at the next epoch. Without the journal the restarted dispatcher reads
events from the log's end and ready from its committed offsets: it knows neither task.

What proves the faults fired: each killed process exited by SIGKILL and the restarted
dispatcher is another process; the dispatcher's group had committed its ready offsets past the
task before the kill, so nothing re-delivers the ready record.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import ConsumerGroupState, TopicPartition
from confluent_kafka.admin import AdminClient

from es_sched.domain.events import Event
from es_sched.kafka.clients import consumer
from es_sched.serialization import wire
from testkit.kafka import read_to_end
from testkit.runtime import (
    Env,
    Role,
    assert_log_invariants,
    count_records,
    final_status,
    read_events,
)
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
HEARTBEAT_S, K = 1.0, 3
TTL_S = K * HEARTBEAT_S
ONE = {
    "name": "one_leased",
    "version": 1,
    "tasks": [{"name": "slow.step", "taskReferenceName": "step"}],
}


def _env() -> Env:
    """Private topics with ONE defined (no retries, an hour's response timeout: only a lease
    expiry can move the task); leases of 3 x 1 s heartbeats; a worker silent for 2 s gets no
    new work, and is not declared dead during the test."""
    env = Env(
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": str(HEARTBEAT_S),
            "ES_SCHED_DISPATCH_LEASE_K": str(K),
            "ES_SCHED_DISPATCH_SUSPECT_AFTER_S": "2",
        }
    )
    env.create()
    env.push(ONE, [{"name": "slow.step", "retryCount": 0, "responseTimeoutSeconds": 3600}])
    return env


def _worker(env: Env, worker_id: str, seconds: float) -> Role:
    return Role(
        env,
        worker_id,
        [worker_id],
        module="tests.integration.slow_worker",
        SLOW_WORKER_S=str(seconds),
        SLOW_WORKER_CONCURRENCY="1",
    )


def _ready_committed(env: Env) -> bool:
    """The dispatcher group committed its ready offsets past every ready record: a new
    dispatcher process gets nothing re-delivered."""
    group = consumer(kafka_connection(env.bootstrap), f"{env.prefix}-dispatcher")
    try:
        parts = [TopicPartition(env.topics.ready, p) for p in range(env.partitions)]
        done = sum(max(tp.offset, 0) for tp in group.committed(parts, timeout=10))
    finally:
        group.close()
    return done == count_records(env, env.topics.ready, "read_committed") > 0


def _members(env: Env) -> tuple[bool, dict[str, int]]:
    """Whether the dispatcher group is stable, and its members' ids with how many ready
    partitions each was assigned."""
    admin = AdminClient(kafka_connection(env.bootstrap).config())
    [future] = admin.describe_consumer_groups([f"{env.prefix}-dispatcher"]).values()
    group = future.result(timeout=10)
    members = {m.member_id: len(m.assignment.topic_partitions) for m in group.members}
    return group.state == ConsumerGroupState.STABLE, members


def _restart_dispatcher(env: Env, old: Role) -> Role:
    _, before = _members(env)
    os.kill(old.proc.pid, signal.SIGKILL)  # no revoke, no flush, no commit: a crash
    assert old.proc.wait(30) == -signal.SIGKILL
    new = Role(env, "dispatcher")
    assert new.proc.pid != old.proc.pid
    new.wait_log("started", 90)

    def owned_by_the_new_one() -> bool:  # the killed member stays until its session ends
        stable, members = _members(env)
        fresh = not set(members) & set(before)
        return stable and fresh and sum(members.values()) == env.partitions

    wait_until(owned_by_the_new_one, 60, "the new dispatcher to own the ready partitions")
    return new


def _assignments_to(env: Env, worker_id: str) -> list[tuple[wire.Assignment, float]]:
    """Assignments to ``worker_id`` with their record times (the dispatcher's decision time)."""
    found = []
    for msg in read_to_end(env.topics.assignments, bootstrap=env.bootstrap):
        record = wire.decode(msg.value() or None)
        if isinstance(record, wire.Assignment) and record.worker_id == worker_id:
            found.append((record, msg.timestamp()[1] / 1000))
    return found


def _stop(*roles: Role | None) -> None:
    for r in roles:
        if r is not None:
            r.stop()


def _assert_released_once_at_the_next_epoch(events: list[Event]) -> None:
    """doomed had it at epoch 1, the lease expired, rescuer had it at epoch 2, same attempt,
    and it completed once, there; no retry was spent."""
    dispatched = [e.payload for e in events if e.type == "task.dispatched"]
    assert [
        (getattr(p, "worker_id", ""), getattr(p, "lease_epoch", 0), getattr(p, "attempt", 0))
        for p in dispatched
    ] == [("doomed", 1, 1), ("rescuer", 2, 1)]
    assert [
        getattr(e.payload, "lease_epoch", 0) for e in events if e.type == "task.lease_expired"
    ] == [1]
    types = [e.type for e in events]
    assert "task.failed" not in types and "task.retry_scheduled" not in types, types
    assert "task.completion_rejected" not in types, types
    [done] = [e for e in events if e.type == "task.completed"]
    assert done.payload.output == {"by": "rescuer"}  # type: ignore[attr-defined]


def test_a_lease_rebuilt_after_a_dispatcher_crash_expires_when_its_worker_dies() -> None:
    env = _env()
    decider, dispatcher = Role(env, "decider"), Role(env, "dispatcher")
    doomed = _worker(env, "doomed", 60)
    rescuer: Role | None = None
    try:
        for r in (decider, dispatcher, doomed):
            r.wait_log("started", 90)
        [start] = env.submit("one_leased", [{}])
        wf = start.workflow_id
        doomed.wait_log("working on", 60)
        wait_until(lambda: _ready_committed(env), 30, "the ready offset committed past the task")
        dispatcher = _restart_dispatcher(env, dispatcher)
        rescuer = _worker(env, "rescuer", 0)
        rescuer.wait_log("started", 60)
        os.kill(doomed.proc.pid, signal.SIGKILL)  # its last heartbeat is its last word
        assert doomed.proc.wait(30) == -signal.SIGKILL
        died = time.time()
        wait_until(
            lambda: bool(_assignments_to(env, "rescuer")),
            3 * TTL_S,
            "the task to be leased again, to rescuer",
        )
        [(again, at)] = _assignments_to(env, "rescuer")
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            60,
            "the workflow to complete on rescuer",
        )
    finally:
        _stop(doomed, rescuer, dispatcher, decider)
    relet = at - died
    print(f"re-leased {relet:.2f}s after the worker's death (lease {TTL_S:g}s)")
    # The lease ends k x h after the last heartbeat, which came at most h before the death;
    # one heartbeat of slack for the tick on a loaded two-core host.
    assert relet <= TTL_S + HEARTBEAT_S, f"re-leased {relet:.2f}s after the worker died"
    assert (again.attempt, again.lease_epoch) == (1, 2)
    assert "rebuilt 1 leases, 0 queued" in dispatcher.text()
    _assert_released_once_at_the_next_epoch(read_events(env)[wf])
    assert_log_invariants(env, {wf})


def test_a_task_taken_back_before_a_dispatcher_crash_is_dispatched_after_it() -> None:
    env = _env()
    decider, dispatcher = Role(env, "decider"), Role(env, "dispatcher")
    doomed = _worker(env, "doomed", 60)
    rescuer: Role | None = None
    try:
        for r in (decider, dispatcher, doomed):
            r.wait_log("started", 90)
        [start] = env.submit("one_leased", [{}])
        wf = start.workflow_id
        doomed.wait_log("working on", 60)
        wait_until(lambda: _ready_committed(env), 30, "the ready offset committed past the task")
        os.kill(doomed.proc.pid, signal.SIGKILL)
        assert doomed.proc.wait(30) == -signal.SIGKILL

        def taken_back() -> bool:
            return any(e.type == "task.lease_expired" for e in read_events(env).get(wf, []))

        # No other worker: the task waits in the dispatcher's queue, at the head.
        wait_until(taken_back, 30, "the lease to expire and the task to be taken back")
        dispatcher = _restart_dispatcher(env, dispatcher)
        rescuer = _worker(env, "rescuer", 0)
        rescuer.wait_log("started", 60)
        wait_until(
            lambda: bool(_assignments_to(env, "rescuer")),
            3 * TTL_S,
            "the taken-back task to be dispatched to rescuer",
        )
        [(again, _)] = _assignments_to(env, "rescuer")
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            60,
            "the workflow to complete on rescuer",
        )
    finally:
        _stop(doomed, rescuer, dispatcher, decider)
    assert (again.attempt, again.lease_epoch) == (1, 2)  # epochs go on across the restart
    _assert_released_once_at_the_next_epoch(read_events(env)[wf])
    assert_log_invariants(env, {wf})
