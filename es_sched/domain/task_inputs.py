"""How the core decides an input about one task instance: a worker's report and a timer's fire.

- ``report(state, input)``: a report from anywhere but the task's live lease is refused as a
  ``task.completion_rejected`` event naming why (``not_live``: fencing by attempt, epoch, token
  and worker, Kleppmann's fencing tokens); a live one becomes the task's events, an outcome
  with ``started`` recording the start first (ADR 44).
- ``timer_fired(state, input, ctx)``: a fire is acted on only when the state still says it is
  due (the task or workflow has not moved on, the deadline measured from the state has passed),
  so a stale or repeated fire does nothing; what each kind then does (time out the task or the
  workflow, retry, requeue, end a WAIT).

Pure and part of ``decide``: it calls these from ``_primary``.
"""

from __future__ import annotations

from datetime import datetime

from es_sched.domain import commands as c
from es_sched.domain import sla
from es_sched.domain.context import Context, settings
from es_sched.domain.events import (
    CompletionRejected,
    LeaseExpired,
    Payload,
    TaskCompleted,
    TaskFailed,
    TaskProgressed,
    TaskRequeued,
    TaskStarted,
    TaskTimedOut,
    WorkflowEnding,
    WorkflowSlaAtRisk,
    WorkflowSlaBreached,
)
from es_sched.domain.scheduling import again
from es_sched.domain.state import (
    IN_PROGRESS,
    SCHEDULED,
    TIMED_OUT,
    WORKFLOW_TERMINAL,
    TaskState,
    WorkflowState,
)
from es_sched.domain.timeouts import total_timeout
from es_sched.domain.timers import SLA_TIMERS


def latest_instance(st: WorkflowState, task_id: str) -> TaskState | None:
    """The task instance if it exists and is the newest attempt of its ref."""
    task = st.tasks.get(task_id)
    if task is None or st.latest.get(task.ref) != task_id:
        return None
    return task


def report(st: WorkflowState, inp: c.WorkerReport) -> list[Payload]:
    task = st.tasks.get(inp.task_id)
    reason = not_live(st, task, inp)
    if reason is not None:
        return [CompletionRejected(inp.task_id, inp.attempt, inp.worker_id, reason)]
    assert task is not None
    match inp:
        case c.ReportStarted():
            return [] if task.status == IN_PROGRESS else [TaskStarted(task.task_id, inp.worker_id)]
        case c.ReportProgress():
            started = (
                [] if task.status == IN_PROGRESS else [TaskStarted(task.task_id, inp.worker_id)]
            )
            return [*started, TaskProgressed(task.task_id, inp.percent, inp.message)]
        case c.ReportCompleted() | c.ReportFailed():
            # ADR 44: a short task's start travels with its outcome; the log still has both.
            implied = inp.started and task.status != IN_PROGRESS
            started = [TaskStarted(task.task_id, inp.worker_id)] if implied else []
            logs = list(inp.logs)  # the worker bounded them; the core only carries them
            if isinstance(inp, c.ReportCompleted):
                return [*started, TaskCompleted(task.task_id, dict(inp.output), logs)]
            failed = TaskFailed(
                task.task_id,
                inp.reason,
                inp.terminal,
                dict(inp.output),
                logs,
                inp.traceback,
                host_fault=inp.host_fault,
            )
            return [*started, failed]
        case c.ReportDeclined():
            # Started or not, the lease is given back as if it expired (ExpireLease): the
            # worker gives up early what its silence would lose anyway; the attempt is kept.
            return [LeaseExpired(task.task_id, task.lease_epoch)]
    return []


