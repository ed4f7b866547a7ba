"""A worker's decline (``worker.task_declined``): it gives its live lease back unused, the
task is queued again with its attempt kept (as a lease expiry, ADR 24 a), so no retry is spent
even with ``retryCount 0``; from a lease that is not live it is refused like any stale report."""

from __future__ import annotations

from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.effects import QueueTask, effects
from es_sched.domain.events import CompletionRejected, LeaseExpired
from tests.unit.domain.harness import Driver, task, workflow

NO_RETRY = workflow(task("enc", "encode"), name="declined")
TASKDEFS = [{"name": "encode", "retryCount": 0}]


def _lease(d: Driver, epoch: int, token: str, worker: str = "gw") -> dict[str, Any]:
    t = d.latest("enc")
    return dict(
        task_id=t.task_id, attempt=t.attempt, worker_id=worker, lease_epoch=epoch, lease_token=token
    )


def _dispatched() -> Driver:
    d = Driver(NO_RETRY, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("in-d", d.workflow_id, **_lease(d, 1, "a")))
    return d


def test_a_decline_from_the_live_lease_requeues_the_task_with_its_attempt_kept() -> None:
    d = _dispatched()
    t = d.latest("enc")
    out = d.send(c.ReportDeclined("in-x", d.workflow_id, **_lease(d, 1, "a"), reason="no poll"))
    assert [e.payload for e in out] == [LeaseExpired(t.task_id, 1)]
    after = d.latest("enc")
    assert (after.task_id, after.attempt, after.status) == (t.task_id, 1, "SCHEDULED")
    assert after.lease_token is None and d.st.status == "RUNNING"
    queued = [fx for fx in effects(d.st, out) if isinstance(fx, QueueTask)]
    assert [(q.task_id, q.attempt, q.requeue) for q in queued] == [(t.task_id, 1, True)]
    # retryCount 0: the next lease still runs attempt 1 to the workflow's end.
    d.send(c.DispatchTask("in-d2", d.workflow_id, **_lease(d, 2, "b", "w2")))
    d.send(c.ReportCompleted("in-r", d.workflow_id, **_lease(d, 2, "b", "w2")))
    assert d.st.status == "COMPLETED" and d.latest("enc").attempt == 1


def test_a_started_task_declined_is_given_back_as_an_expiry() -> None:
    d = _dispatched()
    d.send(c.ReportStarted("in-s", d.workflow_id, **_lease(d, 1, "a")))
    out = d.send(c.ReportDeclined("in-x", d.workflow_id, **_lease(d, 1, "a"), reason="stop"))
    assert [e.type for e in out] == ["task.lease_expired"]
    assert d.latest("enc").status == "SCHEDULED" and d.latest("enc").attempt == 1


def test_a_decline_not_from_the_live_lease_is_rejected() -> None:
    d = _dispatched()
    for i, lease in enumerate(
        [_lease(d, 1, "forged"), _lease(d, 2, "a"), _lease(d, 1, "a", worker="other")]
    ):
        out = d.send(c.ReportDeclined(f"in-x{i}", d.workflow_id, **lease, reason="late"))
        assert [type(e.payload) for e in out] == [CompletionRejected]
    assert d.latest("enc").lease_token == "a"
    d.send(c.ExpireLease("in-e", d.workflow_id, task_id=d.latest("enc").task_id, lease_epoch=1))
    late = d.send(c.ReportDeclined("in-late", d.workflow_id, **_lease(d, 1, "a"), reason="late"))
    rejected = late[0].payload
    assert isinstance(rejected, CompletionRejected) and "no live lease" in rejected.reason
    assert d.st.status == "RUNNING" and d.latest("enc").attempt == 1
