"""Fencing: a task's outcome is accepted once per attempt, and only from the lease then live.

The property test drives one worker task with retries through random interleavings of dispatches
(new epoch and token, any worker; the same epoch again under a new token, as after a grant lost in a
dispatcher's crash, ADR 50; an older epoch, as from a zombie), lease expiries (current or stale
epoch), worker reports (started, progress, completed, failed, cancelled, declined; from the live
lease, an old one, another worker, or made up) and retry timers. An oracle replays the events alone:
``TaskDispatched`` makes a lease live; ``LeaseExpired`` and every event that ends the attempt make
it dead. Every accepted outcome must come from the input whose (worker, epoch, token, attempt)
equals the live lease at that moment, and no (task, attempt) may have two accepted outcomes. A
worker's cancel confirmation is never an outcome: whatever lease it names, it is recorded as
``task.cancel_confirmed`` alone and leaves the workflow's state as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from es_sched.domain import commands as c
from es_sched.domain.events import (
    CompletionRejected,
    Event,
    LeaseExpired,
    TaskCancelConfirmed,
    TaskCanceled,
    TaskCompleted,
    TaskDispatched,
    TaskFailed,
    TaskStarted,
    TaskTimedOut,
)
from tests.unit.domain.harness import Driver, task, workflow

RUNS = 600  # hypothesis examples per run of the property test
RETRYING = workflow(task("enc", "encode"), name="fenced")
TASKDEFS = [{"name": "encode", "retryCount": 3, "retryLogic": "FIXED", "retryDelaySeconds": 1}]
OUTCOMES = TaskCompleted | TaskFailed
ENDS = TaskCompleted | TaskFailed | TaskTimedOut | TaskCanceled


@dataclass(frozen=True)
class Lease:
    task_id: str
    attempt: int
    worker_id: str
    epoch: int
    token: str


def _oracle(events: list[Event], inputs: dict[str, c.Input]) -> None:
    live: dict[str, Lease] = {}
    accepted: dict[tuple[str, int], str] = {}
    for e in events:
        p = e.payload
        if isinstance(p, TaskDispatched):
            live[p.task_id] = Lease(p.task_id, p.attempt, p.worker_id, p.lease_epoch, p.lease_token)
        elif isinstance(p, OUTCOMES | TaskStarted):
            inp = inputs[e.causation_id]
            assert isinstance(inp, c.WorkerReport), f"{e.type} caused by {inp}"
            assert not isinstance(inp, c.ReportCancelled), f"{e.type} from a cancel report"
            lease = live.get(p.task_id)
            assert lease is not None, f"{e.type} of {p.task_id} accepted without a live lease"
            got = Lease(inp.task_id, inp.attempt, inp.worker_id, inp.lease_epoch, inp.lease_token)
            assert got == lease, f"{e.type} accepted from {got}, live lease {lease}"
            if isinstance(p, OUTCOMES):
                key = (p.task_id, lease.attempt)
                assert key not in accepted, f"second outcome for {key}"
                accepted[key] = e.type
        if isinstance(p, LeaseExpired) and isinstance(inputs.get(e.causation_id), c.WorkerReport):
            inp = inputs[e.causation_id]  # a decline gives back only the live lease
            assert isinstance(inp, c.ReportDeclined), f"{e.type} caused by {inp}"
            lease = live.get(p.task_id)
            got = Lease(inp.task_id, inp.attempt, inp.worker_id, inp.lease_epoch, inp.lease_token)
            assert got == lease, f"declined from {got}, live lease {lease}"
        if isinstance(p, LeaseExpired | ENDS):
            live.pop(p.task_id, None)


def _same_state(before: Any, after: Any) -> bool:
    """Equal but for what every recorded event moves: seq, updated_at, recent inputs."""
    ignored = {"seq", "updated_at", "recent_inputs"}
    fields = [k for k in vars(before) if k not in ignored]
    return all(getattr(before, k) == getattr(after, k) for k in fields)


# One step: (kind, worker index, epoch offset, token choice).
step = st.tuples(
    st.sampled_from(
        [
            "dispatch",
            "regrant",
            "stale-dispatch",
            "expire",
            "started",
            "progress",
            "completed",
            "failed",
            "cancelled",
            "declined",
            "retry",
            "wait",
        ]
    ),
    st.integers(0, 2),  # worker w0..w2
    st.integers(-1, 1),  # epoch relative to the newest one dispatched
    st.sampled_from(["live", "old", "forged"]),  # which token the input carries
)


class Fleet:
    """Remembers every lease handed out so reports can replay live, old or forged ones."""

    def __init__(self, d: Driver) -> None:
        self.d, self.epoch = d, 0
        self.tokens: dict[int, str] = {}
        self.inputs: dict[str, c.Input] = {}

    def send(self, inp: c.Input) -> list[Event]:
        self.inputs[inp.input_id] = inp
        return self.d.send(inp)

    def apply(self, kind: str, worker: int, dep: int, token_kind: str) -> None:
        d = self.d
        if d.st.terminal:
            return
        t = d.latest("enc")
        wid = f"w{worker}"
        if kind == "dispatch":
            self.epoch += 1
            self.tokens[self.epoch] = tok = f"tok-{self.epoch}"
            base: dict[str, Any] = dict(task_id=t.task_id, attempt=t.attempt, worker_id=wid)
            self.send(
                c.DispatchTask(
                    d.inputs(), d.workflow_id, **base, lease_epoch=self.epoch, lease_token=tok
                )
            )
        elif kind in ("regrant", "stale-dispatch"):
            if not self.epoch:
                return  # nothing granted yet to grant again
            epoch = self.epoch if kind == "regrant" else max(0, self.epoch - 1)
            tok = f"tok-{epoch}-{len(self.inputs)}"
            if kind == "regrant":
                self.tokens[epoch] = tok
            base = dict(task_id=t.task_id, attempt=t.attempt, worker_id=wid)
            held = d.latest("enc").lease_epoch
            out = self.send(
                c.DispatchTask(
                    d.inputs(), d.workflow_id, **base, lease_epoch=epoch, lease_token=tok
                )
            )
            if epoch < held:
                assert [type(e.payload) for e in out] == [CompletionRejected], out
        elif kind == "expire":
            self.send(
                c.ExpireLease(
                    d.inputs(),
                    d.workflow_id,
                    task_id=t.task_id,
                    lease_epoch=max(0, self.epoch + dep),
                )
            )
        elif kind == "retry":
            if t.retry_due_at is not None:
                d.now = max(d.now, t.retry_due_at)
                self.send(
                    c.FireTimer(
                        d.inputs(),
                        d.workflow_id,
                        kind="retry",
                        task_id=t.task_id,
                        due_at=t.retry_due_at,
                    )
                )
        elif kind == "wait":
            d.advance(0.5)
        else:
            epoch = max(0, self.epoch + dep)
            token = {
                "live": t.lease_token or "none",
                "old": self.tokens.get(epoch, "none"),
                "forged": "forged",
            }[token_kind]
            attempt = t.attempt if dep >= 0 else max(1, t.attempt - 1)
            lease: dict[str, Any] = dict(
                task_id=t.task_id,
                attempt=attempt,
                worker_id=wid,
                lease_epoch=epoch,
                lease_token=token,
            )
            ids = (d.inputs(), d.workflow_id)
            report: c.Input
            if kind == "started":
                report = c.ReportStarted(*ids, **lease)
            elif kind == "progress":
                report = c.ReportProgress(*ids, **lease, percent=50)
            elif kind == "completed":
                report = c.ReportCompleted(*ids, **lease)
            elif kind == "cancelled":
                report = c.ReportCancelled(*ids, **lease, reason="lease expired")
            elif kind == "declined":
                report = c.ReportDeclined(*ids, **lease, reason="not polled")
            else:
                report = c.ReportFailed(*ids, **lease, reason="boom")
            before = d.state
            out = self.send(report)
            if kind == "cancelled":
                assert [type(e.payload) for e in out] == [TaskCancelConfirmed]
                assert _same_state(before, d.state), "a cancel confirmation changed the state"


@settings(max_examples=RUNS, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=40))
def test_one_accepted_outcome_per_attempt_and_only_from_the_live_lease(
    steps: list[tuple[str, int, int, str]],
) -> None:
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    fleet = Fleet(d)
    for kind, worker, dep, token_kind in steps:
        fleet.apply(kind, worker, dep, token_kind)
    _oracle(d.events, fleet.inputs)


def _lease(d: Driver, epoch: int, token: str, worker: str = "w1") -> dict[str, Any]:
    t = d.latest("enc")
    return dict(
        task_id=t.task_id, attempt=t.attempt, worker_id=worker, lease_epoch=epoch, lease_token=token
    )


def test_a_completion_after_its_lease_expired_is_rejected_and_recorded() -> None:
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("in-d", d.workflow_id, **_lease(d, 1, "a")))
    d.send(c.ExpireLease("in-x", d.workflow_id, task_id=d.latest("enc").task_id, lease_epoch=1))
    late = d.send(c.ReportCompleted("in-r", d.workflow_id, **_lease(d, 1, "a")))
    assert [type(e.payload) for e in late] == [CompletionRejected]
    rejected = late[0].payload
    assert isinstance(rejected, CompletionRejected)
    assert "no live lease" in rejected.reason
    assert d.st.status == "RUNNING" and d.latest("enc").status == "SCHEDULED"


def test_a_report_before_any_dispatch_is_rejected() -> None:
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    out = d.send(c.ReportCompleted("in-r", d.workflow_id, **_lease(d, 1, "a")))
    assert [e.type for e in out] == ["task.completion_rejected"]


def test_the_next_lease_is_accepted_after_an_expiry() -> None:
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("in-d1", d.workflow_id, **_lease(d, 1, "a")))
    d.send(c.ExpireLease("in-x", d.workflow_id, task_id=d.latest("enc").task_id, lease_epoch=1))
    d.send(c.DispatchTask("in-d2", d.workflow_id, **_lease(d, 2, "b", "w2")))
    done = d.send(c.ReportCompleted("in-r", d.workflow_id, **_lease(d, 2, "b", "w2")))
    assert "task.completed" in [e.type for e in done]
    assert d.st.status == "COMPLETED"


def test_a_cancel_confirmation_is_recorded_and_changes_nothing() -> None:
    """After a preemption the worker confirms the cancel; it may even reach the decider before
    the dispatcher's ExpireLease. Either way it is an audit record, never an outcome."""
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("in-d", d.workflow_id, **_lease(d, 1, "a")))
    out = d.send(c.ReportCancelled("in-c", d.workflow_id, **_lease(d, 1, "a"), reason="preempted"))
    assert [e.type for e in out] == ["task.cancel_confirmed"]
    confirmed = out[0].payload
    assert isinstance(confirmed, TaskCancelConfirmed)
    assert (confirmed.worker_id, confirmed.lease_epoch, confirmed.reason) == ("w1", 1, "preempted")
    assert d.latest("enc").lease_token == "a" and d.latest("enc").status == "SCHEDULED"
    d.send(c.ExpireLease("in-x", d.workflow_id, task_id=d.latest("enc").task_id, lease_epoch=1))
    late = d.send(c.ReportCancelled("in-c2", d.workflow_id, **_lease(d, 1, "a"), reason="late"))
    assert [e.type for e in late] == ["task.cancel_confirmed"]
    assert d.st.status == "RUNNING" and d.latest("enc").attempt == 1


