"""How each task type starts: the events that schedule (and, for most system tasks, finish) it.

``schedule`` resolves a task's inputs against the current state and returns the payloads that
put one new task instance into the workflow. System tasks that finish at once (SWITCH, FORK,
SET_VARIABLE, INLINE, TERMINATE, START_WORKFLOW) are scheduled and completed in the same
decision, like Conductor's synchronous system tasks; worker tasks wait for a worker, WAIT for a
timer or signal, SUB_WORKFLOW for its child.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from es_sched.domain import retry, timeouts
from es_sched.domain.context import Context, lookup_for, settings
from es_sched.domain.definitions import WORKER_TYPES, WorkflowTask, resources_of
from es_sched.domain.events import (
    Payload,
    TaskCompleted,
    TaskFailed,
    TaskScheduled,
    VariablesSet,
    WorkflowCompleted,
    WorkflowEnding,
    WorkflowStartRequested,
)
from es_sched.domain.expressions import Lookup, resolve
from es_sched.domain.parsed import resources_dict
from es_sched.domain.state import IN_PROGRESS, TaskState, WorkflowState

EXECUTION_TYPE = {"FORK_JOIN": "FORK", "FORK_JOIN_DYNAMIC": "FORK"}
JS_EVALUATORS = frozenset({"javascript", "graaljs"})


def switch_case(
    st: WorkflowState, task: WorkflowTask, inputs: Mapping[str, Any], ctx: Context
) -> str:
    """The case value a SWITCH/DECISION selects, as Conductor's String.valueOf would print it."""
    if task.type == "DECISION":
        if task.get("caseValueParam"):
            return _case_text(inputs.get(str(task.get("caseValueParam"))))
        expression, evaluator = str(task.get("caseExpression") or ""), "javascript"
    else:
        expression = str(task.get("expression") or "")
        evaluator = str(task.get("evaluatorType") or "value-param")
        if evaluator == "value-param":
            return _case_text(inputs.get(expression))
    if evaluator not in JS_EVALUATORS:
        raise ScriptFailure(f"unknown evaluatorType {evaluator!r}")
    result = ctx.scripts.evaluate(expression, inputs)
    if not result.ok:
        raise ScriptFailure(result.error or "script failed")
    return _case_text(result.value)


class ScriptFailure(Exception):
    pass


def _case_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "null" if value is None else str(value)


def task_payload(
    st: WorkflowState,
    task: WorkflowTask,
    ref: str,
    inputs: dict[str, Any],
    ctx: Context,
    *,
    iteration: int = 0,
    attempt: int = 1,
    status: str = "SCHEDULED",
    callback: bool = False,
    task_id: str | None = None,
    resources: Mapping[str, Any] | None = None,
    **extra: Any,
) -> TaskScheduled:
    s = settings(st, task)
    worker = task.type in WORKER_TYPES
    task_type = task.name if worker else EXECUTION_TYPE.get(task.type, task.type)
    needs = (
        ({**resources} if resources is not None else resources_dict(s.resources)) if worker else {}
    )
    return TaskScheduled(
        task_id=task_id or ctx.ids(),
        ref=ref,
        def_ref=task.ref,
        task_type=task_type,
        name=task.name,
        attempt=attempt,
        input=inputs,
        iteration=iteration,
        status=status,
        priority=s.priority if s.priority is not None else st.priority,
        resources=needs,
        rate_limit_key=s.rate_limit_key,
        callback=callback,
        timeout=timeouts.chosen(s, task_type, inputs, needs, ctx.learned) if worker else {},
        **extra,
    )


def again(st: WorkflowState, old: TaskState, ctx: Context) -> list[Payload]:
    """The next attempt of a failed task instance, scheduled afresh (inputs resolved again and,
    for a SUB_WORKFLOW, a new child started), like Conductor's retry."""
    task = st.lookup_task(old.def_ref)
    assert task is not None, old.def_ref
    suffix = old.ref[len(old.def_ref) :]
    return schedule(
        st,
        task,
        old.ref,
        suffix,
        old.iteration,
        ctx,
        callback=old.callback,
        attempt=old.attempt + 1,
    )


