"""``evolve(state, event) -> state`` and ``fold(events)``: the only way state changes.

Pure and total over ``EVENT_TYPES``: an unknown payload type fails loudly (``assert_never``).
The fold trusts the log: it applies what the decider decided and checks nothing but the
envelope's ``seq``, which must follow the state's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import assert_never

from es_sched.domain import state as s
from es_sched.domain.definitions import (
    DefinitionError,
    parse_task_def,
    parse_tasks,
    parse_workflow,
)
from es_sched.domain.events import (
    CommandRejected,
    CompletionRejected,
    Event,
    LeaseExpired,
    LoopIterated,
    Payload,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskDispatched,
    TaskFailed,
    TaskProgressed,
    TaskRetryScheduled,
    TaskScheduled,
    TaskStarted,
    TaskTimedOut,
    VariablesSet,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowEnding,
    WorkflowPaused,
    WorkflowResumed,
    WorkflowRetried,
    WorkflowStarted,
    WorkflowStartRequested,
)
from es_sched.errors import DomainError


def _started(event: Event, p: WorkflowStarted) -> s.WorkflowState:
    definition, problems = parse_workflow(p.definition)
    if definition is None or problems:
        raise DefinitionError(problems)
    taskdefs = {}
    for doc in p.taskdefs:
        td, _ = parse_task_def(doc)
        if td is not None:
            taskdefs[td.name] = td
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
    )


def _task(st: s.WorkflowState, task_id: str, event: Event, **changes: object) -> s.WorkflowState:
    task = replace(st.tasks[task_id], **changes)  # type: ignore[arg-type]
    return replace(st, tasks={**st.tasks, task_id: task})


def _end_task(
    st: s.WorkflowState, task_id: str, event: Event, status: str, **changes: object
) -> s.WorkflowState:
    return _task(st, task_id, event, status=status, ended_at=event.occurred_at, **changes)


def _scheduled(st: s.WorkflowState, event: Event, p: TaskScheduled) -> s.WorkflowState:
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
    )
    tasks = dict(st.tasks)
    previous = st.latest.get(p.ref)
    if previous is not None:
        tasks[previous] = replace(tasks[previous], retried=True, retry_due_at=None)
    tasks[p.task_id] = task
    dynamic = st.dynamic
    if p.dynamic_tasks:
        problems: list[str] = []
        parsed = parse_tasks(p.dynamic_tasks, problems, f"task {p.ref!r} dynamic tasks")
        dynamic = {**dynamic, **{t.ref: t for t in parsed}}
    return replace(st, tasks=tasks, latest={**st.latest, p.ref: p.task_id}, dynamic=dynamic)


def _apply(st: s.WorkflowState, event: Event) -> s.WorkflowState:
    p: Payload = event.payload
    match p:
        case WorkflowStarted():
            raise DomainError(f"workflow {event.workflow_id} started twice (seq {event.seq})")
        case WorkflowCompleted():
            return replace(
                st,
                status=s.COMPLETED,
                output=p.output,
                reason=p.reason,
                ended_at=event.occurred_at,
                ending=None,
            )
        case WorkflowEnding():
            return replace(st, ending=p.status, reason=p.reason, output=p.output or st.output)
        case WorkflowEnded():
            return replace(
                st,
                status=p.status,
                reason=p.reason,
                output=p.output or st.output,
                ending=None,
                ended_at=event.occurred_at,
            )
        case WorkflowPaused():
            return replace(st, status=s.PAUSED)
        case WorkflowResumed():
            return replace(st, status=s.RUNNING)
        case WorkflowRetried():
            return replace(st, status=s.RUNNING, ending=None, reason="", ended_at=None)
        case VariablesSet():
            return replace(st, variables={**st.variables, **p.variables})
        case WorkflowStartRequested():
            if p.task_id is None:
                return st
            return _task(st, p.task_id, event, child_workflow_id=p.child_workflow_id)
        case CommandRejected() | CompletionRejected():
            return st
        case TaskScheduled():
            return _scheduled(st, event, p)
        case TaskDispatched():
            return _task(
                st,
                p.task_id,
                event,
                worker_id=p.worker_id,
                lease_epoch=p.lease_epoch,
                lease_token=p.lease_token,
            )
        case TaskStarted():
            return _task(
                st,
                p.task_id,
                event,
                status=s.IN_PROGRESS,
                started_at=event.occurred_at,
                last_progress_at=event.occurred_at,
                worker_id=p.worker_id,
            )
        case TaskProgressed():
            return _task(
                st, p.task_id, event, progress=p.percent, last_progress_at=event.occurred_at
            )
        case TaskCompleted():
            return _end_task(st, p.task_id, event, s.T_COMPLETED, output=p.output)
        case TaskCompletedWithErrors():
            output = p.output if p.output is not None else st.tasks[p.task_id].output
            return _end_task(st, p.task_id, event, s.T_COMPLETED_WITH_ERRORS, output=output)
        case TaskFailed():
            status = s.T_FAILED_TERMINAL if p.terminal else s.T_FAILED
            return _end_task(st, p.task_id, event, status, reason=p.reason, output=p.output)
        case TaskTimedOut():
            return _end_task(st, p.task_id, event, s.T_TIMED_OUT, reason=f"{p.kind} timeout")
        case TaskCanceled():
            return _end_task(st, p.task_id, event, s.T_CANCELED, reason=p.reason)
        case TaskRetryScheduled():
            return _task(st, p.task_id, event, retry_due_at=p.due_at)
        case LeaseExpired():
            return _task(st, p.task_id, event, status=s.SCHEDULED, worker_id=None, lease_token=None)
        case LoopIterated():
            return _task(st, p.task_id, event, iteration=p.iteration, output=p.output)
        case _:
            assert_never(p)  # type: ignore[arg-type]


def evolve(state: s.WorkflowState | None, event: Event) -> s.WorkflowState:
    if state is None:
        if not isinstance(event.payload, WorkflowStarted):
            raise DomainError(
                f"workflow {event.workflow_id}: history starts with {event.type}, "
                "not workflow.started"
            )
        return _started(event, event.payload)
    if event.seq != state.seq + 1:
        raise DomainError(
            f"workflow {state.workflow_id}: event seq {event.seq} does not follow {state.seq}"
        )
    new = _apply(state, event)
    recent = (*new.recent_inputs, event.causation_id)
    if new.recent_inputs and new.recent_inputs[-1] == event.causation_id:
        recent = new.recent_inputs
    return replace(
        new,
        seq=event.seq,
        updated_at=event.occurred_at,
        recent_inputs=recent[-s.RECENT_INPUTS :],
    )


def fold(events: Iterable[Event], state: s.WorkflowState | None = None) -> s.WorkflowState | None:
    for event in events:
        state = evolve(state, event)
    return state
