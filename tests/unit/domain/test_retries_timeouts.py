"""Retries with each backoff, timeouts by policy, lease fencing, and workflow-level commands."""

from __future__ import annotations

import pytest

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.definitions import TaskSettings
from es_sched.domain.ids import counter_ids
from es_sched.domain.retry import parse_duration, retry_delay
from tests.unit.domain.harness import T0, Driver, task, workflow


@pytest.mark.parametrize(
    ("logic", "expected"),
    [
        ("FIXED", [10, 10, 10, 10]),
        ("LINEAR_BACKOFF", [30, 60, 90, 120]),  # 10 x scale 3 x attempt
        ("EXPONENTIAL_BACKOFF", [10, 20, 40, 45]),  # doubling, capped at maxRetryDelaySeconds
    ],
)
def test_backoff_needs_only_the_attempt_count(logic: str, expected: list[float]) -> None:
    s = TaskSettings(
        retry_logic=logic,
        retry_delay_seconds=10,
        backoff_scale_factor=3,
        max_retry_delay_seconds=45 if logic == "EXPONENTIAL_BACKOFF" else 0,
    )
    assert [retry_delay(s, n, "task-x") for n in (1, 2, 3, 4)] == expected


def test_jitter_is_bounded_spread_and_replayable() -> None:
    s = TaskSettings(retry_logic="FIXED", retry_delay_seconds=100, retry_jitter=0.3)
    delays = [retry_delay(s, 1, f"task-{i}") for i in range(500)]
    assert all(70 <= d <= 100 for d in delays)
    assert len(set(delays)) > 400  # spread across tasks
    assert delays == [retry_delay(s, 1, f"task-{i}") for i in range(500)]  # no randomness


def test_durations() -> None:
    assert parse_duration("10m20s") == 620
    assert parse_duration("2 hours 30 minutes") == 9000
    assert parse_duration("1 day") == 86400
    with pytest.raises(ValueError, match="unknown unit"):
        parse_duration("3 fortnights")
    with pytest.raises(ValueError, match="cannot read"):
        parse_duration("soon")


TASKDEF = {
    "name": "encode",
    "retryCount": 2,
    "retryLogic": "EXPONENTIAL_BACKOFF",
    "retryDelaySeconds": 5,
}


def test_retries_wait_for_their_timer_then_exhaust() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[TASKDEF])
    d.report("enc", "FAILED", reason="boom")
    first = d.st.tasks[d.st.latest["enc"]]
    assert first.retry_due_at is not None and (first.retry_due_at - T0).total_seconds() == 5
    assert d.fire("retry", "enc") == []  # not due yet
    d.advance(5)
    d.fire("retry", "enc")
    assert d.latest("enc").attempt == 2
    d.report("enc", "FAILED")
    assert (d.st.tasks[d.st.latest["enc"]].retry_due_at - d.now).total_seconds() == 10  # type: ignore[operator]
    d.advance(10)
    d.fire("retry", "enc")
    d.report("enc", "FAILED")
    assert d.st.status == "FAILED"
    assert [t.attempt for t in d.st.tasks.values()] == [1, 2, 3]


def test_terminal_error_is_never_retried() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[TASKDEF])
    d.report("enc", "TERMINAL", reason="not a video")
    assert d.st.status == "FAILED" and len(d.st.tasks) == 1


@pytest.mark.parametrize(
    ("policy", "status", "attempts"),
    [("TIME_OUT_WF", "TIMED_OUT", 1), ("RETRY", "RUNNING", 2), ("ALERT_ONLY", "RUNNING", 1)],
)
def test_response_timeout_by_policy(policy: str, status: str, attempts: int) -> None:
    td = {
        "name": "encode",
        "retryCount": 1,
        "retryDelaySeconds": 0,
        "responseTimeoutSeconds": 60,
        "timeoutPolicy": policy,
    }
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[td])
    d.report("enc", "STARTED")
    d.advance(59)
    assert d.fire("response_timeout", "enc") == []  # heard from within the window
    d.advance(1)
    d.fire("response_timeout", "enc")
    assert d.st.status == status
    assert len(d.st.tasks) == attempts


def test_total_timeout_and_workflow_timeout() -> None:
    td = {"name": "encode", "retryCount": 0, "timeoutSeconds": 600, "timeoutPolicy": "TIME_OUT_WF"}
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[td])
    d.report("enc", "STARTED")
    d.advance(600)
    d.fire("total_timeout", "enc")
    assert (d.latest("enc").status, d.st.status) == ("TIMED_OUT", "TIMED_OUT")
    w = Driver(workflow(task("enc"), timeoutSeconds=30))
    w.advance(31)
    w.fire("workflow_timeout")
    assert w.st.status == "TIMED_OUT" and w.latest("enc").status == "CANCELED"


