"""Restart and rerun (ADR 27): a workflow in a terminal state runs again, from its beginning or
from one task; reset instances keep their history and are replaced by new instances (new ids,
attempt 1), so a late report for a reset instance is refused and each (task, attempt) keeps one
outcome; a running workflow refuses both as events; the projectors' rows follow the fold."""

from __future__ import annotations

from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.events import (
    CommandRejected,
    CompletionRejected,
    TaskScheduled,
    WorkflowRerun,
    WorkflowRestarted,
    WorkflowStartRequested,
)
from es_sched.domain.state import TaskState
from es_sched.projections.views import comparable, fold_rows, rows_of
from es_sched.serialization import decode_event, decode_input, encode_event, encode_input
from tests.unit.domain.harness import Driver, task, workflow

LINEAR = workflow(
    task("probe", "media.probe"),
    task("encode", "media.encode", inputParameters={"src": "${probe.output.uri}"}),
    task("package", "media.package"),
    name="media",
)
FORKED = workflow(
    task("fork", type_="FORK_JOIN", forkTasks=[[task("a1"), task("a2")], [task("b1")]]),
    task("join", type_="JOIN", joinOn=["a2", "b1"]),
    task("publish"),
    name="forked",
)
LOOP = workflow(
    task(
        "loop", type_="DO_WHILE", loopCondition="$.loop['iteration'] < 3", loopOver=[task("step")]
    ),
    task("after"),
    name="looped",
)


def views_agree(d: Driver) -> None:
    rows = fold_rows(d.events)
    assert rows is not None
    wf, tasks = rows_of(d.st)
    assert comparable(rows.workflow) == comparable(wf)

    def key(r: dict[str, Any]) -> str:
        return str(r["task_id"])

    have = sorted(({**comparable(r), "version": None} for r in rows.tasks.values()), key=key)
    assert have == sorted(({**comparable(r), "version": None} for r in tasks), key=key)


def one_outcome_per_attempt(d: Driver) -> None:
    outcomes = [
        (e.payload.task_id, d.st.tasks[e.payload.task_id].attempt)  # type: ignore[attr-defined]
        for e in d.events
        if e.type in ("task.completed", "task.failed", "task.timed_out", "task.canceled")
    ]
    assert len(outcomes) == len(set(outcomes))


def failed_linear() -> Driver:
    d = Driver(LINEAR, {"source": "s3://in/1.mov"})
    d.report("probe", output={"uri": "file:///1"})
    d.report("encode", "TERMINAL", reason="codec crashed")
    assert d.st.status == "FAILED"
    return d


def test_a_running_workflow_refuses_restart_and_rerun_as_events() -> None:
    d = Driver(LINEAR)
    for cmd in (
        c.RestartWorkflow("restart-1", "wf-1", actor="cli:alice"),
        c.RerunWorkflow("rerun-1", "wf-1", task="probe", actor="cli:alice"),
    ):
        (event,) = d.send(cmd)
        assert isinstance(event.payload, CommandRejected) and event.actor == "cli:alice"
        assert "terminal state" in event.payload.reason and "RUNNING" in event.payload.reason
    assert d.st.status == "RUNNING"


def test_restart_runs_a_terminated_workflow_again_with_new_task_instances() -> None:
    d = Driver(LINEAR, {"source": "s3://in/1.mov"})
    d.report("probe", "STARTED")
    old_probe = d.latest("probe")
    d.send(c.TerminateWorkflow("term-1", "wf-1"))
    assert d.st.status == "TERMINATED"
    events = d.send(c.RestartWorkflow("restart-1", "wf-1", actor="api:ops"))
    assert isinstance(events[0].payload, WorkflowRestarted)
    assert events[0].payload.reset == [old_probe.task_id]
    assert d.st.status == "RUNNING" and d.st.input == {"source": "s3://in/1.mov"}
    new_probe = d.latest("probe")
    assert new_probe.task_id != old_probe.task_id and new_probe.attempt == 1
    assert d.st.tasks[old_probe.task_id].retried and d.st.tasks[old_probe.task_id].status == (
        "CANCELED"
    )
    for ref in ("probe", "encode", "package"):
        d.report(ref)
    assert d.st.status == "COMPLETED"
    views_agree(d)
    one_outcome_per_attempt(d)