def test_an_epoch_granted_again_under_a_new_token_replaces_the_lease_no_worker_got() -> None:
    """ADR 50: the dispatcher's grant was lost in a crash while its DispatchTask landed; the
    next dispatcher grants the same epoch under a new token. The input id names the token, so
    the decider takes it; only the second token (the one a worker received) is live."""
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("dispatch:enc:1:a", d.workflow_id, **_lease(d, 1, "a")))
    again = d.send(c.DispatchTask("dispatch:enc:1:b", d.workflow_id, **_lease(d, 1, "b", "w2")))
    assert [e.type for e in again] == ["task.dispatched"]
    assert (d.latest("enc").lease_token, d.latest("enc").worker_id) == ("b", "w2")
    ghost = d.send(c.ReportCompleted("in-r1", d.workflow_id, **_lease(d, 1, "a")))
    assert [e.type for e in ghost] == ["task.completion_rejected"]
    done = d.send(c.ReportCompleted("in-r2", d.workflow_id, **_lease(d, 1, "b", "w2")))
    assert "task.completed" in [e.type for e in done] and d.st.status == "COMPLETED"


def test_a_dispatch_older_than_the_tasks_lease_is_rejected() -> None:
    d = Driver(RETRYING, taskdefs=TASKDEFS)
    d.send(c.DispatchTask("dispatch:enc:2:b", d.workflow_id, **_lease(d, 2, "b", "w2")))
    late = d.send(c.DispatchTask("dispatch:enc:1:a", d.workflow_id, **_lease(d, 1, "a")))
    assert [type(e.payload) for e in late] == [CompletionRejected]
    rejected = late[0].payload
    assert isinstance(rejected, CompletionRejected) and "epoch 2" in rejected.reason
    assert (d.latest("enc").lease_epoch, d.latest("enc").lease_token) == (2, "b")
