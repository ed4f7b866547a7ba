"""Tasks parked for review (ADR 71): the rule that parks one, and an operator's decision on it.

- ``may_park``: a worker task (not a CALLBACK) whose last attempt FAILED or TIMED_OUT, with no
  retry left, parks instead of failing its workflow when its policy says
  ``onExhausted: REVIEW`` and the workflow is not already ending. A FAILED_WITH_TERMINAL_ERROR
  never parks: the worker said no attempt can succeed, and that is also how a review's "fail"
  ends a task, so a failed review never parks again.
- ``review(state, command, ctx)``: ``retry`` schedules one more attempt (the attempt after
  the parked one) with the operator's input, or the parked attempt's input as it was;
  ``fail`` fails the task, and the walk goes on as after any failure (the workflow fails, or an
  optional task completes with errors). A parked task has no retry budget left, so a retried
  attempt that fails parks again: one attempt per decision, each one an operator's.
- Refusals are ``command.rejected`` events with the reason, like every operator command's.

Pure: a state and a command in, payloads out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.actions import permits
from es_sched.domain.context import Context
from es_sched.domain.definitions import TaskSettings, WorkflowTask
from es_sched.domain.events import (
    CommandRejected,
    Payload,
    TaskParkedForReview,
    TaskReviewed,
    TaskScheduled,
)
from es_sched.domain.scheduling import again
from es_sched.domain.state import T_FAILED, T_PARKED, T_TIMED_OUT, TaskState, WorkflowState

DECISIONS = ("retry", "fail")


def may_park(st: WorkflowState, task: WorkflowTask, inst: TaskState, s: TaskSettings) -> bool:
    return (
        s.on_exhausted == "REVIEW"
        and task.type == "SIMPLE"
        and not inst.callback
        and inst.status in (T_FAILED, T_TIMED_OUT)
        and st.ending is None
    )


def parked(inst: TaskState) -> TaskParkedForReview:
    return TaskParkedForReview(inst.task_id, inst.reason, inst.attempt)


def failed_reason(reason: str) -> str:
    """The reason a task failed in review carries (the fold and the read model agree on it)."""
    return f"failed in review: {reason}" if reason else "failed in review"


def review(st: WorkflowState, inp: c.ReviewTask, ctx: Context) -> list[Payload]:
    why = refusal(st, inp)
    if why is not None:
        return [CommandRejected(inp.input_id, inp.TYPE, why)]
    inst = st.tasks[inp.task_id]
    if inp.decision == "fail":
        return [TaskReviewed(inst.task_id, "fail", inp.reason)]
    edited = dict(inp.input) if inp.input is not None else None
    decided = TaskReviewed(inst.task_id, "retry", inp.reason, edited)
    return [decided, *_next_attempt(st, inst, edited, ctx)]


def refusal(st: WorkflowState, inp: c.ReviewTask) -> str | None:
    """Why the workflow refuses this review, or None when it takes it."""
    if inp.decision not in DECISIONS:
        return f"decision must be one of {', '.join(DECISIONS)}, not {inp.decision!r}"
    if inp.input is not None and (inp.decision != "retry" or not isinstance(inp.input, dict)):
        return "input is an object, and only a retry takes one"
    if st.ending is not None or not permits("review", st.status):
        return f"a task is reviewed only while its workflow runs; it is {st.ending or st.status}"
    inst = st.tasks.get(inp.task_id)
    if inst is None:
        return f"no task {inp.task_id!r} in workflow {st.workflow_id}"
    if inst.status != T_PARKED or st.latest.get(inst.ref) != inst.task_id:
        return f"task {inst.ref!r} is not awaiting review; it is {inst.status}"
    return None


def _next_attempt(
    st: WorkflowState, inst: TaskState, edited: dict[str, Any] | None, ctx: Context
) -> list[Payload]:
    # ``again`` as for any retry (the attempt number, resources, the retry policy's input);
    # then the input the operator approved: the edited one, else the parked attempt's.
    payloads = again(st, inst, ctx)
    wanted = edited if edited is not None else dict(inst.input)
    return [replace(p, input=wanted) if isinstance(p, TaskScheduled) else p for p in payloads]
