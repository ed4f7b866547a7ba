"""The DAG walk: given a state, what happens next.

``step(state, ctx)`` walks the definition tree against the task instances and returns the next
payloads: tasks to schedule, system tasks to finish, retries, loop iterations, the workflow's
end. The decider applies them and calls ``step`` again until it returns nothing, so one input
can cascade through any number of system tasks. Each walk makes one decision (the first in
depth-first order), which reproduces Conductor's scheduling order: a SWITCH in a fork branch
has its case's first task scheduled before the next branch's first task.

Walk rules (Conductor's): a task list runs in order, each task after the previous one finished;
a SWITCH runs the selected case then continues after itself; a FORK runs every branch at once
and the JOIN after it waits for its ``joinOn`` tasks; a DO_WHILE runs its body once per
iteration, tasks suffixed ``__N``, while its condition holds. CALLBACK tasks are skipped on the
way and run when the workflow ends in any state other than COMPLETED.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any

from es_sched.domain import retry, review, sla
from es_sched.domain.context import Context, lookup_for, settings
from es_sched.domain.definitions import WorkflowTask
from es_sched.domain.events import (
    LoopIterated,
    Payload,
    TaskCanceled,
    TaskCompleted,
    TaskCompletedWithErrors,
    TaskFailed,
    TaskRetryScheduled,
    WorkflowCompleted,
    WorkflowEnded,
    WorkflowEnding,
    WorkflowStartRequested,
)
from es_sched.domain.expressions import resolve
from es_sched.domain.fanout import Fan
from es_sched.domain.scheduling import again, schedule
from es_sched.domain.state import (
    CANCELED,
    FAILED,
    PAUSED,
    T_CANCELED,
    T_COMPLETED_WITH_ERRORS,
    T_FAILED,
    T_PARKED,
    T_TIMED_OUT,
    TASK_SUCCESS,
    TASK_UNSUCCESSFUL,
    TERMINATED,
    TIMED_OUT,
    TaskState,
    WorkflowState,
)

RETRYABLE_TYPES = frozenset({"SIMPLE", "CALLBACK", "SUB_WORKFLOW"})
FULL_WALK = False  # True: ignore the fan-out index (domain.fanout); tests compare both walks


class Outcome(Enum):
    DONE = "done"
    RUNNING = "running"
    FAILED = "failed"


class Walker:
    def __init__(self, st: WorkflowState, ctx: Context) -> None:
        self.st, self.ctx = st, ctx
        self.actions: list[Payload] = []
        self.busy = False
        self.failure: tuple[str, str] | None = None  # (workflow status, reason)

    # -- lists and tasks ----------------------------------------------------------------------
    def walk_list(
        self, tasks: Sequence[WorkflowTask], suffix: str = "", iteration: int = 0
    ) -> Outcome:
        for task in tasks:
            if self.actions:  # one decision per walk: the next walk sees its effects
                self.busy = True
                return Outcome.RUNNING
            if task.type == "CALLBACK":
                continue
            inst = self.st.instance(task.ref + suffix)
            if inst is None:
                extra = {"joinOn": self.join_refs(task)} if task.type == "JOIN" else {}
                self.actions += schedule(
                    self.st, task, task.ref + suffix, suffix, iteration, self.ctx, extra_input=extra
                )
                self.busy = True
                return Outcome.RUNNING
            outcome = self.walk_task(task, inst, suffix, iteration)
            if outcome is not Outcome.DONE:
                return outcome
        return Outcome.DONE

    def walk_task(
        self, task: WorkflowTask, inst: TaskState, suffix: str, iteration: int
    ) -> Outcome:
        if inst.status in TASK_SUCCESS:
            if task.type == "SWITCH":
                case = str((inst.output.get("evaluationResult") or [""])[0])
                branch = task.decision_cases.get(case, task.default_case)
                return self.walk_list(branch, suffix, iteration)
            if task.type == "DECISION":  # an empty case list falls back to the default here
                case = str((inst.output.get("caseOutput") or [""])[0])
                branch = task.decision_cases.get(case) or task.default_case
                return self.walk_list(branch, suffix, iteration)
            if task.type == "FORK_JOIN":
                return self.walk_branches(task.fork_tasks, suffix, iteration)
            if task.type == "FORK_JOIN_DYNAMIC":
                fan = None if FULL_WALK else self.st.fans.get(inst.task_id)
                if fan is not None:
                    return self.walk_fan(fan, iteration)
                refs = inst.output.get("forkedTasks") or []
                return self.walk_branches([(self.st.dynamic[r],) for r in refs], suffix, iteration)
            return Outcome.DONE
        if inst.status in TASK_UNSUCCESSFUL:
            return self.unsuccessful(task, inst)
        if task.type == "JOIN":
            return self.join(task, inst, suffix)
        if task.type == "DO_WHILE":
            return self.loop(task, inst)
        self.busy = True
        return Outcome.RUNNING

    def walk_branches(
        self, branches: Sequence[Sequence[WorkflowTask]], suffix: str, iteration: int
    ) -> Outcome:
        for branch in branches:
            if self.walk_list(branch, suffix, iteration) is Outcome.FAILED:
                return Outcome.FAILED
        return Outcome.DONE  # the JOIN after the fork waits for whatever is still running

    def walk_fan(self, fan: Fan, iteration: int) -> Outcome:
        """``walk_branches`` over an indexed dynamic fork: only the branches that are not
        quiet (not yet scheduled, or ended unsuccessfully); a running one only makes the walk
        busy, a succeeded one changes nothing, and once there is an action every later branch
        would only say "running" (``walk_list``)."""
        for position in fan.walk_positions():
            if self.actions:
                break
            branch = (self.st.dynamic[fan.refs[position]],)
            if self.walk_list(branch, "", iteration) is Outcome.FAILED:
                return Outcome.FAILED
        if self.actions or fan.open:
            self.busy = True
        return Outcome.DONE

    # -- failures and retries -----------------------------------------------------------------
    def retry_or_none(self, task: WorkflowTask, inst: TaskState) -> bool:
        """Schedule the next attempt if the task may retry; True when a retry is under way."""
        if inst.retry_due_at is not None:
            self.busy = True
            return True
        s = settings(self.st, task)
        explicit = (
            task.type != "SUB_WORKFLOW" or "retryCount" in task.raw or task.name in self.st.taskdefs
        )
        may = (
            task.type in RETRYABLE_TYPES
            and explicit
            and inst.status in (T_FAILED, T_TIMED_OUT)
            and (inst.status != T_TIMED_OUT or s.timeout_policy == "RETRY")
            and inst.attempt <= sla.retries(self.st.sla_retries, int(s.retry_count))
        )
        if not may:
            return False
        delay = retry.retry_delay(s, inst.attempt, inst.task_id)
        if delay > 0:
            due = retry.after(self.ctx.now, delay)
            self.actions.append(TaskRetryScheduled(inst.task_id, inst.attempt + 1, delay, due))
        else:
            self.actions += again(self.st, inst, self.ctx)
        self.busy = True
        return True

    def unsuccessful(self, task: WorkflowTask, inst: TaskState) -> Outcome:
        if self.retry_or_none(task, inst):
            return Outcome.RUNNING
        if review.may_park(self.st, task, inst, settings(self.st, task)):
            self.actions.append(review.parked(inst))  # the walk waits for an operator
            self.busy = True
            return Outcome.RUNNING
        if task.optional and inst.status != T_CANCELED:
            self.actions.append(TaskCompletedWithErrors(inst.task_id))
            self.busy = True
            return Outcome.RUNNING
        status = {T_TIMED_OUT: TIMED_OUT, T_CANCELED: TERMINATED}.get(inst.status, FAILED)
        if self.failure is None:
            detail = f": {inst.reason}" if inst.reason else ""
            self.failure = (status, f"task {inst.ref!r} {inst.status.lower()}{detail}")
        return Outcome.FAILED

    # -- JOIN and DO_WHILE --------------------------------------------------------------------
    def join_refs(self, task: WorkflowTask) -> list[str]:
        if task.join_on:
            return list(task.join_on)
        loc = self.st.definition.index.get(task.ref)
        if loc is not None and loc.position > 0:
            before = loc.siblings[loc.position - 1]
            fork = self.st.instance(before.ref)
            if before.type == "FORK_JOIN_DYNAMIC" and fork is not None:
                return list(fork.output.get("forkedTasks") or [])
            if before.type == "FORK_JOIN":
                return [b[-1].ref for b in before.fork_tasks if b]
        return []

    def joined_fan(self, task: WorkflowTask, suffix: str) -> Fan | None:
        """The index of the dynamic fork this JOIN waits for, when it waits for all of it."""
        if FULL_WALK or task.join_on or suffix:
            return None
        loc = self.st.definition.index.get(task.ref)
        if loc is None or loc.position == 0:
            return None
        before = loc.siblings[loc.position - 1]
        fork = self.st.instance(before.ref)
        if before.type != "FORK_JOIN_DYNAMIC" or fork is None:
            return None
        return self.st.fans.get(fork.task_id)

    def join(self, task: WorkflowTask, inst: TaskState, suffix: str) -> Outcome:
        """Done when every joined task succeeded; output ``{ref: output}`` without empty ones."""
        fan = self.joined_fan(task, suffix)
        if fan is not None and fan.ok < len(fan.refs):
            self.busy = True
            return Outcome.RUNNING
        outputs: dict[str, Any] = {}
        with_errors = False
        for ref in self.join_refs(task):
            done = self.st.instance(ref + suffix) or self.st.instance(ref)
            if done is None or done.status not in TASK_SUCCESS:
                self.busy = True
                return Outcome.RUNNING
            with_errors |= done.status == T_COMPLETED_WITH_ERRORS
            if done.output:
                outputs[ref] = done.output
        if with_errors:
            self.actions.append(TaskCompletedWithErrors(inst.task_id, outputs))
        else:
            self.actions.append(TaskCompleted(inst.task_id, outputs))
        self.busy = True
        return Outcome.RUNNING

    def loop(self, task: WorkflowTask, inst: TaskState) -> Outcome:
        n = inst.iteration
        suffix = f"__{n}"
        outcome = self.walk_list(task.loop_over, suffix, n)
        if outcome is not Outcome.DONE:
            return outcome
        body = {t.ref: self.st.instance(t.ref + suffix) for t in task.loop_over}
        this_round = {ref: t.output for ref, t in body.items() if t is not None}
        output = {**inst.output, str(n): this_round, "iteration": n}
        bindings = {**resolve(dict(task.input_parameters), lookup_for(self.st, suffix))}
        bindings.update(this_round)
        bindings[task.ref] = output
        condition = str(task.get("loopCondition") or "false")
        result = self.ctx.scripts.evaluate(condition, bindings)
        if not result.ok:
            self.actions.append(
                TaskFailed(inst.task_id, f"loopCondition failed: {result.error}", True)
            )
        elif _truthy(result.value):
            self.actions.append(LoopIterated(inst.task_id, n + 1, output))
        else:
            self.actions.append(TaskCompleted(inst.task_id, output))
        self.busy = True
        return Outcome.RUNNING


def _truthy(value: Any) -> bool:
    """Conductor continues a DO_WHILE only on boolean true or a number above 0."""
    if isinstance(value, bool):
        return value
    return isinstance(value, int | float) and value > 0


def _workflow_output(st: WorkflowState) -> dict[str, Any]:
    if st.definition.output_parameters:
        return dict(resolve(dict(st.definition.output_parameters), lookup_for(st)))
    done = [t for t in st.tasks.values() if t.status in TASK_SUCCESS and not t.callback]
    return dict(done[-1].output) if done else {}


def _cancel_running(st: WorkflowState, reason: str) -> list[Payload]:
    return [
        TaskCanceled(t.task_id, reason)
        for t in st.tasks.values()
        if (not t.terminal or t.status == T_PARKED) and not t.callback
    ]


def ending_step(st: WorkflowState, ctx: Context) -> list[Payload]:
    assert st.ending is not None
    cancels = _cancel_running(st, f"workflow {st.ending.lower()}")
    if cancels:
        return cancels
    walker = Walker(st, ctx)
    for cb in st.definition.callbacks:
        inst = st.instance(cb.ref)
        if inst is None:
            walker.actions += schedule(st, cb, cb.ref, "", 0, ctx, callback=True)
        elif not inst.terminal:
            walker.busy = True
        elif inst.status in TASK_UNSUCCESSFUL:
            walker.retry_or_none(cb, inst)
    if walker.actions or walker.busy:
        return walker.actions
    final: list[Payload] = []
    failure_wf = st.definition.failure_workflow
    if failure_wf and st.ending != CANCELED:
        final.append(
            WorkflowStartRequested(
                ctx.ids(),
                failure_wf,
                None,
                {
                    **st.input,
                    "workflowId": st.workflow_id,
                    "reason": st.reason,
                    "failureStatus": st.ending,
                    "failureTaskId": _failed_task_id(st),
                    "failedWorkflow": {
                        "workflowId": st.workflow_id,
                        "workflowType": st.definition.name,
                        "version": st.definition.version,
                        "status": st.ending,
                        "reasonForIncompletion": st.reason,
                        "input": st.input,
                    },
                },
            )
        )
    output = dict(st.output)
    if final:
        output["conductor.failure_workflow"] = final[0].child_workflow_id  # type: ignore[attr-defined]
    return [*final, WorkflowEnded(st.ending, st.reason, output)]


def _failed_task_id(st: WorkflowState) -> str | None:
    failed = [t for t in st.tasks.values() if t.status in TASK_UNSUCCESSFUL and not t.callback]
    return failed[-1].task_id if failed else None


def step(st: WorkflowState, ctx: Context) -> list[Payload]:
    """The next payloads for ``st``, or an empty list when it must wait for an input."""
    if st.terminal:
        return []
    if st.ending is not None:
        return ending_step(st, ctx)
    if st.status == PAUSED:
        return []
    walker = Walker(st, ctx)
    outcome = walker.walk_list(st.definition.tasks)
    if walker.failure is not None:
        status, reason = walker.failure
        return [WorkflowEnding(status, reason)]
    if any(isinstance(a, WorkflowCompleted) for a in walker.actions):
        # A TERMINATE with status COMPLETED: whatever still runs elsewhere is canceled first.
        return [*_cancel_running(st, "workflow completed by TERMINATE"), *walker.actions]
    if walker.actions:
        return walker.actions
    if outcome is Outcome.DONE and not walker.busy:
        return [WorkflowCompleted(_workflow_output(st))]
    return []
