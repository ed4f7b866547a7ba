"""Checks a definition before any workflow runs it; every problem names the task and the fault.

Covers: missing required fields, unknown task types, duplicate references, expressions that
point at no task or no workflow field, a task reading its own output or one that runs after
it, FORK_JOIN/FORK_JOIN_DYNAMIC not followed by a JOIN, a JOIN waiting on tasks outside its
fork, SWITCH/DECISION/INLINE/DO_WHILE/WAIT/TERMINATE/SUB_WORKFLOW parameters, retry and
timeout settings, and cycles between workflows through SUB_WORKFLOW.
"""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from es_sched.domain import retry
from es_sched.domain.definitions import (
    ON_EXHAUSTED,
    PERCENTILES,
    RETRY_LOGICS,
    TASK_TYPES,
    TIMEOUT_POLICIES,
    WorkflowDef,
    WorkflowTask,
    parse_task_def,
    parse_workflow,
)
from es_sched.domain.expressions import EXPR, references, split_path

WORKFLOW_FIELDS = frozenset(
    {
        "input",
        "output",
        "variables",
        "workflowId",
        "correlationId",
        "status",
        "reasonForIncompletion",
        "workflowType",
        "version",
        "parentWorkflowId",
        "priority",
        "tenant",
        "createTime",
    }
)
TASK_FIELDS = frozenset(
    {
        "input",
        "output",
        "status",
        "taskId",
        "referenceTaskName",
        "taskType",
        "attempt",
        "retryCount",
        "reasonForIncompletion",
        "workerId",
        "iteration",
    }
)


_VALIDATED: OrderedDict[str, list[str]] = OrderedDict()
_VALIDATED_BY_IDENTITY: dict[tuple[int, int], tuple[Any, Any, list[str]]] = {}


def validate_workflow_cached(doc: Any, taskdef_docs: Sequence[Any] = ()) -> list[str]:
    """``validate_workflow`` memoised on the documents' canonical JSON (every StartWorkflow of a
    definition carries the same documents; the checks are deterministic)."""
    same = _VALIDATED_BY_IDENTITY.get((id(doc), id(taskdef_docs)))
    if same is not None and same[0] is doc and same[1] is taskdef_docs:
        return list(same[2])
    key = json.dumps([doc, list(taskdef_docs)], sort_keys=True, separators=(",", ":"), default=str)
    if key not in _VALIDATED:
        _VALIDATED[key] = validate_workflow(doc, taskdef_docs)
        if len(_VALIDATED) > 512:
            _VALIDATED.popitem(last=False)
    _VALIDATED_BY_IDENTITY[(id(doc), id(taskdef_docs))] = (doc, taskdef_docs, _VALIDATED[key])
    if len(_VALIDATED_BY_IDENTITY) > 512:
        _VALIDATED_BY_IDENTITY.pop(next(iter(_VALIDATED_BY_IDENTITY)))
    return list(_VALIDATED[key])


def validate_workflow(doc: Any, taskdef_docs: Sequence[Any] = ()) -> list[str]:
    definition, problems = parse_workflow(doc)
    for td in taskdef_docs:
        problems += parse_task_def(td)[1]
        if isinstance(td, Mapping):
            problems += [f"taskdef {td.get('name')!r}: {p}" for p in _settings_problems(td)]
    if definition is None:
        return problems
    _Checker(definition, problems).run()
    return problems