def test_a_late_report_for_a_reset_instance_is_refused() -> None:
    d = Driver(LINEAR)
    d.report("probe", "STARTED")
    stale: TaskState = d.latest("probe")
    d.send(c.TerminateWorkflow("term-1", "wf-1"))
    d.send(c.RestartWorkflow("restart-1", "wf-1"))
    late = c.ReportCompleted(
        "late-1",
        "wf-1",
        task_id=stale.task_id,
        attempt=stale.attempt,
        worker_id="w1",
        lease_epoch=stale.lease_epoch,
        lease_token=f"tok-{stale.task_id}",
    )
    (event,) = d.send(late)
    assert isinstance(event.payload, CompletionRejected)
    assert "stale" in event.payload.reason
    assert d.latest("probe").status == "SCHEDULED"


def test_restart_with_the_latest_definition_runs_that_definition() -> None:
    d = Driver(LINEAR)
    d.send(c.TerminateWorkflow("term-1", "wf-1"))
    v2 = {**workflow(task("probe", "media.probe"), name="media"), "version": 2}
    d.send(c.RestartWorkflow("restart-1", "wf-1", definition=v2, input={"source": "b"}))
    assert d.st.definition.version == 2 and d.st.input == {"source": "b"}
    d.report("probe")
    assert d.st.status == "COMPLETED"
    rows = fold_rows(d.events)
    assert rows is not None and rows.workflow["def_version"] == 2
    views_agree(d)


def test_restart_refuses_an_invalid_definition() -> None:
    d = Driver(LINEAR)
    d.send(c.TerminateWorkflow("term-1", "wf-1"))
    (event,) = d.send(c.RestartWorkflow("restart-1", "wf-1", definition={"name": "media"}))
    assert isinstance(event.payload, CommandRejected) and "invalid definition" in (
        event.payload.reason
    )


def test_rerun_from_a_task_resets_it_and_what_came_after_and_keeps_what_came_before() -> None:
    d = failed_linear()
    probe, failed = d.latest("probe"), d.latest("encode")
    events = d.send(
        c.RerunWorkflow("rerun-1", "wf-1", task="encode", task_input={"crf": 20}, actor="cli:bob")
    )
    started, scheduled = events[0].payload, events[1].payload
    assert isinstance(started, WorkflowRerun) and started.reset == [failed.task_id]
    assert isinstance(scheduled, TaskScheduled) and scheduled.ref == "encode"
    assert scheduled.input == {"src": "file:///1", "crf": 20}  # merged over the resolved input
    assert scheduled.attempt == 1 and scheduled.task_id != failed.task_id
    assert {e.actor for e in events} == {"cli:bob"}
    assert d.latest("probe") is probe  # kept, with its output
    d.report("encode")
    d.report("package")
    assert d.st.status == "COMPLETED"
    views_agree(d)
    one_outcome_per_attempt(d)


def test_rerun_by_task_id_of_an_older_attempt_reruns_its_reference() -> None:
    d = failed_linear()
    old = d.latest("encode").task_id
    d.send(c.RerunWorkflow("rerun-1", "wf-1", task=old))
    assert d.latest("encode").task_id != old and d.latest("encode").status == "SCHEDULED"


def test_rerun_of_an_unknown_task_is_refused() -> None:
    d = failed_linear()
    (event,) = d.send(c.RerunWorkflow("rerun-1", "wf-1", task="nope"))
    assert isinstance(event.payload, CommandRejected) and "no task 'nope'" in event.payload.reason


def test_rerun_without_a_task_is_a_restart_with_the_new_input() -> None:
    d = failed_linear()
    events = d.send(c.RerunWorkflow("rerun-1", "wf-1", workflow_input={"source": "s3://in/2"}))
    assert isinstance(events[0].payload, WorkflowRestarted)
    assert d.st.input == {"source": "s3://in/2"} and d.latest("probe").status == "SCHEDULED"


