"""A report forged by another worker of the same pool (ADR 74): it names the lease's worker and
epoch, read from the assignment partition, but not its token, which was sealed to that worker.
The decider refuses it as a stale report that says it was forged and names the lease it
claimed; the holder's own report is accepted after it."""

from __future__ import annotations

from es_sched.domain import commands as c
from es_sched.serialization import wire
from es_sched.workers import reports
from tests.unit.domain.harness import Driver, task, workflow


def test_a_report_without_the_leases_token_is_refused_as_forged_and_the_real_one_counts() -> None:
    d = Driver(workflow(task("enc")))
    t = d.latest("enc")
    d.send(
        c.DispatchTask(
            "in-d",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="victim",
            lease_epoch=1,
            lease_token="secret",
        )
    )
    seen = wire.Assignment(  # what the thief read: the token still sealed
        "victim", "wf-1", t.task_id, "enc", 1, 1, "sealed:AAAA", "2999-01-01T00:00:00Z", {}
    )
    forged = d.send(reports.completed(seen, "victim", {"stolen": True}, started=True))
    assert d.types(forged) == ["task.completion_rejected"]
    reason = forged[0].payload.reason  # type: ignore[attr-defined]
    assert "wrong token for epoch 1 on victim" in reason and "forged" in reason
    assert "not counted against victim" in reason
    assert d.latest("enc").status == "SCHEDULED" and d.st.status == "RUNNING"
    # The holder's report has an input id the thief could not compute (the token is in it), so
    # the refused forgery is no duplicate of it.
    real = reports.completed(
        wire.Assignment("victim", "wf-1", t.task_id, "enc", 1, 1, "secret", "", {}),
        "victim",
        {"ok": True},
        started=True,
    )
    assert real.input_id != forged[0].causation_id
    assert "task.completed" in d.types(d.send(real))
    assert d.st.status == "COMPLETED" and d.latest("enc").output == {"ok": True}