class _Checker:
    def __init__(self, definition: WorkflowDef, problems: list[str]) -> None:
        self.d, self.problems = definition, problems
        self.has_dynamic = any(
            loc.task.type == "FORK_JOIN_DYNAMIC" for loc in definition.index.values()
        )

    def add(self, task: WorkflowTask, message: str) -> None:
        self.problems.append(f"task {task.ref!r}: {message}")

    def run(self) -> None:
        self.walk(self.d.tasks, set(), top=True, in_loop=False)
        for key, template in (("outputParameters", self.d.output_parameters),):
            for path in references(template):
                self.check_path(None, path, set(self.d.index), key)

    def walk(self, tasks: Sequence[WorkflowTask], done: set[str], top: bool, in_loop: bool) -> None:
        """``done``: refs that have finished (or been skipped) before this list starts."""
        seen = set(done)
        for pos, task in enumerate(tasks):
            self.check_task(task, tasks, pos, seen, top, in_loop)
            for branch in task.children():
                self.walk(
                    branch, seen | {task.ref}, top=False, in_loop=in_loop or task.type == "DO_WHILE"
                )
            seen |= _all_refs([task])

    def check_task(
        self,
        task: WorkflowTask,
        siblings: Sequence[WorkflowTask],
        pos: int,
        seen: set[str],
        top: bool,
        in_loop: bool,
    ) -> None:
        if task.type not in TASK_TYPES:
            self.add(
                task, f"unknown task type {task.type!r} (known: {', '.join(sorted(TASK_TYPES))})"
            )
            return
        self.problems += [
            f"task {task.ref!r}: {p}" for p in _settings_problems(task.raw, expression_ok=True)
        ]
        resources = task.get("resources")
        if isinstance(resources, str) and EXPR.fullmatch(resources):
            for path in references(resources):
                self.check_path(task, path, seen | _loop_refs(self.d, task), "resources")
        inline = task.get("taskDefinition")
        if isinstance(inline, Mapping):
            self.problems += [
                f"task {task.ref!r}: taskDefinition {p}" for p in _settings_problems(inline)
            ]
        for path in references(dict(task.input_parameters)):
            self.check_path(task, path, seen | _loop_refs(self.d, task), "inputParameters")
        handler = getattr(self, f"check_{task.type.lower()}", None)
        if handler is not None:
            handler(task, siblings, pos, top, in_loop)

    def check_path(
        self, task: WorkflowTask | None, path: str, allowed: set[str], where: str
    ) -> None:
        parts = split_path(path)
        owner = f"task {task.ref!r}" if task else "workflow"
        if not parts or not isinstance(parts[0], str):
            self.problems.append(f"{owner}: {where} has an empty expression ${{{path}}}")
            return
        root = parts[0]
        if root == "CPEWF_TASK_ID" and len(parts) == 1:
            return
        if root == "workflow":
            if len(parts) < 2 or parts[1] not in WORKFLOW_FIELDS:
                self.problems.append(
                    f"{owner}: {where} refers to unknown workflow field in ${{{path}}}"
                )
            return
        if task is not None and root == task.ref:
            self.problems.append(
                f"{owner}: {where} refers to its own task in ${{{path}}} (a cycle)"
            )
            return
        if root not in self.d.index:
            # Refs of dynamically forked tasks are only known at run time: accept unknown refs
            # only in tasks that run after a FORK_JOIN_DYNAMIC (and outputParameters).
            after_dynamic = task is None or any(
                self.d.index[r].task.type == "FORK_JOIN_DYNAMIC"
                for r in allowed
                if r in self.d.index
            )
            if not (self.has_dynamic and after_dynamic):
                self.problems.append(
                    f"{owner}: {where} refers to unknown task {root!r} in ${{{path}}}"
                )
            return
        if len(parts) > 1 and parts[1] not in TASK_FIELDS:
            self.problems.append(
                f"{owner}: {where} refers to unknown field {parts[1]!r} of task {root!r}"
            )
        elif task is not None and root not in allowed:
            self.problems.append(
                f"{owner}: {where} refers to task {root!r}, which does not finish before it runs"
            )

    # -- per type ---------------------------------------------------------------------------
    def check_switch(self, task: WorkflowTask, *_: Any) -> None:
        evaluator = str(task.get("evaluatorType") or "value-param")
        if evaluator not in ("value-param", "javascript", "graaljs"):
            self.add(task, f"unknown evaluatorType {evaluator!r}")
        if not task.get("expression"):
            self.add(task, "SWITCH needs an expression")
        if not task.decision_cases and not task.default_case:
            self.add(task, "SWITCH needs decisionCases or a defaultCase")

    def check_decision(self, task: WorkflowTask, *_: Any) -> None:
        if not task.get("caseValueParam") and not task.get("caseExpression"):
            self.add(task, "DECISION needs caseValueParam or caseExpression")

    def check_fork_join(
        self, task: WorkflowTask, siblings: Sequence[WorkflowTask], pos: int, *_: Any
    ) -> None:
        if not task.fork_tasks or not all(task.fork_tasks):
            self.add(task, "FORK_JOIN needs forkTasks: a list of non-empty task lists")
        join = siblings[pos + 1] if pos + 1 < len(siblings) else None
        if join is None or join.type != "JOIN":
            self.add(task, "FORK_JOIN must be followed by a JOIN")
            return
        inside = set().union(*(_all_refs(b) for b in task.fork_tasks)) if task.fork_tasks else set()
        for ref in join.join_on:
            if ref not in inside:
                if ref not in self.d.index:
                    self.add(join, f"joinOn {ref!r} is not a task of this workflow")
                else:
                    self.add(join, f"joinOn {ref!r} is outside the fork {task.ref!r}")

    def check_fork_join_dynamic(
        self, task: WorkflowTask, siblings: Sequence[WorkflowTask], pos: int, *_: Any
    ) -> None:
        for key in ("dynamicForkTasksParam", "dynamicForkTasksInputParamName"):
            if not task.get(key):
                self.add(task, f"FORK_JOIN_DYNAMIC needs {key}")
            elif str(task.get(key)) not in task.input_parameters:
                self.add(task, f"{key} {task.get(key)!r} is not one of its inputParameters")
        if pos + 1 >= len(siblings) or siblings[pos + 1].type != "JOIN":
            self.add(task, "FORK_JOIN_DYNAMIC must be followed by a JOIN")

    def check_join(
        self, task: WorkflowTask, siblings: Sequence[WorkflowTask], pos: int, *_: Any
    ) -> None:
        if pos == 0 or siblings[pos - 1].type not in ("FORK_JOIN", "FORK_JOIN_DYNAMIC"):
            self.add(task, "a JOIN must come right after a FORK_JOIN or FORK_JOIN_DYNAMIC")

    def check_do_while(
        self, task: WorkflowTask, siblings: Any, pos: int, top: bool, in_loop: bool
    ) -> None:
        if not task.loop_over:
            self.add(task, "DO_WHILE needs a non-empty loopOver")
        if not task.get("loopCondition"):
            self.add(task, "DO_WHILE needs a loopCondition")
        if in_loop:
            self.add(task, "a DO_WHILE cannot be nested inside another DO_WHILE")

    def check_inline(self, task: WorkflowTask, *_: Any) -> None:
        if str(task.input_parameters.get("evaluatorType", "")) not in ("javascript", "graaljs"):
            self.add(task, "INLINE needs inputParameters.evaluatorType 'javascript' or 'graaljs'")
        if not task.input_parameters.get("expression"):
            self.add(task, "INLINE needs inputParameters.expression")

    def check_terminate(self, task: WorkflowTask, *_: Any) -> None:
        status = task.input_parameters.get("terminationStatus")
        if status not in ("COMPLETED", "FAILED", "TERMINATED") and not _is_expr(status):
            self.add(task, "TERMINATE needs terminationStatus COMPLETED, FAILED or TERMINATED")

    def check_wait(self, task: WorkflowTask, *_: Any) -> None:
        params = task.input_parameters
        try:
            if params.get("duration") and not _is_expr(params["duration"]):
                retry.parse_duration(str(params["duration"]))
            if params.get("until") and not _is_expr(params["until"]):
                retry.parse_until(str(params["until"]))
        except ValueError as exc:
            self.add(task, str(exc))

    def check_sub_workflow(self, task: WorkflowTask, *_: Any) -> None:
        param = task.get("subWorkflowParam")
        if not isinstance(param, Mapping) or not (
            param.get("name") or param.get("workflowDefinition")
        ):
            self.add(task, "SUB_WORKFLOW needs subWorkflowParam.name (or workflowDefinition)")
        elif param.get("name") == self.d.name:
            self.add(task, f"SUB_WORKFLOW starts its own workflow {self.d.name!r}: a cycle")

    def check_start_workflow(self, task: WorkflowTask, *_: Any) -> None:
        spec = task.input_parameters.get("startWorkflow")
        if not isinstance(spec, Mapping) or not spec.get("name"):
            self.add(task, "START_WORKFLOW needs inputParameters.startWorkflow.name")

    def check_callback(
        self, task: WorkflowTask, siblings: Any, pos: int, top: bool, in_loop: bool
    ) -> None:
        if not top:
            self.add(task, "a CALLBACK task belongs in the workflow's top-level task list")


