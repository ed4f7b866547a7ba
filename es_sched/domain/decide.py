"""``decide(state, input, now, ids, scripts, learned) -> list[Event]``: the decider's pure core.

An input is first checked (idempotency, expected version, lease fencing), turned into its
primary events, and then ``engine.step`` runs until the workflow must wait for the next input.
Every returned event already carries its envelope (seq, deterministic event id, causation and
correlation ids, and the command's ``actor``). Expected refusals become ``command.rejected``
/ ``task.completion_rejected`` events in the workflow's history; an input for a workflow that
has no history (a StartWorkflow that cannot start, anything else for an unknown id) returns
one ``workflow.rejected`` event outside any history and no state (``domain.refusals``). Nothing an
input says raises. A redelivered input returns no event at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import assert_never

from es_sched.domain import commands as c
from es_sched.domain import engine, review, task_inputs
from es_sched.domain.actions import permits
from es_sched.domain.context import Context, NoScripts
from es_sched.domain.events import (
    CommandRejected,
    CompletionRejected,
    Event,
    LeaseExpired,
    Payload,
    TaskCancelConfirmed,
    TaskCanceled,
    TaskCompleted,
    TaskDispatched,
    TaskFailed,
    TaskProgressed,
    TaskRequeued,
    TaskStarted,
    TaskTimedOut,
    WorkflowEnding,
    WorkflowPaused,
    WorkflowRerun,
    WorkflowResumed,
    WorkflowRetried,
    WorkflowStarted,
)
from es_sched.domain.evolve import advance, evolve
from es_sched.domain.ids import IdSource, event_id
from es_sched.domain.refusals import refusal
from es_sched.domain.rerun import rerun, rerun_root, restart
from es_sched.domain.scheduling import again
from es_sched.domain.scripts import ScriptEngine
from es_sched.domain.state import (
    CANCELED,
    IN_PROGRESS,
    SCHEDULED,
    TASK_UNSUCCESSFUL,
    TERMINATED,
    TIMED_OUT,
    WORKFLOW_TERMINAL,
    TaskState,
    WorkflowState,
)
from es_sched.domain.timeouts import Learned, nothing_learned
from es_sched.errors import DomainError

MAX_EVENTS_PER_INPUT = 20_000
# Events after which the DAG walk cannot find anything new to do: a task that is dispatched,
# started, making progress or back in its queue is "running" to the walk either way, and a
# rejection changes nothing. Skipping the walk keeps these frequent inputs cheap.
NO_PROGRESS = (
    TaskDispatched,
    TaskStarted,
    TaskProgressed,
    LeaseExpired,
    CommandRejected,
    CompletionRejected,
    TaskRequeued,
    TaskCancelConfirmed,
)


@dataclass
class _Recorder:
    state: WorkflowState | None
    workflow_id: str
    causation_id: str
    correlation_id: str
    now: datetime
    events: list[Event] = field(default_factory=list)
    owned: bool = False  # ``state`` is this decision's own copy (not the caller's)
    actor: str | None = None  # the command's actor, on every event it causes

    def emit(self, payload: Payload) -> None:
        seq = (self.state.seq if self.state is not None else 0) + 1
        event = Event(
            event_id(self.workflow_id, seq),
            self.workflow_id,
            seq,
            self.now,
            self.causation_id,
            self.correlation_id,
            payload,
            self.actor,
        )
        # One copy of the caller's state per decision, then changed in place: copying the task
        # map per event made scheduling a fork of N branches cost O(N^2).
        self.state = advance(self.state, event) if self.owned else evolve(self.state, event)
        self.owned = True
        self.events.append(event)


def decide(
    state: WorkflowState | None,
    inp: c.Input,
    now: datetime,
    ids: IdSource,
    scripts: ScriptEngine | None = None,
    learned: Learned | None = None,
) -> list[Event]:
    return decide_with_state(state, inp, now, ids, scripts, learned)[0]


def decide_with_state(
    state: WorkflowState | None,
    inp: c.Input,
    now: datetime,
    ids: IdSource,
    scripts: ScriptEngine | None = None,
    learned: Learned | None = None,
) -> tuple[list[Event], WorkflowState | None]:
    """``decide`` that also returns the state after the events (it is built anyway), so a
    caller need not fold them again. ``learned``: run times learned per task type and size
    class, for dynamic timeouts (ADR 65); None: nothing learned."""
    ctx = Context(now, ids, scripts or NoScripts(), learned or nothing_learned)
    if state is None:
        refused = refusal(inp, now)
        if refused is not None:
            return [refused], None  # outside any history: no state to keep
        assert isinstance(inp, c.StartWorkflow)  # refusal() refuses every other input
        correlation = inp.correlation_id or inp.workflow_id
        rec = _Recorder(None, inp.workflow_id, inp.input_id, correlation, now, actor=inp.actor)
        rec.emit(_start(inp))
    else:
        if inp.input_id in state.recent_inputs:
            return [], state  # a redelivered input: already applied
        actor = inp.actor if isinstance(inp, c.Command) else None
        rec = _Recorder(
            state, state.workflow_id, inp.input_id, state.correlation_id, now, actor=actor
        )
        for payload in _primary(state, inp, ctx):
            rec.emit(payload)
        if isinstance(inp, c.RerunWorkflow) and isinstance(rec.events[-1].payload, WorkflowRerun):
            assert rec.state is not None
            for payload in rerun_root(rec.state, rec.events[-1].payload, inp, ctx):
                rec.emit(payload)
    if not all(isinstance(e.payload, NO_PROGRESS) for e in rec.events):
        _cascade(rec, ctx)
    return rec.events, rec.state


def _cascade(rec: _Recorder, ctx: Context) -> None:
    while rec.state is not None:
        payloads = engine.step(rec.state, ctx)
        if not payloads:
            return
        if len(rec.events) > MAX_EVENTS_PER_INPUT and rec.state.ending is None:
            payloads = [WorkflowEnding("FAILED", "runaway decision: a loop without worker tasks?")]
        for payload in payloads:
            rec.emit(payload)


def _start(inp: c.StartWorkflow) -> WorkflowStarted:
    assert inp.definition is not None  # checked, with its validation, by refusal()
    return WorkflowStarted(  # documents are shared, never mutated: parse caches hit by identity
        definition=inp.definition,
        taskdefs=inp.taskdefs,
        input=dict(inp.input),
        priority=inp.priority,
        tenant=inp.tenant,
        command_id=inp.input_id,
        parent_workflow_id=inp.parent_workflow_id,
        parent_task_id=inp.parent_task_id,
        subworkflow_definitions=list(inp.subworkflow_definitions),
        sla_tier=inp.sla_tier,
        deadline=inp.deadline,
        sla_retries=inp.sla_retries,
    )


def _reject(inp: c.Input, reason: str) -> list[Payload]:
    return [CommandRejected(inp.input_id, inp.TYPE, reason)]


def _primary(st: WorkflowState, inp: c.Input, ctx: Context) -> list[Payload]:
    expected = inp.expected_version if isinstance(inp, c.Command) else None
    if expected is not None and expected != st.seq:
        return _reject(inp, f"version_conflict: expected {expected}, workflow is at {st.seq}")
    match inp:
        case c.StartWorkflow():
            return []  # the same command id again on a started workflow: nothing to do
        case c.CancelWorkflow() | c.TerminateWorkflow():
            verb = "cancel" if isinstance(inp, c.CancelWorkflow) else "terminate"
            if st.ending is not None or not permits(verb, st.status):
                return _reject(inp, f"workflow is {st.ending or st.status}")
            status = CANCELED if isinstance(inp, c.CancelWorkflow) else TERMINATED
            return [WorkflowEnding(status, inp.reason)]
        case c.PauseWorkflow():
            return (
                [WorkflowPaused()]
                if st.ending is None and permits("pause", st.status)
                else _reject(inp, f"workflow is {st.status}")
            )
        case c.ResumeWorkflow():
            return (
                [WorkflowResumed()]
                if permits("resume", st.status)
                else _reject(inp, f"workflow is {st.status}")
            )
        case c.RetryWorkflow():
            if not permits("retry", st.status):
                return _reject(
                    inp,
                    f"only a failed, timed-out, terminated or canceled workflow can be "
                    f"retried; it is {st.status}",
                )
            redo = [t for t in _latest(st) if t.status in TASK_UNSUCCESSFUL and not t.callback]
            return [WorkflowRetried(st.status), *[p for t in redo for p in again(st, t, ctx)]]
        case c.RestartWorkflow():
            return restart(st, inp)
        case c.RerunWorkflow():
            return rerun(st, inp)
        case c.SignalWorkflow():
            waiting = [
                t
                for t in _latest(st)
                if t.task_type == "WAIT"
                and t.status == IN_PROGRESS
                and (inp.ref is None or t.ref == inp.ref)
            ]
            if not waiting or st.ending is not None or not permits("signal", st.status):
                return _reject(
                    inp, f"no WAIT task is waiting{f' as {inp.ref!r}' if inp.ref else ''}"
                )
            if inp.status.upper() == "COMPLETED":
                return [TaskCompleted(waiting[0].task_id, dict(inp.output))]
            return [
                TaskFailed(
                    waiting[0].task_id,
                    str(inp.output.get("reason", "failed by signal")),
                    output=dict(inp.output),
                )
            ]
        case c.ReviewTask():
            return review.review(st, inp, ctx)
        case c.RegisterDefinition():
            raise DomainError(
                "definition.register is handled by the definition registry, not a workflow"
            )
        case c.DispatchTask():
            task = task_inputs.latest_instance(st, inp.task_id)
            # While a workflow ends, its CALLBACK tasks are still scheduled and leased.
            ended = st.status in WORKFLOW_TERMINAL
            if task is None or task.status != SCHEDULED or task.attempt != inp.attempt or ended:
                return [
                    CompletionRejected(
                        inp.task_id,
                        inp.attempt,
                        inp.worker_id,
                        "stale dispatch: the task is not waiting for a worker",
                    )
                ]
            if inp.lease_epoch < task.lease_epoch:  # another dispatcher's, later, came first
                reason = f"stale dispatch: epoch {task.lease_epoch} was granted after it"
                return [CompletionRejected(inp.task_id, inp.attempt, inp.worker_id, reason)]
            return [
                TaskDispatched(
                    inp.task_id, inp.attempt, inp.worker_id, inp.lease_epoch, inp.lease_token
                )
            ]
        case c.ExpireLease():
            task = task_inputs.latest_instance(st, inp.task_id)
            if task is None or task.terminal or task.lease_epoch != inp.lease_epoch:
                return []  # the lease was renewed, superseded or the task ended: nothing to do
            return [LeaseExpired(inp.task_id, inp.lease_epoch)]
        case (
            c.ReportStarted()
            | c.ReportProgress()
            | c.ReportCompleted()
            | c.ReportFailed()
            | c.ReportDeclined()
        ):
            return task_inputs.report(st, inp)
        case c.ReportCancelled():
            # Never an outcome: a cancel means no live lease, so whatever lease this names,
            # the worker's word is recorded for the audit and the task is left as it is.
            return [
                TaskCancelConfirmed(
                    inp.task_id, inp.attempt, inp.worker_id, inp.lease_epoch, inp.reason
                )
            ]
        case c.FireTimer():
            return task_inputs.timer_fired(st, inp, ctx)
        case c.ChildWorkflowEnded():
            task = task_inputs.latest_instance(st, inp.task_id)
            if task is None or task.terminal or task.child_workflow_id != inp.child_workflow_id:
                return []
            output = {**inp.output, "subWorkflowId": inp.child_workflow_id}
            if inp.status == "COMPLETED":
                return [TaskCompleted(task.task_id, output)]
            # Conductor maps the child's end onto the task: TERMINATED/CANCELED -> CANCELED.
            if inp.status in (TERMINATED, CANCELED):
                return [
                    TaskCanceled(task.task_id, f"sub-workflow {inp.status.lower()}: {inp.reason}")
                ]
            if inp.status == TIMED_OUT:
                return [TaskTimedOut(task.task_id, "sub-workflow")]
            reason = f"sub-workflow {inp.child_workflow_id} ended {inp.status}: {inp.reason}"
            return [TaskFailed(task.task_id, reason, output=output)]
        case _:
            assert_never(inp)  # type: ignore[arg-type]


def _latest(st: WorkflowState) -> list[TaskState]:
    return [st.tasks[tid] for tid in st.latest.values()]