def schedule(
    st: WorkflowState,
    task: WorkflowTask,
    ref: str,
    suffix: str,
    iteration: int,
    ctx: Context,
    callback: bool = False,
    extra_input: Mapping[str, Any] | None = None,
    attempt: int = 1,
) -> list[Payload]:
    tid = ctx.ids()
    lookup = lookup_for(st, suffix, tid)
    inputs = resolve(dict(task.input_parameters), lookup)
    inputs.update(extra_input or {})
    if attempt > 1 and task.type in WORKER_TYPES:
        changes = settings(st, task).retry_input_changes
        if changes:  # the retry policy's input for this attempt (domain.retry, ADR 71)
            inputs = retry.input_for_attempt(inputs, changes, attempt)
    resources, problem = _resolved_resources(task, lookup)
    p = task_payload(
        st,
        task,
        ref,
        inputs,
        ctx,
        iteration=iteration,
        callback=callback,
        task_id=tid,
        attempt=attempt,
        resources=resources,
    )
    if task.type in WORKER_TYPES and p.rate_limit_key is not None:
        key, key_problem = _resolved_key(p.rate_limit_key, lookup)
        p, problem = _with(p, rate_limit_key=key), problem or key_problem
    if problem is not None:
        return [p, TaskFailed(tid, problem, terminal=True)]
    match task.type:
        case "SIMPLE" | "CALLBACK":
            return [p]
        case "SWITCH" | "DECISION":
            try:
                case = switch_case(st, task, inputs, ctx)
            except ScriptFailure as exc:
                return [p, TaskFailed(tid, f"switch evaluation failed: {exc}", terminal=True)]
            if task.type == "DECISION":
                return [p, TaskCompleted(tid, {"caseOutput": [case]})]
            return [p, TaskCompleted(tid, {"evaluationResult": [case], "selectedCase": case})]
        case "FORK_JOIN":
            return [p, TaskCompleted(tid, {})]
        case "FORK_JOIN_DYNAMIC":
            return _dynamic_fork(task, inputs, p)
        case "JOIN" | "DO_WHILE":
            return [
                _with(p, status=IN_PROGRESS, iteration=1 if task.type == "DO_WHILE" else iteration)
            ]
        case "SET_VARIABLE":
            return [p, VariablesSet(dict(inputs)), TaskCompleted(tid, {})]
        case "INLINE":
            result = ctx.scripts.evaluate(str(inputs.get("expression", "")), inputs)
            if not result.ok:
                return [p, TaskFailed(tid, result.error or "script failed", terminal=True)]
            return [p, TaskCompleted(tid, {"result": result.value})]
        case "LAMBDA":
            # Conductor wraps a LAMBDA script in a function, so it may ``return``.
            script = f"(function(){{ {inputs.get('scriptExpression', '')} }})()"
            result = ctx.scripts.evaluate(script, inputs)
            if not result.ok:
                return [p, TaskFailed(tid, result.error or "script failed", terminal=True)]
            return [p, TaskCompleted(tid, {"result": result.value})]
        case "TERMINATE":
            return _terminate(tid, inputs, p)
        case "WAIT":
            return _wait(tid, inputs, p, ctx)
        case "SUB_WORKFLOW":
            param = dict(task.get("subWorkflowParam") or {})
            inline = param.get("workflowDefinition")
            start = WorkflowStartRequested(
                child_workflow_id=ctx.ids(),
                name=str(param.get("name") or (inline or {}).get("name", "")),
                version=param.get("version"),
                input=inputs,
                task_id=tid,
                definition=inline if isinstance(inline, dict) else None,
            )
            return [_with(p, status=IN_PROGRESS), start]
        case "START_WORKFLOW":
            spec = dict(inputs.get("startWorkflow") or {})
            child = ctx.ids()
            start = WorkflowStartRequested(
                child, str(spec.get("name", "")), spec.get("version"), dict(spec.get("input") or {})
            )
            return [p, start, TaskCompleted(tid, {"workflowId": child})]
        case _:
            return [p, TaskFailed(tid, f"unknown task type {task.type!r}", terminal=True)]