def _is_expr(value: Any) -> bool:
    return isinstance(value, str) and EXPR.search(value) is not None


def _all_refs(tasks: Iterable[WorkflowTask]) -> set[str]:
    out: set[str] = set()
    for t in tasks:
        out.add(t.ref)
        for branch in t.children():
            out |= _all_refs(branch)
    return out


def _loop_refs(d: WorkflowDef, task: WorkflowTask) -> set[str]:
    """Inside a DO_WHILE, a task may read any body task's output (from earlier iterations)."""
    refs: set[str] = set()
    loc = d.index.get(task.ref)
    while loc is not None and loc.container is not None:
        container = d.index[loc.container].task
        if container.type == "DO_WHILE":
            refs |= _all_refs(container.loop_over) | {container.ref}
        loc = d.index.get(loc.container)
    return refs


def _settings_problems(doc: Mapping[str, Any], expression_ok: bool = False) -> list[str]:
    """``expression_ok``: a workflow task's resources may be one ``${...}`` expression."""
    problems = []
    resources = doc.get("resources")
    expression = expression_ok and isinstance(resources, str) and EXPR.fullmatch(resources)
    if resources is not None and not isinstance(resources, Mapping) and not expression:
        what = "an object or one ${...} expression" if expression_ok else "an object"
        problems.append(f"resources must be {what}, got {resources!r}")
    for key in (
        "retryCount",
        "retryDelaySeconds",
        "timeoutSeconds",
        "responseTimeoutSeconds",
        "maxRetryDelaySeconds",
    ):
        value = doc.get(key)
        if value is not None and (
            not isinstance(value, int | float) or isinstance(value, bool) or value < 0
        ):
            problems.append(f"{key} must be a non-negative number, got {value!r}")
    if doc.get("retryLogic") is not None and doc["retryLogic"] not in RETRY_LOGICS:
        problems.append(f"retryLogic must be one of {', '.join(sorted(RETRY_LOGICS))}")
    if doc.get("timeoutPolicy") is not None and doc["timeoutPolicy"] not in TIMEOUT_POLICIES:
        problems.append(f"timeoutPolicy must be one of {', '.join(sorted(TIMEOUT_POLICIES))}")
    priority = doc.get("priority")
    if priority is not None and (
        not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 8
    ):
        problems.append(f"priority must be an integer 0-8 (0 highest), got {priority!r}")
    jitter = doc.get("retryJitter")
    if jitter is not None and (
        not isinstance(jitter, int | float) or isinstance(jitter, bool) or not 0 <= jitter <= 1
    ):
        problems.append(f"retryJitter must be between 0 and 1, got {jitter!r}")
    problems += retry.input_changes_problems(doc.get("retryInputChanges"))
    exhausted = doc.get("onExhausted")
    if exhausted is not None and exhausted not in ON_EXHAUSTED:
        problems.append(
            f"onExhausted must be one of {', '.join(sorted(ON_EXHAUSTED))}, got {exhausted!r}"
        )
    problems += dynamic_timeout_problems(doc.get("dynamicTimeout"))
    return problems


