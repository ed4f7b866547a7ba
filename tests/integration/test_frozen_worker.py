"""A worker frozen past its lease, end to end (issue 12, item 2): real decider, dispatcher and
worker processes, default suspicion (15 s), heartbeats of 1 s and leases of 3.

The fault: ``frozen`` runs the task (epoch 1) and gets SIGSTOP. Before, the dispatcher leased
the expired task back to it at every expiry (epochs 2-5, one every 3 s) until it turned suspect,
and after SIGCONT it ran those stale epochs although their cancels followed them in its
partition. Now its lease expires, the task goes to ``rescuer`` (epoch 2) and completes there;
the dispatcher writes no assignment for ``frozen`` while it is silent; woken, ``frozen`` starts
nothing more, stops its handler on the cancel it finds, and its late report is recorded as a
``task.cancel_confirmed``, never as an outcome.

What proves the fault fired: ``frozen`` wrote its start line for epoch 1 before SIGSTOP, the log
has ``task.lease_expired`` for epoch 1, and ``rescuer``'s lease is epoch 2.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from es_sched.domain.events import Event, Payload
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import wire
from es_sched.serialization.codec import parse_time
from testkit.kafka import read_to_end
from testkit.runtime import (
    Env,
    Role,
    assert_log_invariants,
    final_status,
    read_events,
    roles,
)
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
TICKING = {
    "name": "ticking",
    "version": 1,
    "tasks": [{"name": "tick.step", "taskReferenceName": "tick"}],
}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _ticker(env: Env, worker_id: str, tmp: Path, seconds: float) -> Role:
    return Role(
        env,
        worker_id,
        [worker_id],
        module="tests.integration.ticking_worker",
        TICK_FILE=str(tmp / f"{worker_id}.ticks"),
        START_FILE=str(tmp / "starts.txt"),
        TICK_SECONDS=str(seconds),
    )


def _records(env: Env) -> list[wire.Record]:
    return [wire.decode(m.value()) for m in read_to_end(env.topics.assignments)]


def _caught_up(env: Env, worker_id: str) -> bool:
    """The worker committed its position at the end of its assignment partition: it read, and
    started or dropped, everything the dispatcher wrote for it."""
    topic = env.topics.assignments
    tp = TopicPartition(topic, partition_for(worker_id.encode(), env.partitions))
    probe = consumer(kafka_connection(env.bootstrap), f"{env.prefix}-worker-{worker_id}")
    try:
        end = watermarks(probe, tp)[1]
        return bool(probe.committed([tp], timeout=10)[0].offset >= end)
    finally:
        probe.close()


def _idle_since(env: Env, worker_id: str, since: datetime) -> bool:
    """A status report sent after ``since`` lists nothing running or queued."""
    for record in reversed(_records_of_status(env, worker_id)):
        if isinstance(record, wire.WorkerStatus) and parse_time(record.sent_at, "") > since:
            return record.running == []
    return False


def _records_of_status(env: Env, worker_id: str) -> list[wire.Record]:
    msgs = read_to_end(env.topics.worker_status)
    return [wire.decode(m.value()) for m in msgs if m.key() == worker_id.encode() and m.value()]


def test_a_frozen_worker_gets_no_lease_while_silent_and_runs_nothing_stale(
    tmp_path: Path,
) -> None:
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1", "ES_SCHED_DISPATCH_LEASE_K": "3"})
    env.create()
    env.push(TICKING, [{"name": "tick.step", "retryCount": 0, "responseTimeoutSeconds": 600}])
    starts = tmp_path / "starts.txt"
    with roles(env, "decider", "dispatcher"):
        frozen = _ticker(env, "frozen", tmp_path, 60)
        rescuer: Role | None = None
        try:
            frozen.wait_log("started", 60)
            [submitted] = env.submit("ticking", [{}])
            wf = submitted.workflow_id
            wait_until(lambda: _lines(starts) != [], 60, "the task to start on frozen")
            rescuer = _ticker(env, "rescuer", tmp_path, 0.5)
            rescuer.wait_log("started", 60)
            frozen.proc.send_signal(signal.SIGSTOP)  # no heartbeats; the handler stops mid-run
            wait_until(
                lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
                90,
                "the task to complete on the rescuer",
            )
            leased = [r for r in _records(env) if isinstance(r, wire.Assignment)]
            woke = datetime.now(UTC)
            frozen.proc.send_signal(signal.SIGCONT)
            wait_until(lambda: _caught_up(env, "frozen"), 60, "frozen to read its partition")
            wait_until(lambda: _idle_since(env, "frozen", woke), 60, "frozen to be idle")
            ran = _lines(starts)
            to_frozen = [(a.lease_epoch, a.worker_id) for a in leased if a.worker_id == "frozen"]
            stale_runs = [line for line in ran if line.endswith(" frozen")][1:]
            # Before: 5 leases to frozen (epochs 1-5, the rescuer got 6); after SIGCONT frozen
            # ran the 4 stale epochs 2-5.
            assert (to_frozen, stale_runs) == ([(1, "frozen")], []), ran
            wait_until(
                lambda: _confirmed(read_events(env)[wf]) != [],
                60,
                "frozen's late report to be recorded",
            )
        finally:
            frozen.proc.send_signal(signal.SIGCONT)
            for worker in (frozen, rescuer):
                if worker is not None:
                    worker.stop()
    events = read_events(env)[wf]
    assert ran == [f"{leased[0].task_id} 1 frozen", f"{leased[0].task_id} 2 rescuer"]
    dispatched = [
        (e.payload.worker_id, e.payload.lease_epoch)  # type: ignore[attr-defined]
        for e in events
        if e.type == "task.dispatched"
    ]
    assert dispatched == [("frozen", 1), ("rescuer", 2)]
    expired = [e.payload.lease_epoch for e in events if e.type == "task.lease_expired"]  # type: ignore[attr-defined]
    assert expired == [1]
    [completed] = [e for e in events if e.type == "task.completed"]
    assert completed.payload.output["by"] == "rescuer"  # type: ignore[attr-defined]
    [late] = _confirmed(events)
    assert (late.worker_id, late.lease_epoch) == ("frozen", 1)  # type: ignore[attr-defined]
    assert late.reason == "lease expired"  # type: ignore[attr-defined]  # the dispatcher's
    assert_log_invariants(env, {wf}, "COMPLETED")


def _confirmed(events: list[Event]) -> list[Payload]:
    """The ``task.cancel_confirmed`` events (by type string: the test also runs on code that
    predates the type, to measure the fault there)."""
    return [e.payload for e in events if e.type == "task.cancel_confirmed"]