def _resolved_resources(
    task: WorkflowTask, lookup: Lookup
) -> tuple[dict[str, Any] | None, str | None]:
    """A worker task's ``"resources": "${...}"``, resolved now: (resources, None), (None, None)
    when it resolves to null (the TaskDef's apply) or (None, why) when it is not resources."""
    template = task.raw.get("resources")
    if not isinstance(template, str) or task.type not in WORKER_TYPES:
        return None, None
    value = resolve(template, lookup)
    if value is None:
        return None, None
    try:
        return resources_of(value).as_dict(), None
    except ValueError as exc:
        return None, f"resources {template}: {exc}"


KEY_MAX = 200  # the ready record's rate_limit_key bound


def _resolved_key(template: str, lookup: Lookup) -> tuple[str | None, str | None]:
    """A worker task's ``rateLimitKey``, evaluated now like its inputs (e.g.
    ``"cdn-${workflow.input.region}"``): (key, None); (None, None) when it resolves to null or
    ""; (None, why) when it resolves to no usable key."""
    value = resolve(template, lookup)
    if value is None or value == "":
        return None, None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None, f"rateLimitKey {template} resolved to {type(value).__name__}, not a key"
    key = str(value)
    if len(key) > KEY_MAX:
        return None, f"rateLimitKey {template} resolved to over {KEY_MAX} characters"
    return key, None


def _with(p: TaskScheduled, **changes: Any) -> TaskScheduled:
    return replace(p, **changes)


def _dynamic_fork(task: WorkflowTask, inputs: Mapping[str, Any], p: TaskScheduled) -> list[Payload]:
    tasks = inputs.get(str(task.get("dynamicForkTasksParam")))
    task_inputs = inputs.get(str(task.get("dynamicForkTasksInputParamName"))) or {}
    if not isinstance(tasks, list) or not all(isinstance(t, Mapping) for t in tasks):
        reason = (
            f"dynamicForkTasksParam {task.get('dynamicForkTasksParam')!r} is not a list of tasks"
        )
        return [p, TaskFailed(p.task_id, reason, terminal=True)]
    if not isinstance(task_inputs, Mapping):
        return [p, TaskFailed(p.task_id, "dynamic fork inputs are not an object", terminal=True)]
    docs = []
    for t in tasks:
        ref = str(t.get("taskReferenceName", ""))
        docs.append({"type": "SIMPLE", **t, "inputParameters": dict(task_inputs.get(ref) or {})})
    refs = [d["taskReferenceName"] for d in docs]
    return [
        _with(p, dynamic_tasks=docs),
        TaskCompleted(p.task_id, {"forkedTasks": refs, "forkedTaskInputs": dict(task_inputs)}),
    ]


def _terminate(tid: str, inputs: Mapping[str, Any], p: TaskScheduled) -> list[Payload]:
    """Conductor's TERMINATE: a map workflowOutput is the workflow's output as it is, any other
    value is wrapped as ``{"output": value}``; the task itself always ends COMPLETED."""
    status = str(inputs.get("terminationStatus") or "").upper()
    if status not in ("COMPLETED", "FAILED", "TERMINATED"):
        reason = f"terminationStatus must be COMPLETED, FAILED or TERMINATED, got {status!r}"
        return [p, TaskFailed(tid, reason, terminal=True)]
    raw = inputs.get("workflowOutput")
    output = dict(raw) if isinstance(raw, Mapping) else ({} if raw is None else {"output": raw})
    reason = str(
        inputs.get("terminationReason") or f"Workflow is {status} by TERMINATE task: {tid}"
    )
    done: list[Payload] = [p, TaskCompleted(tid, output)]
    if status == "COMPLETED":
        return [*done, WorkflowCompleted(output, reason)]
    return [*done, WorkflowEnding(status, reason, output)]


def _wait(tid: str, inputs: Mapping[str, Any], p: TaskScheduled, ctx: Context) -> list[Payload]:
    if inputs.get("duration") and inputs.get("until"):
        return [p, TaskFailed(tid, "WAIT takes duration or until, not both", terminal=True)]
    try:
        if inputs.get("duration"):
            until = retry.after(ctx.now, retry.parse_duration(str(inputs["duration"])))
        elif inputs.get("until"):
            until = retry.parse_until(str(inputs["until"]))
        else:
            return [_with(p, status=IN_PROGRESS)]  # until a signal arrives
    except ValueError as exc:
        return [p, TaskFailed(tid, str(exc), terminal=True)]
    return [_with(p, status=IN_PROGRESS, wait_until=until)]
