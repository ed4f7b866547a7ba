"""Durable timers implied by events: what must fire, when, as a ``timer.fired`` input.

``timers_for(state, event)`` reads one applied event (with the state after it) and returns the
timers it sets (workflow and task timeouts, WAIT deadlines, a workflow's SLA at-risk point and
deadline). A timer's id is deterministic per (workflow, kind, task), so a later timer of the same
id replaces the earlier one (progress pushes a response timeout back). Timers are never cancelled:
the decider ignores one whose task or workflow has moved on. ``requeue_timer`` is the reconciler's
(ADR 15): set with every queueing of a worker task (``effects``), it asks the decider to queue the
task again if it still waits unleased. Retry wake-ups are not timers here: they travel through the
retry tiers (``effects.WakeRetry``) and come back as ``retry_input``.

``timer_input`` and ``retry_input`` build the ``timer.fired`` input the decider receives, with
the deterministic input ids every runtime (timer service, retry relay, simulator) must use: a
fire delivered twice is then dropped by the decider's idempotency check.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from es_sched.domain import sla
from es_sched.domain.commands import FireTimer
from es_sched.domain.context import settings
from es_sched.domain.events import (
    Event,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskFailed,
    TaskProgressed,
    TaskScheduled,
    TaskStarted,
    TaskTimedOut,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowRestarted,
    WorkflowStarted,
)
from es_sched.domain.ids import timer_id
from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.retry import after
from es_sched.domain.state import WorkflowState
from es_sched.domain.timeouts import total_timeout


@dataclass(frozen=True)
class Timer:
    timer_id: str
    workflow_id: str
    kind: str
    task_id: str | None
    due_at: datetime


def _timer(wf: str, kind: str, task_id: str | None, due: datetime) -> Timer:
    return Timer(timer_id(wf, kind, task_id or "-"), wf, kind, task_id, due)


def timers_for(state: WorkflowState, event: Event) -> list[Timer]:
    p, wf, at = event.payload, event.workflow_id, event.occurred_at
    if isinstance(p, WorkflowStarted | WorkflowRestarted):  # a restart runs the clock again
        limit = state.definition.timeout_seconds
        out = [_timer(wf, "workflow_timeout", None, after(at, limit))] if limit > 0 else []
        return out + sla_timers(state, at)
    if isinstance(p, TaskScheduled) and p.wait_until is not None:
        return [_timer(wf, "wait", p.task_id, p.wait_until)]
    if isinstance(p, TaskStarted | TaskProgressed):
        task = state.tasks.get(p.task_id)
        definition = state.lookup_task(task.def_ref) if task else None
        if task is None or definition is None:
            return []
        s = settings(state, definition)
        out = []
        if s.response_timeout_seconds > 0:
            out.append(
                _timer(wf, "response_timeout", p.task_id, after(at, s.response_timeout_seconds))
            )
        limit = total_timeout(task, s)  # the attempt's recorded one, if any (ADR 65)
        if isinstance(p, TaskStarted) and limit > 0:
            out.append(_timer(wf, "total_timeout", p.task_id, after(at, limit)))
        return out
    return []


SLA_TIMERS = ("sla_at_risk", "sla_deadline")  # domain.sla: the workflow's, by kind


def sla_timers(state: WorkflowState, at: datetime) -> list[Timer]:
    """A workflow with a deadline still ahead of ``at``: the at-risk and the deadline timers
    (``task_inputs.timer_fired`` writes ``workflow.sla_at_risk`` / ``workflow.sla_breached``)."""
    deadline, wf = state.deadline, state.workflow_id
    if deadline is None or deadline <= at:
        return []
    warn = sla.at_risk_at(state.created_at, deadline)
    out = [_timer(wf, "sla_at_risk", None, warn)] if warn > at else []
    return [*out, _timer(wf, "sla_deadline", None, deadline)]


TASK_TIMERS = ("response_timeout", "total_timeout", "requeue")  # a worker task's, by kind
TASK_ENDED = TaskCompleted | TaskCompletedWithErrors | TaskFailed | TaskTimedOut | TaskCanceled


def timers_cleared(state: WorkflowState, event: Event) -> list[str]:
    """The ids of the timers ``event`` leaves nothing to do: a worker task's (its response and
    total timeouts, the reconciler's requeue) once the task ended, the workflow's timeout once
    the workflow ended. Left armed, each would come back when due as a ``timer.fired`` the
    decider ignores, several per task of every workflow (ADR 42)."""
    p, wf = event.payload, event.workflow_id
    if isinstance(p, TASK_ENDED):
        task = state.tasks.get(p.task_id)
        if task is None or not state.runs_on_worker(task.def_ref):
            return []
        return [timer_id(wf, kind, p.task_id) for kind in TASK_TIMERS]
    if isinstance(p, WorkflowCompleted | WorkflowEnded):
        out = (
            [timer_id(wf, "workflow_timeout", "-")] if state.definition.timeout_seconds > 0 else []
        )
        if state.deadline is not None:
            out += [timer_id(wf, kind, "-") for kind in SLA_TIMERS]
        return out
    return []


def armed_first(state: WorkflowState, event: Event) -> list[str]:
    """The ids of timers ``event`` arms that no earlier decision can have armed: a worker task's
    response and total timeouts when it starts under its first lease. Only a start arms them
    and a task's leases are numbered from 1, one more per dispatch (``dispatch.core.leases``),
    so under lease 1 the task never started before. A decision that arms and clears one of
    these (a start reported with its outcome, ADR 44) writes neither the timer nor its
    tombstone (``effects``, ADR 48)."""
    p = event.payload
    if not isinstance(p, TaskStarted):
        return []
    task = state.tasks.get(p.task_id)
    if task is None or task.lease_epoch != 1:
        return []
    wf = event.workflow_id
    return [timer_id(wf, "response_timeout", p.task_id), timer_id(wf, "total_timeout", p.task_id)]


def requeue_timer(workflow_id: str, task_id: str, queued_at: datetime, after_s: float) -> Timer:
    """The reconciler's timer of a task queued at ``queued_at``: due ``after_s`` later. One id
    per task instance, so queueing the task again pushes it back."""
    return _timer(workflow_id, "requeue", task_id, after(queued_at, after_s))


def timer_input(timer: Timer) -> FireTimer:
    """The ``timer.fired`` input of a due timer; ``input_id = timer:<timer id>:<due_at UTC>``."""
    due = timer.due_at.astimezone(UTC)
    return FireTimer(
        input_id=f"timer:{timer.timer_id}:{due.isoformat()}",
        workflow_id=timer.workflow_id,
        kind=timer.kind,
        task_id=timer.task_id,
        due_at=due,
    )


def retry_input(workflow_id: str, task_id: str, next_attempt: int, due_at: datetime) -> FireTimer:
    """The ``timer.fired(kind=retry)`` input of a released retry of ``task_id`` (the failed
    attempt); ``input_id = retry:<task id>:<next attempt>``."""
    return FireTimer(
        input_id=f"retry:{task_id}:{next_attempt}",
        workflow_id=workflow_id,
        kind="retry",
        task_id=task_id,
        due_at=due_at.astimezone(UTC),
    )


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