def test_lease_fencing_rejects_stale_and_forged_reports() -> None:
    d = Driver(workflow(task("enc")))
    t = d.latest("enc")
    d.send(
        c.DispatchTask(
            "in-d1",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w1",
            lease_epoch=1,
            lease_token="tok-a",
        )
    )
    forged = d.send(
        c.ReportCompleted(
            "in-x",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w2",
            lease_epoch=1,
            lease_token="tok-a",
        )
    )
    assert d.types(forged) == ["task.completion_rejected"]
    d.send(c.ExpireLease("in-e", "wf-1", task_id=t.task_id, lease_epoch=1))
    assert d.latest("enc").status == "SCHEDULED"  # back to its queue, attempt not counted
    d.send(
        c.DispatchTask(
            "in-d2",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w3",
            lease_epoch=2,
            lease_token="tok-b",
        )
    )
    stale = d.send(
        c.ReportCompleted(
            "in-s",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w1",
            lease_epoch=1,
            lease_token="tok-a",
        )
    )
    assert "lease mismatch" in stale[0].payload.reason  # type: ignore[attr-defined]
    d.send(
        c.ReportCompleted(
            "in-ok",
            "wf-1",
            task_id=t.task_id,
            attempt=1,
            worker_id="w3",
            lease_epoch=2,
            lease_token="tok-b",
        )
    )
    assert d.st.status == "COMPLETED"
    unknown = d.send(c.ReportCompleted("in-u", "wf-1", task_id="nope", attempt=1, worker_id="w3"))
    assert d.types(unknown) == ["task.completion_rejected"]  # audited, even on a closed workflow
    assert unknown[0].payload.reason == "unknown task"  # type: ignore[attr-defined]


def test_redelivered_input_changes_nothing_and_unknown_workflow_is_refused() -> None:
    d = Driver(workflow(task("enc")))
    t = d.latest("enc")
    report = c.ReportCompleted("in-1", "wf-1", task_id=t.task_id, attempt=1, worker_id="w1")
    assert d.send(report)
    assert d.send(report) == []
    (refused,) = decide(None, c.CancelWorkflow("in-2", "wf-404"), T0, counter_ids())
    assert (refused.type, refused.seq) == ("workflow.rejected", 0)  # see test_refusals.py


def test_cancel_a_running_fork_cancels_every_branch_and_runs_the_callback() -> None:
    d = Driver(
        workflow(
            task("fork", type_="FORK_JOIN", forkTasks=[[task("a")], [task("b")], [task("c")]]),
            task("join", type_="JOIN", joinOn=["a", "b", "c"]),
            task("cb", name="notify", type_="CALLBACK"),
        )
    )
    d.report("a")
    d.send(c.CancelWorkflow("cancel-1", "wf-1", reason="user asked"))
    assert {r[0]: r[2] for r in d.rows()} == {
        "fork": "COMPLETED",
        "a": "COMPLETED",
        "b": "CANCELED",
        "c": "CANCELED",
        "join": "CANCELED",
        "cb": "SCHEDULED",
    }
    d.report("cb")
    assert (d.st.status, d.st.reason) == ("CANCELED", "user asked")


def test_pause_resume_retry_and_expected_version() -> None:
    d = Driver(workflow(task("a"), task("b")))
    d.send(c.PauseWorkflow("p1", "wf-1"))
    d.report("a")
    assert d.st.instance("b") is None  # paused: results are kept, nothing new is scheduled
    conflict = d.send(c.ResumeWorkflow("r0", "wf-1", expected_version=1))
    assert "version_conflict" in conflict[0].payload.reason  # type: ignore[attr-defined]
    d.send(c.ResumeWorkflow("r1", "wf-1", expected_version=d.st.seq))
    d.report("b", "FAILED", reason="flaky")
    assert d.st.status == "FAILED"
    d.send(c.RetryWorkflow("retry-1", "wf-1"))
    assert (d.st.status, d.latest("b").attempt) == ("RUNNING", 2)
    d.report("b")
    assert d.st.status == "COMPLETED"
    again = d.send(c.RetryWorkflow("retry-2", "wf-1"))
    assert d.types(again) == ["command.rejected"]