def test_rerun_inside_a_fork_resets_the_join_and_later_tasks_only() -> None:
    d = Driver(FORKED)
    d.report("a1")
    d.report("b1", "TERMINAL", reason="broken")
    assert d.st.status == "FAILED"
    a1, a2, join = d.latest("a1"), d.latest("a2"), d.latest("join")
    (started, *_) = d.send(c.RerunWorkflow("rerun-1", "wf-1", task="b1"))
    assert isinstance(started.payload, WorkflowRerun)
    reset = set(started.payload.reset)
    assert join.task_id in reset and a2.task_id in reset and a1.task_id not in reset
    assert d.latest("a1") is a1
    for ref in ("a2", "b1"):
        d.report(ref)
    d.report("publish")
    assert d.st.status == "COMPLETED"
    assert d.latest("join").task_id != join.task_id and d.latest("join").status == "COMPLETED"
    views_agree(d)
    one_outcome_per_attempt(d)


def test_rerun_inside_a_loop_reruns_the_whole_loop_and_refuses_a_task_input() -> None:
    d = Driver(LOOP)
    d.report("step__1")
    d.report("step__2", "TERMINAL", reason="broken")
    assert d.st.status == "FAILED"
    (refused,) = d.send(c.RerunWorkflow("r-1", "wf-1", task="step__2", task_input={"x": 1}))
    assert isinstance(refused.payload, CommandRejected) and "'loop'" in refused.payload.reason
    loop = d.latest("loop")
    (started, *_) = d.send(c.RerunWorkflow("r-2", "wf-1", task="step__2"))
    assert isinstance(started.payload, WorkflowRerun) and started.payload.task_id == loop.task_id
    assert d.latest("step__1").status == "SCHEDULED"  # iteration 1 runs again
    for ref in ("step__1", "step__2", "step__3", "after"):
        d.report(ref)
    assert d.st.status == "COMPLETED"
    views_agree(d)
    one_outcome_per_attempt(d)


def test_rerun_of_a_sub_workflow_task_starts_a_new_child() -> None:
    child = workflow(task("inner"), name="child")
    parent = workflow(
        task(
            "sub",
            type_="SUB_WORKFLOW",
            subWorkflowParam={"name": "child", "version": 1, "workflowDefinition": child},
        ),
        name="parent",
    )
    d = Driver(parent)
    first = [e.payload for e in d.events if isinstance(e.payload, WorkflowStartRequested)]
    sub = d.latest("sub")
    old_child = first[0].child_workflow_id
    d.send(
        c.ChildWorkflowEnded(
            "child-end-1",
            "wf-1",
            child_workflow_id=old_child,
            task_id=sub.task_id,
            status="FAILED",
            reason="x",
        )
    )
    assert d.st.status == "FAILED"
    events = d.send(c.RerunWorkflow("rerun-1", "wf-1", task="sub"))
    again = [e.payload for e in events if isinstance(e.payload, WorkflowStartRequested)]
    assert len(again) == 1 and again[0].child_workflow_id != first[0].child_workflow_id
    assert again[0].task_id == d.latest("sub").task_id != sub.task_id
    # the old child's late end names the reset instance: ignored
    late = c.ChildWorkflowEnded(
        "late-end", "wf-1", child_workflow_id=old_child, task_id=sub.task_id, status="COMPLETED"
    )
    assert d.send(late) == []


def test_the_new_commands_and_events_survive_the_wire() -> None:
    d = failed_linear()
    cmd = c.RerunWorkflow("rerun-1", "wf-1", task="encode", task_input={"crf": 20}, actor="cli:b")
    assert decode_input(encode_input(cmd)) == cmd
    restart = c.RestartWorkflow("restart-1", "wf-1", input={"a": 1}, actor="cli:b")
    assert decode_input(encode_input(restart)) == restart
    for event in d.send(cmd):
        assert decode_event(encode_event(event)) == event
    d.report("encode", "TERMINAL")
    for event in d.send(restart):
        assert decode_event(encode_event(event)) == event
