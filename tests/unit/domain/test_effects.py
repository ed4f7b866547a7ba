"""``effects(state, events)``: each kind of follow-up work, with its deterministic input ids."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.effects import (
    ClearTimer,
    Effect,
    NotifyParent,
    QueueTask,
    SetTimer,
    StartChild,
    TerminateChild,
    WakeRetry,
    child_input,
    effects,
)
from es_sched.domain.events import Event, LeaseExpired
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids, timer_id
from es_sched.domain.pins import Found
from es_sched.domain.state import WorkflowState
from tests.unit.domain.harness import SCRIPTS, T0, Driver, task, workflow

TASKDEF = {"name": "encode", "retryCount": 2, "retryDelaySeconds": 5, "retryLogic": "FIXED"}


def last(d: Driver, events: list[Event]) -> list[Effect]:
    return effects(d.st, events)


def of(kind: type[Any], found: list[Effect]) -> list[Any]:
    return [fx for fx in found if isinstance(fx, kind)]


def never(name: str, version: int | None) -> Found | None:
    raise AssertionError(f"looked up {name!r} although the definition is embedded")


# -- QueueTask ------------------------------------------------------------------------------
def test_a_scheduled_worker_task_is_queued_a_system_task_is_not() -> None:
    d = Driver(workflow(task("set", type_="SET_VARIABLE", inputParameters={"x": 1}), task("a")))
    found = effects(d.st, d.events)
    t = d.latest("a")
    assert found == [QueueTask("wf-1", t.task_id, "a", "a", 1)]


def test_a_task_failed_while_scheduled_is_not_queued() -> None:
    d = Driver(workflow(task("a", resources="${workflow.input.r}")), inp={"r": "lots"})
    assert d.latest("a").status == "FAILED_WITH_TERMINAL_ERROR"
    assert of(QueueTask, effects(d.st, d.events)) == []


def test_an_expired_lease_queues_the_latest_attempt_again() -> None:
    d = Driver(workflow(task("a")))
    d.report("a", "STARTED")
    t = d.latest("a")
    events = d.send(c.ExpireLease("exp-1", "wf-1", task_id=t.task_id, lease_epoch=t.lease_epoch))
    assert [e.type for e in events] == ["task.lease_expired"]
    assert last(d, events) == [QueueTask("wf-1", t.task_id, "a", "a", 1, requeue=True)]


def test_an_expired_lease_of_a_superseded_or_ended_attempt_queues_nothing() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[TASKDEF])
    first = d.latest("enc")
    d.report("enc", "FAILED", reason="crash")
    d.advance(5)
    d.fire("retry", "enc")
    assert d.latest("enc").attempt == 2
    # a stale expiry of attempt 1 (ended, and no longer the latest): effects stay silent
    stale = dataclasses.replace(d.events[-1], payload=LeaseExpired(first.task_id, 1))
    assert effects(d.st, [stale]) == []


def test_a_queued_task_carries_the_steps_left_after_it_in_its_workflow() -> None:
    """Downstream-first (ADR 69): the dispatcher starts the task nearer its workflow's end."""
    d = Driver(workflow(task("a"), task("b"), task("c")))
    (first,) = of(QueueTask, effects(d.st, d.events))
    assert (first.ref, first.steps_to_end) == ("a", 2)
    events = d.report("a")
    (second,) = of(QueueTask, last(d, events))
    assert (second.ref, second.steps_to_end) == ("b", 1)


# -- SetTimer -------------------------------------------------------------------------------
def test_timeouts_and_wait_deadlines_are_timers_with_deterministic_fire_ids() -> None:
    taskdef = {"name": "encode", "responseTimeoutSeconds": 30, "timeoutSeconds": 120}
    d = Driver(workflow(task("enc", name="encode"), timeoutSeconds=600), taskdefs=[taskdef])
    started = of(SetTimer, effects(d.st, d.events))
    assert [(fx.timer.kind, fx.timer.due_at) for fx in started] == [
        ("workflow_timeout", T0 + timedelta(seconds=600))
    ]
    events = d.report("enc", "STARTED")
    timers = {fx.timer.kind: fx for fx in of(SetTimer, last(d, events))}
    assert set(timers) == {"response_timeout", "total_timeout"}
    rt = timers["response_timeout"]
    tid = d.latest("enc").task_id
    assert rt.timer.timer_id == timer_id("wf-1", "response_timeout", tid)
    assert rt.fire == c.FireTimer(
        f"timer:{rt.timer.timer_id}:{(T0 + timedelta(seconds=30)).isoformat()}",
        "wf-1",
        kind="response_timeout",
        task_id=tid,
        due_at=T0 + timedelta(seconds=30),
    )


