"""What a decision may use besides state: the time, fresh ids, a script engine and what was
learned of run times (``timeouts.Learned``: the shell's stats view, the audit's recorded
figures).

Also the read-only views expressions and scripts see of a workflow and its tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from es_sched.domain.definitions import TaskSettings, WorkflowTask, settings_for
from es_sched.domain.ids import IdSource
from es_sched.domain.pickling import frozen_by_constructor
from es_sched.domain.scripts import ScriptEngine, ScriptResult
from es_sched.domain.state import TaskState, WorkflowState
from es_sched.domain.timeouts import Learned, nothing_learned


class NoScripts:
    """The engine used when none is given: every script fails with that reason."""

    def evaluate(self, expression: str, bindings: Any) -> ScriptResult:
        return ScriptResult(False, error="no script engine is configured")


@dataclass(frozen=True)
class Context:
    now: datetime
    ids: IdSource
    scripts: ScriptEngine
    learned: Learned = nothing_learned


def workflow_view(st: WorkflowState) -> dict[str, Any]:
    return {
        "workflowId": st.workflow_id,
        "input": st.input,
        "output": st.output,
        "variables": st.variables,
        "correlationId": st.correlation_id,
        "status": st.ending or st.status,
        "reasonForIncompletion": st.reason,
        "workflowType": st.definition.name,
        "version": st.definition.version,
        "parentWorkflowId": st.parent_workflow_id,
        "priority": st.priority,
        "tenant": st.tenant,
    }


def task_view(task: TaskState) -> dict[str, Any]:
    output = task.output
    if task.task_type == "DO_WHILE":  # a running loop reports the iteration under way
        output = {**output, "iteration": task.iteration}
    return {
        "taskId": task.task_id,
        "referenceTaskName": task.ref,
        "taskType": task.task_type,
        "status": task.status,
        "input": task.input,
        "output": output,
        "attempt": task.attempt,
        "retryCount": task.attempt - 1,
        "reasonForIncompletion": task.reason,
        "workerId": task.worker_id,
        "iteration": task.iteration,
    }


def lookup_for(st: WorkflowState, suffix: str = "", task_id: str | None = None) -> Any:
    """The first-segment resolver for expressions evaluated inside a loop iteration ``suffix``.

    ``${CPEWF_TASK_ID}`` is Conductor's name for the id of the task being scheduled.
    """

    def lookup(name: str) -> Any:
        if name == "workflow":
            return workflow_view(st)
        if name == "CPEWF_TASK_ID":
            return task_id
        task = (st.instance(name + suffix) if suffix else None) or st.instance(name)
        if task is None:
            task = _latest_iteration(st, name)
        return task_view(task) if task is not None else None

    return lookup


def _latest_iteration(st: WorkflowState, ref: str) -> TaskState | None:
    """Outside a loop, ``${loopTask.output}`` means the loop task's last iteration."""
    best: TaskState | None = None
    for task_id in st.latest.values():
        task = st.tasks[task_id]
        if task.def_ref == ref and (best is None or task.iteration > best.iteration):
            best = task
    return best


def settings(st: WorkflowState, task: WorkflowTask) -> TaskSettings:
    return settings_for(task, st.taskdefs)


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
