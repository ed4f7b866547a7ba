"""What must happen after a decision, as data: ``effects(state, events) -> list[Effect]``.

Input: the events one decision produced and the workflow state after *all* of them (a task
scheduled and failed in the same decision is not queued). Output, in event order (each event's
timers first), the follow-up work another part of the system must do:

- ``QueueTask``: put a worker task (``WorkflowState.runs_on_worker``) on the ready queue, when it is
  scheduled and again after an expired lease of its latest attempt or a reconciler's
  ``task.requeued`` (``requeue=True``), with the rate and concurrency limits of its pinned
  TaskDef for the dispatcher.
- ``SetTimer``: a durable timer (``timers.timers_for``); when due, deliver ``fire``. With
  ``requeue_after`` (seconds; the runtime passes ``ES_SCHED_RUN_REQUEUE_AFTER_S``) every
  ``QueueTask`` also sets the reconciler's ``timers.requeue_timer`` (ADR 15); without it
  (the simulator, whose queue loses nothing) there is none.
- ``ClearTimer``: a timer its task or workflow outlived (``timers.timers_cleared``): forget it
  unfired. A timer armed and cleared by the same decision is written neither way when no
  earlier decision can have armed it (``timers.armed_first``), else only its clear.
- ``WakeRetry``: a failed attempt to retry after ``delay_seconds``; when due, deliver ``fire``.
- ``StartChild``: a workflow to start, with the definition and TaskDefs its parent pinned when
  it started (``pins.pinned_child``). Finding an unpinned one by name is the caller's I/O;
  ``child_input(effect, lookup)`` then gives the one input to deliver (the child's
  ``StartWorkflow``, or the "child failed" notice to the parent when no definition exists).
- ``TerminateChild`` / ``NotifyParent``: the exact input to deliver to another workflow.

Every input an effect leads to has a deterministic ``input_id`` (``start-child:<child>``,
``cancel-child:<task>``, ``child-ended:<child>``, and ``timers.timer_input`` /
``timers.retry_input`` for fires), so a redelivery is dropped by the receiving decider.

Pure: the runtime outbox turns effects into Kafka records, the simulator into in-memory queues;
neither decides what follows an event. Conductor's ``DeciderService.DeciderOutcome`` (tasks to
schedule and update, returned as data to ``WorkflowExecutor``) is the precedent (ADR 0008).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, assert_never, cast

from es_sched.domain import commands as c
from es_sched.domain.definitions import (
    NO_LIMITS,
    TaskLimits,
    TaskSettings,
    settings_for,
    steps_to_end,
)
from es_sched.domain.events import (
    CommandRejected,
    CompletionRejected,
    Event,
    LeaseExpired,
    LoopIterated,
    TaskCancelConfirmed,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskDispatched,
    TaskFailed,
    TaskParkedForReview,
    TaskProgressed,
    TaskRequeued,
    TaskRetryScheduled,
    TaskReviewed,
    TaskScheduled,
    TaskStarted,
    TaskTimedOut,
    VariablesSet,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowEnding,
    WorkflowPaused,
    WorkflowRejected,
    WorkflowRerun,
    WorkflowRestarted,
    WorkflowResumed,
    WorkflowRetried,
    WorkflowSlaAtRisk,
    WorkflowSlaBreached,
    WorkflowStarted,
    WorkflowStartRequested,
)
from es_sched.domain.evolve import AnyPayload
from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.pins import Lookup, pinned_child
from es_sched.domain.state import WorkflowState
from es_sched.domain.timers import (
    Timer,
    armed_first,
    requeue_timer,
    retry_input,
    timer_input,
    timers_cleared,
    timers_for,
)

JSON = dict[str, Any]


@dataclass(frozen=True)
class QueueTask:
    workflow_id: str
    task_id: str
    ref: str
    name: str
    attempt: int
    requeue: bool = False  # queued again: its lease expired, or the reconciler re-queued it
    limits: TaskLimits = NO_LIMITS  # its pinned TaskDef's rate and concurrency (ADR 13)
    steps_to_end: int = 0  # steps after it to its workflow's end (downstream-first, ADR 69)


@dataclass(frozen=True)
class SetTimer:
    timer: Timer

    @property
    def fire(self) -> c.FireTimer:
        return timer_input(self.timer)


@dataclass(frozen=True)
class ClearTimer:
    timer_id: str


@dataclass(frozen=True)
class WakeRetry:
    workflow_id: str
    task_id: str  # the failed attempt
    attempt: int
    next_attempt: int
    due_at: datetime
    delay_seconds: float

    @property
    def fire(self) -> c.FireTimer:
        return retry_input(self.workflow_id, self.task_id, self.next_attempt, self.due_at)


@dataclass(frozen=True)
class StartChild:
    child_workflow_id: str
    name: str
    version: int | None
    definition: JSON | None  # inline or pinned by the parent; None: look it up by name
    input: JSON
    parent_workflow_id: str
    parent_task_id: str | None  # SUB_WORKFLOW: the task waiting; None: START_WORKFLOW, failure wf
    priority: int
    tenant: str | None
    correlation_id: str
    parent_taskdefs: tuple[JSON, ...]  # the child's TaskDefs when its definition brings none
    taskdefs: tuple[JSON, ...] = ()  # pinned with the definition
    subworkflow_definitions: tuple[JSON, ...] = ()  # the child's own children, pinned
    # A SUB_WORKFLOW runs under its parent's SLA (ADR 67); a START_WORKFLOW or failure
    # workflow is on its own.
    sla_tier: str | None = None
    deadline: datetime | None = None
    sla_retries: int | None = None


@dataclass(frozen=True)
class TerminateChild:
    input: c.TerminateWorkflow


@dataclass(frozen=True)
class NotifyParent:
    input: c.ChildWorkflowEnded


Effect = QueueTask | SetTimer | ClearTimer | WakeRetry | StartChild | TerminateChild | NotifyParent


def child_start_id(child_workflow_id: str) -> str:
    return f"start-child:{child_workflow_id}"


def child_ended_id(child_workflow_id: str) -> str:
    return f"child-ended:{child_workflow_id}"


def effects(
    st: WorkflowState, events: Iterable[Event], requeue_after: float | None = None
) -> list[Effect]:
    out: list[Effect] = []
    events = list(events)
    for event in events:
        follow = _follow(st, event)
        out += [ClearTimer(t) for t in timers_cleared(st, event)]
        out += [SetTimer(timer) for timer in timers_for(st, event)]
        if requeue_after is not None:
            at = event.occurred_at
            out += [
                SetTimer(requeue_timer(fx.workflow_id, fx.task_id, at, requeue_after))
                for fx in follow
                if isinstance(fx, QueueTask)
            ]
        out += follow
    # ADR 44: a timer armed and cleared by one decision (a start reported with its outcome)
    # is not written; the clear stays for a timer of that id an earlier decision may have
    # armed, and goes too when none can have (ADR 48: two tombstones less per short task).
    cleared = {fx.timer_id: i for i, fx in enumerate(out) if isinstance(fx, ClearTimer)}
    if not cleared:
        return out
    fresh = {t for event in events for t in armed_first(st, event)}  # ids hashed only now
    return [
        fx
        for i, fx in enumerate(out)
        if not (isinstance(fx, SetTimer) and cleared.get(fx.timer.timer_id, -1) > i)
        and not (isinstance(fx, ClearTimer) and fx.timer_id in fresh)
    ]


def child_input(fx: StartChild, lookup: Lookup) -> c.Input | None:
    """The input a ``StartChild`` leads to: the child's ``StartWorkflow``; without a definition
    the "child failed" notice to the waiting parent task, or None when nothing waits for it."""
    found = (fx.definition, list(fx.taskdefs)) if fx.definition else lookup(fx.name, fx.version)
    if found is None:
        if fx.parent_task_id is None:
            return None
        return c.ChildWorkflowEnded(
            child_ended_id(fx.child_workflow_id),
            fx.parent_workflow_id,
            child_workflow_id=fx.child_workflow_id,
            task_id=fx.parent_task_id,
            status="FAILED",
            reason=f"no definition for workflow {fx.name!r}",
        )
    definition, taskdefs = found
    linked = fx.parent_task_id is not None
    return c.StartWorkflow(
        child_start_id(fx.child_workflow_id),
        fx.child_workflow_id,
        name=fx.name,
        version=fx.version,
        input=dict(fx.input),
        priority=fx.priority,
        tenant=fx.tenant,
        correlation_id=fx.correlation_id,
        definition=definition,
        taskdefs=taskdefs or [dict(td) for td in fx.parent_taskdefs],
        subworkflow_definitions=list(fx.subworkflow_definitions),
        parent_workflow_id=fx.parent_workflow_id if linked else None,
        parent_task_id=fx.parent_task_id,
        sla_tier=fx.sla_tier,
        deadline=fx.deadline,
        sla_retries=fx.sla_retries,
    )


def _follow(st: WorkflowState, event: Event) -> list[Effect]:
    p = cast(AnyPayload, event.payload)
    match p:
        case TaskScheduled():
            return _queue(st, p.task_id) if st.runs_on_worker(p.def_ref) else []
        case LeaseExpired():
            latest = st.latest.get(st.tasks[p.task_id].ref) == p.task_id
            return _queue(st, p.task_id, requeue=True) if latest else []
        case TaskRequeued():
            return _queue(st, p.task_id, requeue=True)  # decide checked it is the latest
        case TaskRetryScheduled():
            attempt = st.tasks[p.task_id].attempt
            return [
                WakeRetry(
                    st.workflow_id, p.task_id, attempt, p.next_attempt, p.due_at, p.delay_seconds
                )
            ]
        case WorkflowStartRequested():
            return [_start_child(st, p)]
        case TaskCanceled():
            child = st.tasks[p.task_id].child_workflow_id
            if child is None:
                return []
            cancel = c.TerminateWorkflow(
                f"cancel-child:{p.task_id}", child, reason="parent task canceled"
            )
            return [TerminateChild(cancel)]
        case WorkflowCompleted():
            return _notify_parent(st, "COMPLETED", p.output, "")
        case WorkflowEnded():
            return _notify_parent(st, p.status, p.output, p.reason)
        case (
            WorkflowStarted()
            | WorkflowEnding()
            | WorkflowPaused()
            | WorkflowResumed()
            | WorkflowRetried()
            | VariablesSet()
            | CommandRejected()
            | TaskDispatched()
            | TaskStarted()
            | TaskProgressed()
            | TaskCompleted()
            | TaskCompletedWithErrors()
            | TaskFailed()
            | TaskTimedOut()
            | LoopIterated()
            | CompletionRejected()
            | TaskCancelConfirmed()
            | WorkflowRestarted()
            | WorkflowRerun()
            | TaskParkedForReview()
            | TaskReviewed()
            | WorkflowSlaAtRisk()
            | WorkflowSlaBreached()
        ):
            return []  # nothing leaves the workflow (its timers come from timers_for)
        case WorkflowRejected():
            return []  # outside any history (domain.refusals): it answers, nothing follows
        case _:
            assert_never(p)


def _queue(st: WorkflowState, task_id: str, requeue: bool = False) -> list[Effect]:
    task = st.tasks[task_id]
    if task.terminal:  # failed while scheduled, or ended before its lease ran out
        return []
    limits = task_limits(st, task_id)
    steps = steps_to_end(st.definition, task.def_ref)
    return [
        QueueTask(
            st.workflow_id, task_id, task.ref, task.name, task.attempt, requeue, limits, steps
        )
    ]


def task_limits(st: WorkflowState, task_id: str) -> TaskLimits:
    """A task's limits from the TaskDefs pinned in its workflow (and its own overrides), so
    a TaskDef pushed later changes nothing for a running workflow."""
    task = st.tasks[task_id]
    definition = st.lookup_task(task.def_ref)
    if definition is not None:
        return TaskLimits.of(settings_for(definition, st.taskdefs))
    taskdef = st.taskdefs.get(task.name)
    return TaskLimits.of(TaskSettings(**taskdef.overrides)) if taskdef else TaskLimits()


def _start_child(st: WorkflowState, p: WorkflowStartRequested) -> StartChild:
    pinned = pinned_child(st, p)
    return StartChild(
        child_workflow_id=p.child_workflow_id,
        name=p.name,
        version=p.version,
        definition=pinned.definition if pinned else p.definition,
        input=dict(p.input),
        parent_workflow_id=st.workflow_id,
        parent_task_id=p.task_id,
        priority=st.priority,
        tenant=st.tenant,
        correlation_id=st.correlation_id,
        parent_taskdefs=tuple(dict(td.raw) for td in st.taskdefs.values()),
        taskdefs=tuple(pinned.taskdefs) if pinned else (),
        subworkflow_definitions=tuple(pinned.pins) if pinned else (),
        sla_tier=st.sla_tier if p.task_id is not None else None,
        deadline=st.deadline if p.task_id is not None else None,
        sla_retries=st.sla_retries if p.task_id is not None else None,
    )


def _notify_parent(st: WorkflowState, status: str, output: JSON, reason: str) -> list[Effect]:
    if not st.parent_workflow_id:
        return []
    ended = c.ChildWorkflowEnded(
        child_ended_id(st.workflow_id),
        st.parent_workflow_id,
        child_workflow_id=st.workflow_id,
        task_id=st.parent_task_id or "",
        status=status,
        output=dict(output),
        reason=reason,
    )
    return [NotifyParent(ended)]


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