def test_an_ended_task_and_workflow_clear_the_timers_they_outlived() -> None:
    """Issue 15: armed and never cleared, every one of them came back when due as a
    ``timer.fired`` the decider ignores (28 per 1080p media workflow)."""
    taskdef = {"name": "encode", "responseTimeoutSeconds": 30, "timeoutSeconds": 120}
    d = Driver(workflow(task("enc", name="encode"), timeoutSeconds=600), taskdefs=[taskdef])
    assert of(ClearTimer, effects(d.st, d.events)) == []
    d.report("enc", "STARTED")
    tid = d.latest("enc").task_id
    found = last(d, d.report("enc", "COMPLETED"))
    assert of(ClearTimer, found) == [
        ClearTimer(timer_id("wf-1", kind, tid))
        for kind in ("response_timeout", "total_timeout", "requeue")
    ] + [ClearTimer(timer_id("wf-1", "workflow_timeout", "-"))]  # the workflow completed
    assert of(SetTimer, found) == []


def test_a_system_task_ending_clears_nothing() -> None:
    d = Driver(workflow(task("v", type_="SET_VARIABLE", inputParameters={"x": 1})))
    assert d.st.status == "COMPLETED" and of(ClearTimer, effects(d.st, d.events)) == []


def test_a_wait_with_a_duration_sets_a_wait_timer() -> None:
    d = Driver(workflow(task("w", type_="WAIT", inputParameters={"duration": "10s"})))
    (fx,) = of(SetTimer, effects(d.st, d.events))
    assert (fx.timer.kind, fx.timer.task_id) == ("wait", d.latest("w").task_id)
    assert fx.fire.due_at == T0 + timedelta(seconds=10)


# -- WakeRetry ------------------------------------------------------------------------------
def test_a_failed_attempt_with_retries_left_wakes_through_the_retry_tiers() -> None:
    d = Driver(workflow(task("enc", name="encode")), taskdefs=[TASKDEF])
    first = d.latest("enc")
    events = d.report("enc", "FAILED", reason="crash")
    found: list[Effect] = [fx for fx in last(d, events) if not isinstance(fx, ClearTimer)]
    assert of(SetTimer, found) == [] and of(QueueTask, found) == []  # a retry is not a timer
    due = T0 + timedelta(seconds=5)
    assert found == [WakeRetry("wf-1", first.task_id, 1, 2, due, 5.0)]
    assert found[0].fire == c.FireTimer(  # type: ignore[union-attr]
        f"retry:{first.task_id}:2", "wf-1", kind="retry", task_id=first.task_id, due_at=due
    )
    d.advance(5)
    events = d.send(found[0].fire)  # type: ignore[union-attr]
    second = d.latest("enc")
    assert second.attempt == 2
    assert last(d, events) == [QueueTask("wf-1", second.task_id, "enc", "encode", 2)]


# -- StartChild -----------------------------------------------------------------------------
CHILD = workflow(task("inner"), name="child")
CHILD_TASKDEFS = [{"name": "inner", "retryCount": 0}]


def sub(**param: Any) -> dict[str, Any]:
    return task("sub", type_="SUB_WORKFLOW", subWorkflowParam=param)


def started_child(definition: dict[str, Any]) -> tuple[Driver, StartChild]:
    d = Driver(definition, taskdefs=[TASKDEF])
    (fx,) = of(StartChild, effects(d.st, d.events))
    return d, fx


def test_a_sub_workflow_starts_its_child_linked_to_the_waiting_task() -> None:
    d, fx = started_child(workflow(sub(name="child", version=1)))
    parent_task = d.latest("sub")
    assert (fx.name, fx.version, fx.definition) == ("child", 1, None)
    assert (fx.parent_workflow_id, fx.parent_task_id) == ("wf-1", parent_task.task_id)
    assert fx.child_workflow_id == parent_task.child_workflow_id
    start = child_input(fx, lambda name, version: (CHILD, CHILD_TASKDEFS))
    assert isinstance(start, c.StartWorkflow)
    assert start.input_id == f"start-child:{fx.child_workflow_id}"
    assert start.workflow_id == fx.child_workflow_id
    assert (start.parent_workflow_id, start.parent_task_id) == ("wf-1", parent_task.task_id)
    assert (start.priority, start.tenant, start.correlation_id) == (4, None, "wf-1")
    assert (start.definition, start.taskdefs) == (CHILD, CHILD_TASKDEFS)


