"""Workers that stop heartbeating while holding leases: their tasks complete on another worker.

A frozen worker (SIGSTOP) loses its lease and the task completes on another worker. When the
frozen one wakes up (SIGCONT) the SDK sees the dispatcher's cancel and reports only that; a late
completion sent anyway with the old lease (a worker that missed the cancel) is rejected by the
decider and recorded with the reason. A killed worker (SIGKILL) never reports again: every task
it held is dispatched again, with the next lease epoch, once its lease expires."""

from __future__ import annotations

import os
import signal

import pytest

from es_sched.domain import commands as c
from es_sched.domain.events import Event
from es_sched.serialization import wire
from es_sched.serialization.records import decode_alert
from testkit.kafka import Reader
from testkit.runtime import Env, Role, final_status, read_events
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.fault]
ONE = {
    "name": "one_slow",
    "version": 1,
    "tasks": [{"name": "slow.step", "taskReferenceName": "step"}],
}


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


def _slow_worker(env: Env, worker_id: str, seconds: float, concurrency: int = 2) -> Role:
    return Role(
        env,
        worker_id,
        [worker_id],
        module="tests.integration.slow_worker",
        SLOW_WORKER_S=str(seconds),
        SLOW_WORKER_CONCURRENCY=str(concurrency),
    )


def _wait_up(roles: list[Role], worker: Role) -> None:
    for r in roles:
        r.wait_log("started", 90)
    worker.wait_log("started", 60)


def _stop(workers: list[Role | None], roles: list[Role]) -> None:
    for r in [*workers, *roles]:
        if r is not None:
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
    reader = Reader(env.topics.assignments)

    def theirs() -> list[wire.Assignment]:
        records = [wire.decode(m.value() or None) for m in reader.read()]
        return [r for r in records if isinstance(r, wire.Assignment) and r.worker_id == worker_id]

    try:
        wait_until(lambda: bool(theirs()), 30, f"an assignment to {worker_id}")
        return theirs()[0]
    finally:
        reader.close()


def test_a_frozen_workers_late_completion_is_rejected() -> None:
    env = _env()
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    frozen = _slow_worker(env, "frozen", 8)
    rescuer: Role | None = None
    try:
        _wait_up(roles, frozen)
        [start] = env.submit("one_slow", [{}])
        frozen.wait_log("working on", 60)
        frozen.proc.send_signal(signal.SIGSTOP)  # no more heartbeats: the lease (3 x 1 s) expires
        rescuer = _slow_worker(env, "rescuer", 0)
        wf = start.workflow_id
        wait_until(
            lambda: final_status(read_events(env).get(wf, [])) == "COMPLETED",
            90,
            "completion on the rescuer",
        )
        frozen.proc.send_signal(signal.SIGCONT)  # it finishes its sleep, sees the cancel
        frozen.wait_log("ended after cancellation", 30)  # the SDK dropped the result
        old = _first_assignment(env, "frozen")
        late = c.ReportCompleted(
            "late-report",
            wf,
            task_id=old.task_id,
            attempt=old.attempt,
            worker_id="frozen",
            lease_epoch=old.lease_epoch,
            lease_token=old.lease_token,
            output={"by": "frozen"},
        )
        env.send([late], env.topics.task_results)

        def rejected() -> bool:
            return any(e.type == "task.completion_rejected" for e in read_events(env)[wf])

        wait_until(rejected, 60, "the late completion to be rejected")
    finally:
        frozen.proc.send_signal(signal.SIGCONT)
        _stop([frozen, rescuer], roles)
    events = read_events(env)[wf]
    _assert_moved(events, "frozen")
    # The forged report's own rejection. The frozen worker may add one of its own: a
    # "started" report still in its producer when SIGSTOP landed is delivered after SIGCONT
    # and refused as a lease mismatch (seen once in CI under load: two rejections).
    [reject] = [
        e
        for e in events
        if e.type == "task.completion_rejected" and e.causation_id == late.command_id
    ]
    assert getattr(reject.payload, "worker_id", "") == "frozen"
    assert "lease mismatch" in getattr(reject.payload, "reason", "") or "already" in getattr(
        reject.payload, "reason", ""
    )


def test_a_killed_workers_leases_are_reclaimed() -> None:
    """kill -9 of a worker holding several leases: each task completes on another worker once
    its lease expires (3 s). The short dead-after (5 s) lets the dispatcher also declare the
    killed worker dead while the test runs."""
    env = _env(ES_SCHED_DISPATCH_DEAD_AFTER_S="5")
    roles = [Role(env, "decider"), Role(env, "dispatcher")]
    doomed = _slow_worker(env, "doomed", 60, concurrency=3)
    rescuer: Role | None = None
    try:
        _wait_up(roles, doomed)
        starts = env.submit("one_slow", [{}, {}, {}])
        wait_until(lambda: doomed.text().count("working on") == 3, 60, "3 tasks on doomed")

        def started_on_doomed() -> int:  # its reports are sent, not yet delivered, at the log
            by_wf = read_events(env)
            return sum(
                getattr(e.payload, "worker_id", "") == "doomed"
                for s in starts
                for e in by_wf.get(s.workflow_id, [])
                if e.type == "task.started"
            )

        wait_until(lambda: started_on_doomed() == 3, 60, "doomed's 3 started reports in the log")
        os.kill(doomed.proc.pid, signal.SIGKILL)  # no heartbeat, no report, no hand-back, ever
        assert doomed.proc.wait(30) == -signal.SIGKILL
        rescuer = _slow_worker(env, "rescuer", 0)

        def all_completed() -> bool:
            by_wf = read_events(env)
            return all(final_status(by_wf.get(s.workflow_id, [])) == "COMPLETED" for s in starts)

        wait_until(all_completed, 90, "the 3 workflows to complete on the rescuer")
        # ADR 71: declaring it dead raised an alert operations can route, naming its tasks.
        alerts = Reader(env.topics.alerts)
        wait_until(
            lambda: any(m.key() == b"doomed" for m in alerts.read()),
            30,
            "the dispatcher's worker.dead alert for doomed",
        )
        [alert] = [decode_alert(m.value()) for m in alerts.read() if m.key() == b"doomed"]
        alerts.close()
    finally:
        _stop([doomed, rescuer], roles)
    assert (alert["kind"], alert["subject"], alert["pool"]) == ("worker.dead", "doomed", "default")
    assert alert["alert_id"].startswith("worker.dead:doomed:")
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
    assert set(alert["reclaimed"]) == task_ids  # the alert names every task it lost