def not_live(st: WorkflowState, task: TaskState | None, inp: c.WorkerReport) -> str | None:
    """Why a report does not come from the task's live lease (fencing), None if it does."""
    reason = None
    if task is None:
        reason = "unknown task"
    elif st.latest.get(task.ref) != task.task_id or task.attempt != inp.attempt:
        reason = f"stale attempt {inp.attempt}: the task is at a newer attempt"
    elif task.terminal:
        reason = f"task already {task.status}"
    elif not st.runs_on_worker(task.def_ref):
        reason = f"system task ({task.task_type}): not reported by workers"
    elif task.lease_token is None:
        # Fencing (Kleppmann): no lease is live before a dispatch, after an expiry or a
        # preemption, so a report then comes from a worker that lost the task.
        reason = "no live lease: the task was never leased, or its lease expired"
    elif task.worker_id != inp.worker_id or task.lease_epoch != inp.lease_epoch:
        reason = (
            f"lease mismatch: the live lease is epoch {task.lease_epoch} on {task.worker_id}, "
            f"the report names epoch {inp.lease_epoch} on {inp.worker_id} (the lease was "
            "reassigned)"
        )
    elif task.lease_token != inp.lease_token:
        # ADR 74: the token reaches only the lease's worker (sealed to its key), so a report
        # naming that worker and epoch without it was written by someone else: the report is
        # refused and said to be forged, and nothing is held against the worker it names.
        reason = (
            f"lease mismatch: wrong token for epoch {task.lease_epoch} on {task.worker_id}: "
            f"not written by the lease's holder (forged), not counted against {task.worker_id}"
        )
    return reason


def _sla_timer(st: WorkflowState, kind: str, now: datetime) -> list[Payload]:
    """A running workflow's at-risk or deadline timer (domain.sla). The time is checked
    again: a timer delivered early, or one armed for a deadline since moved, writes nothing."""
    deadline = st.deadline
    if deadline is None:
        return []
    if kind == "sla_deadline":
        return [WorkflowSlaBreached(st.sla_tier, deadline)] if now >= deadline else []
    if now < sla.at_risk_at(st.created_at, deadline):
        return []
    return [WorkflowSlaAtRisk(st.sla_tier, deadline)]


def timer_fired(st: WorkflowState, inp: c.FireTimer, ctx: Context) -> list[Payload]:
    if st.status in WORKFLOW_TERMINAL:
        return []
    if inp.kind == "workflow_timeout":
        limit = st.definition.timeout_seconds
        if st.ending or limit <= 0 or (ctx.now - st.created_at).total_seconds() < limit:
            return []
        if st.definition.timeout_policy == "ALERT_ONLY":
            return []
        return [WorkflowEnding(TIMED_OUT, f"workflow timed out after {limit:g}s")]
    if inp.kind in SLA_TIMERS:
        return _sla_timer(st, inp.kind, ctx.now)
    task = latest_instance(st, inp.task_id or "")
    if task is None:
        return []
    if inp.kind == "retry":
        if task.retry_due_at is None or ctx.now < task.retry_due_at or st.ending:
            return []
        return again(st, task, ctx)
    if task.terminal:
        return []
    if inp.kind == "requeue":  # the reconciler (ADR 15): still waiting for a lease, and unleased
        waiting = task.status == SCHEDULED and task.lease_token is None
        return [TaskRequeued(task.task_id, task.attempt)] if waiting else []
    if inp.kind == "wait":
        if task.wait_until is None or ctx.now < task.wait_until:
            return []
        return [TaskCompleted(task.task_id, {})]
    definition = st.lookup_task(task.def_ref)
    if definition is None:
        return []
    s = settings(st, definition)
    if inp.kind == "response_timeout":
        since = task.last_progress_at
        if since is None or (ctx.now - since).total_seconds() < s.response_timeout_seconds:
            return []
    elif inp.kind == "total_timeout":
        limit = total_timeout(task, s)
        if (
            task.started_at is None
            or limit <= 0
            or (ctx.now - task.started_at).total_seconds() < limit
        ):
            return []
    else:
        return []
    if s.timeout_policy == "ALERT_ONLY":
        return []
    kind = "response" if inp.kind == "response_timeout" else "total"
    timed_out: list[Payload] = [TaskTimedOut(task.task_id, kind)]
    if s.timeout_policy == "TIME_OUT_WF":
        timed_out.append(WorkflowEnding(TIMED_OUT, f"task {task.ref!r} timed out ({kind})"))
    return timed_out
