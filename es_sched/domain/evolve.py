"""``evolve(state, event) -> state`` and ``fold(events)``: the only way state changes.

Pure and total over ``EVENT_TYPES``: an unknown payload type fails loudly (``assert_never``).
The fold trusts the log: it applies what the decider decided and checks nothing but the
envelope's ``seq``, which must follow the state's. ``workflow.rejected`` belongs to no history
(``domain.refusals``): ``fold`` skips it, ``evolve`` and ``advance`` refuse it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, assert_never, cast

from es_sched.domain import fanout, review
from es_sched.domain import state as s
from es_sched.domain.definitions import DefinitionError, parse_tasks
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
from es_sched.domain.parsed import parse_workflow_cached, taskdefs_by_name
from es_sched.domain.refusals import is_refusal
from es_sched.domain.timeouts import recorded_seconds
from es_sched.errors import DomainError

AnyPayload = (
    WorkflowStarted
    | WorkflowCompleted
    | WorkflowEnding
    | WorkflowEnded
    | WorkflowPaused
    | WorkflowResumed
    | WorkflowRetried
    | VariablesSet
    | WorkflowStartRequested
    | CommandRejected
    | TaskScheduled
    | TaskDispatched
    | TaskStarted
    | TaskProgressed
    | TaskCompleted
    | TaskCompletedWithErrors
    | TaskFailed
    | TaskTimedOut
    | TaskCanceled
    | TaskRetryScheduled
    | LeaseExpired
    | LoopIterated
    | CompletionRejected
    | TaskRequeued
    | WorkflowRejected
    | TaskCancelConfirmed
    | WorkflowRestarted
    | WorkflowRerun
    | TaskParkedForReview
    | TaskReviewed
    | WorkflowSlaAtRisk
    | WorkflowSlaBreached
)


def _started(event: Event, p: WorkflowStarted) -> s.WorkflowState:
    definition, problems = parse_workflow_cached(p.definition)
    if definition is None or problems:
        raise DefinitionError(problems)
    taskdefs = taskdefs_by_name(p.taskdefs)
    return s.WorkflowState(
        workflow_id=event.workflow_id,
        definition=definition,
        taskdefs=taskdefs,
        status=s.RUNNING,
        input=dict(p.input),
        created_at=event.occurred_at,
        correlation_id=event.correlation_id,
        seq=event.seq,
        priority=p.priority,
        tenant=p.tenant,
        variables=dict(definition.raw.get("variables") or {}),
        updated_at=event.occurred_at,
        parent_workflow_id=p.parent_workflow_id,
        parent_task_id=p.parent_task_id,
        subworkflow_definitions=tuple(p.subworkflow_definitions),
        recent_inputs=(event.causation_id,),
        sla_tier=p.sla_tier,
        deadline=p.deadline,
        sla_retries=p.sla_retries,
    )


def _task(st: s.WorkflowState, task_id: str, **changes: Any) -> None:
    old = st.tasks[task_id]
    task = old.clone()  # copy-on-write: the previous state keeps its task
    for key, value in changes.items():
        setattr(task, key, value)
    st.tasks[task_id] = task  # type: ignore[index]
    if st.fan_of and st.latest.get(task.ref) == task_id:
        fanout.changed(st, task.ref, old, task)


def _end_task(st: s.WorkflowState, task_id: str, event: Event, status: str, **changes: Any) -> None:
    _task(st, task_id, status=status, ended_at=event.occurred_at, **changes)


def _scheduled(st: s.WorkflowState, event: Event, p: TaskScheduled) -> None:
    task = s.TaskState(
        task_id=p.task_id,
        ref=p.ref,
        def_ref=p.def_ref,
        task_type=p.task_type,
        name=p.name,
        attempt=p.attempt,
        status=p.status,
        input=p.input,
        scheduled_at=event.occurred_at,
        order=len(st.tasks),
        iteration=p.iteration,
        started_at=event.occurred_at if p.status == s.IN_PROGRESS else None,
        wait_until=p.wait_until,
        callback=p.callback,
        priority=p.priority,
        resources=p.resources,
        rate_limit_key=p.rate_limit_key,
        timeout_s=recorded_seconds(p.timeout) if p.timeout else None,
    )
    previous = st.latest.get(p.ref)
    if previous is not None:
        _task(st, previous, retried=True, retry_due_at=None)
    st.tasks[p.task_id] = task  # type: ignore[index]
    st.latest[p.ref] = p.task_id  # type: ignore[index]
    if st.fan_of:
        fanout.changed(st, p.ref, st.tasks[previous] if previous is not None else None, task)
    if p.dynamic_tasks:
        problems: list[str] = []
        parsed = parse_tasks(p.dynamic_tasks, problems, f"task {p.ref!r} dynamic tasks")
        fanout.dropped(st, (t.ref for t in parsed))
        st.dynamic = {**st.dynamic, **{t.ref: t for t in parsed}}


def _reset(st: s.WorkflowState, event: Event, p: WorkflowRestarted | WorkflowRerun) -> None:
    """Restart or rerun (``domain.rerun``): the listed instances keep their history but stop
    being current, so the walk schedules their references again as new instances."""
    for task_id in p.reset:
        _task(st, task_id, retried=True, retry_due_at=None)
    gone = set(p.reset)
    st.latest = {ref: tid for ref, tid in st.latest.items() if tid not in gone}
    st.status, st.ending, st.reason, st.ended_at = s.RUNNING, None, "", None
    st.input, st.output = dict(p.input), {}
    if isinstance(p, WorkflowRestarted):
        if p.definition is not None:
            definition, problems = parse_workflow_cached(p.definition)
            if definition is None or problems:
                raise DefinitionError(problems)
            st.definition = definition
            st.taskdefs = taskdefs_by_name(p.taskdefs)
            st.subworkflow_definitions = tuple(p.subworkflow_definitions)
        st.variables = dict(st.definition.raw.get("variables") or {})
        st.created_at, st.dynamic = event.occurred_at, {}
    fanout.rebuild(st)


def _settle(st: s.WorkflowState) -> None:
    """An ended workflow keeps its task maps as plain ``dict``s. ``clone`` made them ``Layered``
    (a shared base, a top of recent changes, the wrapper: more memory than the ``dict``), and a
    decider keeps ended states long after their last copy (until retired, ADR 18). Once per
    workflow, O(tasks)."""
    st.tasks, st.latest = dict(st.tasks.items()), dict(st.latest.items())


def _apply(st: s.WorkflowState, event: Event) -> None:
    """Apply one event to ``st`` in place (``st`` is a private copy: ``WorkflowState.clone``)."""
    p = cast(AnyPayload, event.payload)
    match p:
        case WorkflowStarted():
            raise DomainError(f"workflow {event.workflow_id} started twice (seq {event.seq})")
        case WorkflowCompleted():
            st.status, st.output, st.reason = s.COMPLETED, p.output, p.reason
            st.ended_at, st.ending = event.occurred_at, None
            _settle(st)
        case WorkflowEnding():
            st.ending, st.reason, st.output = p.status, p.reason, p.output or st.output
        case WorkflowEnded():
            st.status, st.reason, st.output = p.status, p.reason, p.output or st.output
            st.ending, st.ended_at = None, event.occurred_at
            _settle(st)
        case WorkflowPaused():
            st.status = s.PAUSED
        case WorkflowResumed():
            st.status = s.RUNNING
        case WorkflowRetried():
            st.status, st.ending, st.reason, st.ended_at = s.RUNNING, None, "", None
        case VariablesSet():
            st.variables = {**st.variables, **p.variables}
        case WorkflowStartRequested():
            if p.task_id is not None:
                _task(st, p.task_id, child_workflow_id=p.child_workflow_id)
        case (
            CommandRejected()
            | CompletionRejected()
            | TaskCancelConfirmed()
            | WorkflowSlaAtRisk()
            | WorkflowSlaBreached()
        ):
            pass
        case WorkflowRejected():  # unreachable: _check refuses it first
            raise DomainError(f"workflow {event.workflow_id}: a refusal is outside any history")
        case TaskScheduled():
            _scheduled(st, event, p)
        case TaskDispatched():
            _task(
                st,
                p.task_id,
                worker_id=p.worker_id,
                lease_epoch=p.lease_epoch,
                lease_token=p.lease_token,
            )
        case TaskStarted():
            _task(
                st,
                p.task_id,
                status=s.IN_PROGRESS,
                started_at=event.occurred_at,
                last_progress_at=event.occurred_at,
                worker_id=p.worker_id,
            )
        case TaskProgressed():
            _task(st, p.task_id, progress=p.percent, last_progress_at=event.occurred_at)
        case TaskCompleted():
            _end_task(st, p.task_id, event, s.T_COMPLETED, output=p.output)
            if "forkedTasks" in p.output and fanout.is_dynamic_fork(st, st.tasks[p.task_id]):
                fanout.forked(st, st.tasks[p.task_id])
        case TaskCompletedWithErrors():
            output = p.output if p.output is not None else st.tasks[p.task_id].output
            _end_task(st, p.task_id, event, s.T_COMPLETED_WITH_ERRORS, output=output)
        case TaskFailed():
            status = s.T_FAILED_TERMINAL if p.terminal else s.T_FAILED
            _end_task(st, p.task_id, event, status, reason=p.reason, output=p.output)
        case TaskTimedOut():
            _end_task(st, p.task_id, event, s.T_TIMED_OUT, reason=f"{p.kind} timeout")
        case TaskCanceled():
            _end_task(st, p.task_id, event, s.T_CANCELED, reason=p.reason)
        case TaskRetryScheduled():
            _task(st, p.task_id, retry_due_at=p.due_at)
        case LeaseExpired():
            _task(st, p.task_id, status=s.SCHEDULED, worker_id=None, lease_token=None)
        case LoopIterated():
            _task(st, p.task_id, iteration=p.iteration, output=p.output)
        case TaskRequeued():
            pass  # the task waits as it did: only its ready record is written again
        case WorkflowRestarted() | WorkflowRerun():
            _reset(st, event, p)
        case TaskParkedForReview():
            _task(st, p.task_id, status=s.T_PARKED)
        case TaskReviewed():
            if p.decision == "fail":
                reason = review.failed_reason(p.reason)
                _task(st, p.task_id, status=s.T_FAILED_TERMINAL, reason=reason)
            else:  # retry: the attempt failed; the next one, scheduled next, supersedes it
                _task(st, p.task_id, status=s.T_FAILED)
        case _:
            assert_never(p)
    st.seq, st.updated_at = event.seq, event.occurred_at
    if not st.recent_inputs or st.recent_inputs[-1] != event.causation_id:
        st.recent_inputs = (*st.recent_inputs, event.causation_id)[-s.RECENT_INPUTS :]


def _check(state: s.WorkflowState | None, event: Event) -> None:
    if is_refusal(event):
        raise DomainError(
            f"workflow {event.workflow_id}: {event.type} is outside any history (seq "
            f"{event.seq}); fold skips it, nothing evolves with it"
        )
    if state is None:
        if not isinstance(event.payload, WorkflowStarted):
            raise DomainError(
                f"workflow {event.workflow_id}: history starts with {event.type}, "
                "not workflow.started"
            )
    elif event.seq != state.seq + 1:
        raise DomainError(
            f"workflow {state.workflow_id}: event seq {event.seq} does not follow {state.seq}"
        )


def evolve(state: s.WorkflowState | None, event: Event) -> s.WorkflowState:
    """The state after ``event``; ``state`` itself is left unchanged."""
    _check(state, event)
    if state is None:
        return _started(event, cast(WorkflowStarted, event.payload))
    new = state.clone()
    _apply(new, event)
    return new


def fold(events: Iterable[Event], state: s.WorkflowState | None = None) -> s.WorkflowState | None:
    """``evolve`` over a history, applying it to one private copy of ``state``."""
    current = state.clone() if state is not None else None
    for event in events:
        if is_refusal(event):
            continue  # a refusal outside any history (domain.refusals): not part of the fold
        _check(current, event)
        if current is None:
            current = _started(event, cast(WorkflowStarted, event.payload))
        else:
            _apply(current, event)
    return current


def advance(state: s.WorkflowState | None, event: Event) -> s.WorkflowState:
    """``evolve`` without the copy: ``state`` is changed in place and returned. Only for a
    caller that owns ``state`` outright (the auditors' replay folds millions of events)."""
    _check(state, event)
    if state is None:
        return _started(event, cast(WorkflowStarted, event.payload))
    _apply(state, event)
    return state
