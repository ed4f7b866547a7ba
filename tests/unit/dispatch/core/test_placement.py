"""A worker that stops heartbeating gets no new lease (issue 12, item 2).

Live, a worker frozen past its lease was handed its own expired task again at every expiry
(epochs 2-5, one every 3 s) until it turned suspect at 15 s, and ran the stale epochs when it
woke. The core now requires a heartbeat within two heartbeats, and one since the worker's last
expired lease, before it places anything there.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from es_sched.dispatch.core.engine import Assignment, DispatchCore, Preemption
from es_sched.dispatch.core.leases import LeaseTable
from es_sched.dispatch.core.placement import WorkerView
from es_sched.dispatch.core.queues import ReadyTask

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
H = 1.0  # heartbeat; a lease lasts 3 of them
tokens = (f"tok-{i}" for i in itertools.count())


def token() -> str:
    return next(tokens)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def fleet(*ids: str) -> DispatchCore:
    core = DispatchCore(leases=LeaseTable(heartbeat_s=H, k=3))
    for wid in ids:
        core.fleet.upsert(
            WorkerView(wid, "default", "1.0", frozenset({"encode"}), 1, 1000, last_seen=T0)
        )
    return core


def heartbeat(core: DispatchCore, wid: str, seconds: float) -> None:
    """What the dispatcher does with a worker's status report: seen now, its leases extended."""
    core.fleet.workers[wid].last_seen = t(seconds)
    core.leases.heartbeat(wid, t(seconds))


def placed(decisions: list[Assignment | Preemption]) -> list[tuple[str, str, int]]:
    return [
        (d.task.task_id, d.placement.worker_id, d.lease.epoch)
        for d in decisions
        if isinstance(d, Assignment)
    ]


def enqueue(core: DispatchCore, task_id: str) -> None:
    core.enqueue(ReadyTask(task_id, "wf", "encode", 4, T0, T0, resources={"cpu": 1}))


def test_the_fleet_counts_silence_in_the_lease_tables_heartbeats() -> None:
    assert fleet().fleet.heartbeat_s == H


def test_a_frozen_workers_expired_task_goes_to_a_heartbeating_worker_not_back_to_it() -> None:
    core = fleet("frozen", "rescuer")  # binpack ties break by id: "frozen" is picked first
    enqueue(core, "t1")
    assert placed(core.dispatch(T0, token)) == [("t1", "frozen", 1)]
    for s in (1, 2, 3):  # frozen from here on; the rescuer heartbeats every second
        heartbeat(core, "rescuer", s)
    assert [lease.task_id for lease in core.expire(t(3))] == ["t1"]
    assert placed(core.dispatch(t(3), token)) == [("t1", "rescuer", 2)]


def test_a_silent_worker_gets_nothing_until_it_is_heard_from_again() -> None:
    core = fleet("frozen")
    enqueue(core, "t1")
    assert placed(core.dispatch(T0, token)) == [("t1", "frozen", 1)]
    assert [lease.task_id for lease in core.expire(t(3))] == ["t1"]
    for s in (3, 5, 10, 14.9):  # before: epochs 2, 3, 4 ... here, until suspect at 15 s
        assert core.dispatch(t(s), token) == [], s
    heartbeat(core, "frozen", 20)  # it woke up (SIGCONT) and reported its status
    assert placed(core.dispatch(t(20), token)) == [("t1", "frozen", 2)]


def test_two_heartbeats_of_silence_end_new_leases() -> None:
    core = fleet("quiet")
    enqueue(core, "t1")
    assert core.dispatch(t(2 * H), token) == []  # silent for two heartbeats
    assert placed(core.dispatch(t(2 * H - 0.1), token)) == [("t1", "quiet", 1)]


def test_after_an_expired_lease_only_a_report_newer_than_the_expiry_counts() -> None:
    """A status read late (seen before the expiry was decided) does not vouch for the worker."""
    core = fleet("w1")
    enqueue(core, "t1")
    assert placed(core.dispatch(T0, token)) == [("t1", "w1", 1)]
    core.fleet.workers["w1"].last_seen = t(2.5)  # a progress-only worker: the lease not extended
    assert [lease.task_id for lease in core.expire(t(3))] == ["t1"]
    assert core.dispatch(t(3), token) == []
    core.fleet.upsert(  # its next status report replaces the view: the expiry is remembered
        WorkerView("w1", "default", "1.0", frozenset({"encode"}), 1, 1000, last_seen=t(2.9))
    )
    assert core.dispatch(t(3.1), token) == []
    heartbeat(core, "w1", 3.2)
    assert placed(core.dispatch(t(3.2), token)) == [("t1", "w1", 2)]
