"""Workers that stop heartbeating while holding leases: their tasks complete on another worker.

A frozen worker (SIGSTOP) loses its lease and the task completes on another worker. When the
frozen one wakes up (SIGCONT) the SDK sees the dispatcher's cancel and reports nothing; a late
completion sent anyway with the old lease (a worker that missed the cancel) is rejected by the
decider and recorded with the reason. A killed worker (SIGKILL) never reports again: every task
it held is dispatched again, with the next lease epoch, once its lease expires."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.kafka.clients import consumer
from es_sched.serialization import wire
from tests.integration.runtime_harness import (
    BOOTSTRAP,
    ROOT,
    Env,
    Role,
    final_status,
    read_events,
    wait_until,
)

pytestmark = pytest.mark.integration
ONE = {
    "name": "one_slow",
    "version": 1,
    "tasks": [{"name": "slow.step", "taskReferenceName": "step"}],
}
Proc = subprocess.Popen[bytes]


def _env(**extra: str) -> Env:
    """Private topics with ONE defined; leases of 3 x 1 s heartbeats. A worker silent for 2 s
    (before its lease ends) is suspect: it gets no new work, so a re-dispatch goes elsewhere."""
    env = Env(
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "1",
            "ES_SCHED_DISPATCH_LEASE_K": "3",
            "ES_SCHED_DISPATCH_SUSPECT_AFTER_S": "2",
            **extra,
        }
    )
    env.create()
    env.push(ONE, [{"name": "slow.step", "retryCount": 0}])
    return env


def _slow_worker(env: Env, worker_id: str, seconds: float, log: Path, concurrency: int = 2) -> Proc:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.slow_worker", worker_id],
        env={**os.environ, **env.vars, "SLOW_WORKER_S": str(seconds),
             "SLOW_WORKER_CONCURRENCY": str(concurrency), "PYTHONPATH": str(ROOT)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )  # fmt: skip


def _wait_up(roles: list[Role], worker_log: Path) -> None:
    for r in roles:
        r.wait_log("started", 90)
    wait_until(lambda: "started" in worker_log.read_text(), 60, f"{worker_log.stem} up")


def _stop(procs: list[Proc | None], roles: list[Role]) -> None:
    for proc in procs:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
    for r in roles:
        r.stop()


def _assert_moved(events: list[Event], old: str) -> None:
    """The task went to ``old`` (epoch 1), its lease expired, it went to the rescuer (epoch 2)
    and completed exactly once, there."""
    types = [e.type for e in events]
    dispatched = [e for e in events if e.type == "task.dispatched"]
    assert [getattr(e.payload, "worker_id", "") for e in dispatched] == [old, "rescuer"]
    assert [getattr(e.payload, "lease_epoch", 0) for e in dispatched] == [1, 2]
    [expired] = [e for e in events if e.type == "task.lease_expired"]
    assert getattr(expired.payload, "lease_epoch", 0) == 1
    assert events.index(dispatched[0]) < events.index(expired) < events.index(dispatched[1])
    completed = [e for e in events if e.type == "task.completed"]
    assert len(completed) == 1 and completed[0].payload.output == {"by": "rescuer"}  # type: ignore[attr-defined]
    assert "task.failed" not in types, types


def _first_assignment(env: Env, worker_id: str) -> wire.Assignment:
    cons = consumer(BOOTSTRAP, None)
    cons.assign([TopicPartition(env.topics.assignments, p, 0) for p in range(4)])
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for msg in cons.consume(100, 0.5):
                if msg.error() is None:
                    record = wire.decode(msg.value() if isinstance(msg.value(), bytes) else None)
                    if isinstance(record, wire.Assignment) and record.worker_id == worker_id:
                        return record
    finally:
        cons.close()
    raise AssertionError(f"no assignment for {worker_id}")


def test_a_frozen_workers_late_completion_is_rejected(tmp_path: Path) -> None:
    env = _env()
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    frozen_log = tmp_path / "frozen.log"
    frozen = _slow_worker(env, "frozen", 8, frozen_log)
    rescuer: Proc | None = None
    try:
        _wait_up(roles, frozen_log)
        start = env.start_commands("one_slow", [{}])[0]
        env.send([start])
        wait_until(lambda: "working on" in frozen_log.read_text(), 60, "the task on frozen")
        frozen.send_signal(signal.SIGSTOP)  # no more heartbeats: the lease (3 x 1 s) expires
        rescuer = _slow_worker(env, "rescuer", 0, tmp_path / "rescuer.log")
        wf = start.workflow_id
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            90,
            "completion on the rescuer",
        )
        frozen.send_signal(signal.SIGCONT)  # it finishes its sleep, sees the cancel
        wait_until(lambda: "no report" in frozen_log.read_text(), 30, "the SDK to drop the result")
        old = _first_assignment(env, "frozen")
        late = c.ReportCompleted(
            "late-report", wf, task_id=old.task_id, attempt=old.attempt, worker_id="frozen",
            lease_epoch=old.lease_epoch, lease_token=old.lease_token, output={"by": "frozen"},
        )  # fmt: skip
        env.send([late], env.topics.task_results)

        def rejected() -> bool:
            return any(e.type == "task.completion_rejected" for e in read_events(env)[wf])

        wait_until(rejected, 60, "the late completion to be rejected")
    finally:
        frozen.send_signal(signal.SIGCONT)
        _stop([frozen, rescuer], roles)
    events = read_events(env)[wf]
    _assert_moved(events, "frozen")
    [reject] = [e for e in events if e.type == "task.completion_rejected"]
    assert getattr(reject.payload, "worker_id", "") == "frozen"
    assert "lease mismatch" in getattr(reject.payload, "reason", "") or "already" in getattr(
        reject.payload, "reason", ""
    )


def test_a_killed_workers_leases_are_reclaimed(tmp_path: Path) -> None:
    """kill -9 of a worker holding several leases: each task completes on another worker once
    its lease expires (3 s). The short dead-after (5 s) lets the dispatcher also declare the
    killed worker dead while the test runs."""
    env = _env(ES_SCHED_DISPATCH_DEAD_AFTER_S="5")
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    doomed_log = tmp_path / "doomed.log"
    doomed = _slow_worker(env, "doomed", 60, doomed_log, concurrency=3)
    rescuer: Proc | None = None
    try:
        _wait_up(roles, doomed_log)
        starts = env.start_commands("one_slow", [{}, {}, {}])
        env.send(starts)
        wait_until(lambda: doomed_log.read_text().count("working on") == 3, 60, "3 tasks on doomed")
        os.kill(doomed.pid, signal.SIGKILL)  # no heartbeat, no report, no hand-back, ever
        assert doomed.wait(30) == -signal.SIGKILL
        rescuer = _slow_worker(env, "rescuer", 0, tmp_path / "rescuer.log")

        def all_completed() -> bool:
            by_wf = read_events(env)
            return all(final_status(by_wf.get(s.workflow_id, [])) == "COMPLETED" for s in starts)

        wait_until(all_completed, 90, "the 3 workflows to complete on the rescuer")
    finally:
        _stop([doomed, rescuer], roles)
    by_wf = read_events(env)
    task_ids: set[str] = set()
    for s in starts:
        events = by_wf[s.workflow_id]
        _assert_moved(events, "doomed")
        started = [getattr(e.payload, "worker_id", "") for e in events if e.type == "task.started"]
        assert started == ["doomed", "rescuer"], started
        assert not any(e.type == "task.completion_rejected" for e in events)
        task_ids |= {
            getattr(e.payload, "task_id", "") for e in events if e.type == "task.dispatched"
        }
    assert len(task_ids) == 3, task_ids  # three tasks, each dispatched twice
