"""A frozen worker (SIGSTOP) loses its lease and the task completes on another worker. When the
frozen one wakes up (SIGCONT) the SDK sees the dispatcher's cancel and reports nothing; a late
completion sent anyway with the old lease (a worker that missed the cancel) is rejected by the
decider and recorded with the reason."""

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
from es_sched.kafka import wire
from es_sched.kafka.clients import consumer
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


def _slow_worker(env: Env, worker_id: str, seconds: float, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.slow_worker", worker_id],
        env={**os.environ, **env.vars, "SLOW_WORKER_S": str(seconds), "PYTHONPATH": str(ROOT)},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


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
    env = Env(
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "1",
            "ES_SCHED_DISPATCH_LEASE_K": "3",
            # silent for 2 s (before its 3 s lease ends) the frozen worker is suspect: no new work
            "ES_SCHED_DISPATCH_SUSPECT_AFTER_S": "2",
        }
    )
    env.create()
    env.push(ONE, [{"name": "slow.step", "retryCount": 0}])
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    frozen = _slow_worker(env, "frozen", 8, tmp_path / "frozen.log")
    rescuer: subprocess.Popen[bytes] | None = None
    try:
        for r in roles:
            r.wait_log("started", 90)
        wait_until(
            lambda: "started" in (tmp_path / "frozen.log").read_text(), 60, "frozen worker up"
        )
        start = env.start_commands("one_slow", [{}])[0]
        env.send([start])
        wait_until(
            lambda: "working on" in (tmp_path / "frozen.log").read_text(),
            60,
            "the task on the frozen worker",
        )
        frozen.send_signal(signal.SIGSTOP)  # no more heartbeats: the lease (3 x 1 s) expires
        rescuer = _slow_worker(env, "rescuer", 0, tmp_path / "rescuer.log")
        wf = start.workflow_id
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            90,
            "completion on the rescuer",
        )
        frozen.send_signal(signal.SIGCONT)  # it finishes its sleep, sees the cancel
        frozen_log = tmp_path / "frozen.log"
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
        for proc in (frozen, rescuer):
            if proc is not None:
                proc.terminate()
                proc.wait(30)
        for r in roles:
            r.stop()
    events = read_events(env)[wf]
    dispatched = [e for e in events if e.type == "task.dispatched"]
    assert [getattr(e.payload, "worker_id", "") for e in dispatched] == ["frozen", "rescuer"]
    assert [getattr(e.payload, "lease_epoch", 0) for e in dispatched] == [1, 2]
    assert any(e.type == "task.lease_expired" for e in events)
    completed = [e for e in events if e.type == "task.completed"]
    assert len(completed) == 1 and completed[0].payload.output == {"by": "rescuer"}  # type: ignore[attr-defined]
    [reject] = [e for e in events if e.type == "task.completion_rejected"]
    assert getattr(reject.payload, "worker_id", "") == "frozen"
    assert "lease mismatch" in getattr(reject.payload, "reason", "") or "already" in getattr(
        reject.payload, "reason", ""
    )