DYNAMIC_TIMEOUT_KEYS = ("percentile", "factor", "floorSeconds", "ceilingSeconds", "minSamples")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def dynamic_timeout_problems(doc: Any) -> list[str]:
    """What is wrong with a ``dynamicTimeout`` (ADR 65); null or absent is no policy."""
    if doc is None:
        return []
    where = "dynamicTimeout"
    if not isinstance(doc, Mapping):
        return [f"{where} must be an object or null, got {doc!r}"]
    problems = [
        f"{where}: unknown key {key!r} (known: {', '.join(DYNAMIC_TIMEOUT_KEYS)})"
        for key in doc
        if key not in DYNAMIC_TIMEOUT_KEYS
    ]
    floor: Any = doc.get("floorSeconds")
    ceiling: Any = doc.get("ceilingSeconds")
    for key, value in (("floorSeconds", floor), ("ceilingSeconds", ceiling)):
        if value is None:
            problems.append(f"{where}.{key} is required: the bound a learned timeout stays in")
        elif not _is_number(value) or value <= 0:
            problems.append(f"{where}.{key} must be a number of seconds above 0, got {value!r}")
    if _is_number(floor) and _is_number(ceiling) and 0 < ceiling < floor:
        problems.append(
            f"{where}.ceilingSeconds ({ceiling!r}) must not be below floorSeconds ({floor!r})"
        )
    percentile = doc.get("percentile", 95)
    if (
        not isinstance(percentile, int)
        or isinstance(percentile, bool)
        or percentile not in PERCENTILES
    ):
        known = ", ".join(str(p) for p in PERCENTILES)
        problems.append(
            f"{where}.percentile must be one of {known} (what is measured), got {percentile!r}"
        )
    factor = doc.get("factor", 1.2)
    if not _is_number(factor) or factor < 1:
        problems.append(
            f"{where}.factor must be a number of at least 1 (below it, usual runs time out), "
            f"got {factor!r}"
        )
    samples = doc.get("minSamples", 20)
    if not isinstance(samples, int) or isinstance(samples, bool) or samples < 1:
        problems.append(f"{where}.minSamples must be an integer of at least 1, got {samples!r}")
    return problems


def sub_workflow_cycles(definitions: Mapping[str, Any]) -> list[str]:
    """Cycles in the graph 'workflow A starts B through SUB_WORKFLOW' over known definitions."""
    edges: dict[str, set[str]] = {}
    for name, doc in definitions.items():
        parsed, _ = parse_workflow(doc)
        if parsed is None:
            continue
        edges[name] = {
            str(loc.task.get("subWorkflowParam", {}).get("name"))
            for loc in parsed.index.values()
            if loc.task.type == "SUB_WORKFLOW"
            and isinstance(loc.task.get("subWorkflowParam"), Mapping)
        }
    problems: list[str] = []
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
                problems.append(f"workflow {nxt!r}: SUB_WORKFLOW cycle {' -> '.join(cycle)}")
            elif nxt in edges and state.get(nxt) is None:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for name in sorted(edges):
        if state.get(name) is None:
            visit(name, [name])
    return problems