def test_a_child_whose_definition_brings_no_taskdefs_gets_the_parents() -> None:
    _, fx = started_child(workflow(sub(name="child")))
    start = child_input(fx, lambda name, version: (CHILD, []))
    assert isinstance(start, c.StartWorkflow)
    assert start.taskdefs == [TASKDEF]
    inline = workflow(sub(name="child", workflowDefinition=CHILD))
    _, fx = started_child(inline)
    assert fx.definition == CHILD
    start = child_input(fx, never)  # embedded: no registry look-up
    assert isinstance(start, c.StartWorkflow)
    assert (start.definition, start.taskdefs) == (CHILD, [TASKDEF])


def test_a_sub_workflow_of_an_unknown_definition_fails_its_parent_task_once() -> None:
    d, fx = started_child(workflow(sub(name="nope")))
    notice = child_input(fx, lambda name, version: None)
    assert notice == c.ChildWorkflowEnded(
        f"child-ended:{fx.child_workflow_id}",
        "wf-1",
        child_workflow_id=fx.child_workflow_id,
        task_id=d.latest("sub").task_id,
        status="FAILED",
        reason="no definition for workflow 'nope'",
    )
    assert notice is not None
    d.send(notice)
    assert d.latest("sub").status == "FAILED"


def test_start_workflow_starts_an_unlinked_child_or_nothing_when_unknown() -> None:
    spec = {"startWorkflow": {"name": "child", "input": {"k": 1}}}
    _, fx = started_child(workflow(task("go", type_="START_WORKFLOW", inputParameters=spec)))
    assert fx.parent_task_id is None and fx.input == {"k": 1}
    start = child_input(fx, lambda name, version: (CHILD, CHILD_TASKDEFS))
    assert isinstance(start, c.StartWorkflow)
    assert (start.parent_workflow_id, start.parent_task_id) == (None, None)
    assert child_input(fx, lambda name, version: None) is None  # nobody waits for it


# -- TerminateChild and NotifyParent ----------------------------------------------------------
def test_canceling_a_running_sub_workflow_task_terminates_its_child() -> None:
    d, fx = started_child(workflow(sub(name="child")))
    events = d.send(c.CancelWorkflow("cancel-1", "wf-1"))
    sub_task = d.latest("sub")
    assert sub_task.status == "CANCELED"
    assert of(TerminateChild, last(d, events)) == [
        TerminateChild(
            c.TerminateWorkflow(
                f"cancel-child:{sub_task.task_id}",
                fx.child_workflow_id,
                reason="parent task canceled",
            )
        )
    ]


def child_state(status: str) -> tuple[WorkflowState, list[Event]]:
    start = c.StartWorkflow(
        "start-child:c-1",
        "c-1",
        name="child",
        definition=CHILD,
        taskdefs=CHILD_TASKDEFS,
        parent_workflow_id="p-1",
        parent_task_id="p-task",
    )
    ids = counter_ids("x")
    events = decide(None, start, T0, ids, SCRIPTS)
    st = fold(events)
    assert st is not None
    inner = st.instance("inner")
    assert inner is not None
    lease: dict[str, Any] = {"task_id": inner.task_id, "worker_id": "w", "lease_token": "tok"}
    end: c.Input = (
        c.ReportCompleted("i-2", "c-1", **lease, output={"v": 7})
        if status == "COMPLETED"
        else c.ReportFailed("i-2", "c-1", **lease, reason="bad", terminal=True)
    )
    for inp in [c.DispatchTask("i-1", "c-1", **lease), end]:
        events = decide(st, inp, T0, ids, SCRIPTS)
        after = fold(events, st)
        assert after is not None
        st = after
    return st, events


def test_a_child_that_ends_notifies_its_parent() -> None:
    st, events = child_state("COMPLETED")
    assert st.status == "COMPLETED"
    (fx,) = of(NotifyParent, effects(st, events))
    assert fx.input == c.ChildWorkflowEnded(
        "child-ended:c-1",
        "p-1",
        child_workflow_id="c-1",
        task_id="p-task",
        status="COMPLETED",
        output=st.output,
        reason="",
    )
    st, events = child_state("FAILED")
    (fx,) = of(NotifyParent, effects(st, events))
    assert (fx.input.status, fx.input.input_id) == ("FAILED", "child-ended:c-1")
    assert "bad" in fx.input.reason


def test_a_top_level_workflow_notifies_nobody() -> None:
    d = Driver(workflow(task("a")))
    events = d.report("a")
    assert d.st.status == "COMPLETED"
    assert [fx for fx in last(d, events) if not isinstance(fx, ClearTimer)] == []
