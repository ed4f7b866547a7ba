"""Workflow and task definitions in Netflix Conductor's JSON format, accepted unchanged.

``parse_workflow`` turns a Conductor workflow definition (already decoded from JSON or YAML) into
typed, immutable ``WorkflowDef``/``WorkflowTask`` values; ``parse_task_def`` does the same for
Conductor TaskDef documents. The original document is kept (``raw``) so it round-trips. Parsing
is lenient about absent fields (Conductor's defaults apply) and strict about types; semantic
checks (cycles, references, joins) live in ``validation``.

es-sched extensions, all optional and ignored by Conductor: ``priority`` (0-8, 0 highest),
``resources`` (``cpu``, ``memory_mb``, ``gpu_memory_mb``, ``custom``; on a workflow task also
one ``${...}`` expression, resolved when the task is scheduled, e.g. to an estimate an earlier
task computed: null falls back to the TaskDef's resources; an estimate keeps its ``inputs``,
ADR 66), ``rateLimitKey``, ``retryJitter``
(0-1, the fraction of a retry delay that is jittered), ``dynamicTimeout`` (a worker task's
total timeout from its learned run times, ``domain.timeouts``), ``retryInputChanges`` (a list
of objects: attempt N+1 runs with the first N merged into its input, ``domain.retry``) and
``onExhausted`` (``FAIL``, Conductor's, or ``REVIEW``: a task out of retries parks for an
operator instead of failing its workflow, ADR 71) on a workflow task or TaskDef; the CALLBACK
task type.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from es_sched.domain.pickling import frozen_by_constructor
from es_sched.errors import DomainError

SYSTEM_TYPES = frozenset(
    {
        "SWITCH",
        "DECISION",
        "FORK_JOIN",
        "FORK_JOIN_DYNAMIC",
        "JOIN",
        "DO_WHILE",
        "SET_VARIABLE",
        "INLINE",
        "LAMBDA",
        "TERMINATE",
        "WAIT",
        "SUB_WORKFLOW",
        "START_WORKFLOW",
    }
)
WORKER_TYPES = frozenset({"SIMPLE", "CALLBACK"})
TASK_TYPES = SYSTEM_TYPES | WORKER_TYPES
RETRY_LOGICS = frozenset({"FIXED", "LINEAR_BACKOFF", "EXPONENTIAL_BACKOFF"})
TIMEOUT_POLICIES = frozenset({"RETRY", "TIME_OUT_WF", "ALERT_ONLY"})
ON_EXHAUSTED = frozenset({"FAIL", "REVIEW"})


class DefinitionError(DomainError):
    """A definition document that cannot be used; ``problems`` lists every reason."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Resources:
    cpu: float = 0.0
    memory_mb: int = 0
    gpu_memory_mb: int = 0
    custom: Mapping[str, float] = field(default_factory=dict)
    # A cost model's inputs when these resources are its estimate (``learned_cost``, ADR 66):
    # the dispatcher corrects such an estimate by what its size class measured.
    inputs: Mapping[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cpu": self.cpu,
            "memory_mb": self.memory_mb,
            "gpu_memory_mb": self.gpu_memory_mb,
            "custom": dict(self.custom),
        }
        if self.inputs is not None:
            out["inputs"] = dict(self.inputs)
        return out


NO_RESOURCES = Resources()  # one object, so its dict is shared too (parsed.resources_dict)

PERCENTILES = (50, 95, 99)  # the run-time percentiles the analytics role publishes


@dataclass(frozen=True)
class DynamicTimeout:
    """``dynamicTimeout``: a worker task's total timeout is ``factor`` x the ``percentile`` of
    its type's recent run times (its size class's), clamped to [``floor_s``, ``ceiling_s``];
    the static ``timeoutSeconds`` until ``min_samples`` runs were measured (ADR 65)."""

    floor_s: float
    ceiling_s: float
    percentile: int = 95
    factor: float = 1.2
    min_samples: int = 20


def _number(value: Any, default: float) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    return float(value) if ok else default


def dynamic_timeout_of(doc: Any) -> DynamicTimeout | None:
    """The policy of a ``dynamicTimeout`` document; lenient like the rest of parsing (a bad
    document is refused by ``validation`` before any workflow uses it): None for null."""
    if not isinstance(doc, Mapping):
        return None
    percentile = doc.get("percentile", 95)
    samples = doc.get("minSamples", 20)
    return DynamicTimeout(
        floor_s=_number(doc.get("floorSeconds"), 1.0),
        ceiling_s=_number(doc.get("ceilingSeconds"), math.inf),
        percentile=percentile if isinstance(percentile, int) and percentile in PERCENTILES else 95,
        factor=_number(doc.get("factor"), 1.2),
        min_samples=samples if isinstance(samples, int) and not isinstance(samples, bool) else 20,
    )


@dataclass(frozen=True)
class TaskSettings:
    """Retry, timeout and placement settings of one task, after all overrides."""

    retry_count: int = 3
    retry_logic: str = "FIXED"
    retry_delay_seconds: float = 60.0
    backoff_scale_factor: float = 1.0
    max_retry_delay_seconds: float = 0.0  # 0: no cap
    retry_jitter: float = 0.0
    timeout_seconds: float = 0.0  # 0: no total timeout
    response_timeout_seconds: float = 3600.0
    timeout_policy: str = "TIME_OUT_WF"
    priority: int | None = None  # None: the workflow's priority
    resources: Resources = NO_RESOURCES
    rate_limit_key: str | None = None
    rate_limit_per_frequency: int = 0
    rate_limit_frequency_in_seconds: int = 1
    concurrent_exec_limit: int = 0
    dynamic_timeout: DynamicTimeout | None = None  # None: the static timeouts only
    # Merged into the input of attempt 2, 3, ... (one more change per attempt, ADR 71).
    retry_input_changes: tuple[Mapping[str, Any], ...] = ()
    on_exhausted: str = "FAIL"  # REVIEW: park for an operator instead of failing (ADR 71)


@dataclass(frozen=True)
class TaskLimits:
    """A task's Conductor limits, from its TaskDef, as the dispatcher enforces them (ADR 13):
    ``rate_per_frequency`` starts per ``frequency_s`` seconds (in the bucket of its evaluated
    rateLimitKey, else of its type) and ``concurrent`` of its type in flight; 0 is no limit."""

    rate_per_frequency: int = 0
    frequency_s: int = 1
    concurrent: int = 0

    @classmethod
    def of(cls, s: TaskSettings) -> TaskLimits:
        return cls(
            s.rate_limit_per_frequency, s.rate_limit_frequency_in_seconds, s.concurrent_exec_limit
        )


NO_LIMITS = TaskLimits()


_SETTING_KEYS: dict[str, str] = {
    "retryCount": "retry_count",
    "retryLogic": "retry_logic",
    "retryDelaySeconds": "retry_delay_seconds",
    "backoffScaleFactor": "backoff_scale_factor",
    "maxRetryDelaySeconds": "max_retry_delay_seconds",
    "retryJitter": "retry_jitter",
    "timeoutSeconds": "timeout_seconds",
    "responseTimeoutSeconds": "response_timeout_seconds",
    "timeoutPolicy": "timeout_policy",
    "priority": "priority",
    "rateLimitKey": "rate_limit_key",
    "rateLimitPerFrequency": "rate_limit_per_frequency",
    "rateLimitFrequencyInSeconds": "rate_limit_frequency_in_seconds",
    "concurrentExecLimit": "concurrent_exec_limit",
    "onExhausted": "on_exhausted",
}


def settings_overrides(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The TaskSettings fields a TaskDef or workflow-task document sets explicitly."""
    out: dict[str, Any] = {attr: doc[key] for key, attr in _SETTING_KEYS.items() if key in doc}
    changes = doc.get("retryInputChanges")
    if isinstance(changes, list):  # a malformed one is validation's refusal, never used
        out["retry_input_changes"] = tuple(dict(c) for c in changes if isinstance(c, Mapping))
    if isinstance(doc.get("resources"), Mapping):  # an expression is resolved at scheduling
        r = doc["resources"]
        out["resources"] = Resources(
            cpu=float(r.get("cpu", 0)),
            memory_mb=int(r.get("memory_mb", 0)),
            gpu_memory_mb=int(r.get("gpu_memory_mb", 0)),
            custom={str(k): float(v) for k, v in dict(r.get("custom", {})).items()},
        )
    if "dynamicTimeout" in doc:  # null on a workflow task turns its TaskDef's policy off
        out["dynamic_timeout"] = dynamic_timeout_of(doc["dynamicTimeout"])
    return out


def resources_of(value: Any) -> Resources:
    """Resources from a resolved ``resources`` expression; ``ValueError`` says what is wrong."""
    if not isinstance(value, Mapping):
        raise ValueError(f"resources resolved to {type(value).__name__}, not an object")

    def amount(key: str, v: Any) -> float:
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf:
            raise ValueError(f"resources {key} must be a non-negative number, got {v!r}")
        return float(v)

    custom = value.get("custom") or {}
    if not isinstance(custom, Mapping):
        raise ValueError("resources custom must be an object")
    inputs = value.get("inputs")
    if inputs is not None and not isinstance(inputs, Mapping):
        raise ValueError("resources inputs must be an object (a cost model's inputs)")
    return Resources(
        cpu=amount("cpu", value.get("cpu", 0)),
        memory_mb=int(amount("memory_mb", value.get("memory_mb", 0))),
        gpu_memory_mb=int(amount("gpu_memory_mb", value.get("gpu_memory_mb", 0))),
        custom={str(k): amount(f"custom.{k}", v) for k, v in custom.items()},
        inputs=None if inputs is None else {str(k): v for k, v in inputs.items()},
    )


@dataclass(frozen=True)
class TaskDef:
    name: str
    overrides: Mapping[str, Any]
    raw: Mapping[str, Any]


@dataclass(frozen=True)
class WorkflowTask:
    name: str
    ref: str
    type: str
    raw: Mapping[str, Any]
    input_parameters: Mapping[str, Any] = field(default_factory=dict)
    optional: bool = False
    decision_cases: Mapping[str, tuple[WorkflowTask, ...]] = field(default_factory=dict)
    default_case: tuple[WorkflowTask, ...] = ()
    fork_tasks: tuple[tuple[WorkflowTask, ...], ...] = ()
    join_on: tuple[str, ...] = ()
    loop_over: tuple[WorkflowTask, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return self.raw.get(key, default)

    def children(self) -> Iterator[tuple[WorkflowTask, ...]]:
        """Every nested task list: switch cases, fork branches, loop body."""
        yield from self.decision_cases.values()
        if self.default_case:
            yield self.default_case
        yield from self.fork_tasks
        if self.loop_over:
            yield self.loop_over


@dataclass(frozen=True)
class Location:
    """Where a task sits: its list (container ref and branch key) and position in that list."""

    task: WorkflowTask
    container: str | None  # ref of the SWITCH/FORK/DO_WHILE holding it, None at the top
    branch: str  # case value, fork branch index, "loop", or "" at the top
    position: int
    siblings: tuple[WorkflowTask, ...]


@dataclass(frozen=True)
class WorkflowDef:
    name: str
    version: int
    tasks: tuple[WorkflowTask, ...]
    raw: Mapping[str, Any]
    index: Mapping[str, Location]

    @property
    def output_parameters(self) -> Mapping[str, Any]:
        return dict(self.raw.get("outputParameters") or {})

    @property
    def failure_workflow(self) -> str | None:
        value = self.raw.get("failureWorkflow")
        return str(value) if value else None

    @property
    def timeout_seconds(self) -> float:
        return float(self.raw.get("timeoutSeconds") or 0)

    @property
    def timeout_policy(self) -> str:
        return str(self.raw.get("timeoutPolicy") or "TIME_OUT_WF")

    @property
    def callbacks(self) -> tuple[WorkflowTask, ...]:
        return tuple(t for t in self.tasks if t.type == "CALLBACK")


def _task(doc: Any, problems: list[str], where: str) -> WorkflowTask | None:
    if not isinstance(doc, Mapping):
        problems.append(f"{where}: a task must be an object, got {type(doc).__name__}")
        return None
    ref = doc.get("taskReferenceName")
    name = doc.get("name")
    label = f"task {ref!r}" if ref else f"{where} (name {name!r})"
    if not isinstance(ref, str) or not ref:
        problems.append(f"{label}: missing required field taskReferenceName")
        ref = ""
    if not isinstance(name, str) or not name:
        problems.append(f"{label}: missing required field name")
        name = ref
    ttype = str(doc.get("type") or "SIMPLE")
    params = doc.get("inputParameters") or {}
    if not isinstance(params, Mapping):
        problems.append(f"{label}: inputParameters must be an object")
        params = {}

    def tasks_of(key: str, value: Any) -> tuple[WorkflowTask, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            problems.append(f"{label}: {key} must be a list of tasks")
            return ()
        parsed = [_task(t, problems, f"{label} {key}[{i}]") for i, t in enumerate(value)]
        return tuple(t for t in parsed if t is not None)

    cases_doc = doc.get("decisionCases") or {}
    cases = (
        {str(k): tasks_of(f"decisionCases.{k}", v) for k, v in cases_doc.items()}
        if isinstance(cases_doc, Mapping)
        else {}
    )
    forks_doc = doc.get("forkTasks") or []
    forks = (
        tuple(tasks_of(f"forkTasks[{i}]", b) for i, b in enumerate(forks_doc))
        if isinstance(forks_doc, list)
        else ()
    )
    return WorkflowTask(
        name=name,
        ref=ref,
        type=ttype,
        raw=doc,
        input_parameters=params,
        optional=bool(doc.get("optional", False)),
        decision_cases=cases,
        default_case=tasks_of("defaultCase", doc.get("defaultCase")),
        fork_tasks=forks,
        join_on=tuple(str(r) for r in doc.get("joinOn") or ()),
        loop_over=tasks_of("loopOver", doc.get("loopOver")),
    )


def _index(
    tasks: tuple[WorkflowTask, ...],
    container: str | None,
    branch: str,
    out: dict[str, Location],
    problems: list[str],
) -> None:
    for pos, t in enumerate(tasks):
        if t.ref in out:
            problems.append(f"task {t.ref!r}: duplicate taskReferenceName")
        elif t.ref:
            out[t.ref] = Location(t, container, branch, pos, tasks)
        for key, case in t.decision_cases.items():
            _index(case, t.ref, key, out, problems)
        if t.default_case:
            _index(t.default_case, t.ref, "default", out, problems)
        for i, fork in enumerate(t.fork_tasks):
            _index(fork, t.ref, str(i), out, problems)
        if t.loop_over:
            _index(t.loop_over, t.ref, "loop", out, problems)


def steps_to_end(d: WorkflowDef, ref: str) -> int:
    """How many steps of ``d`` lie after task ``ref`` until the workflow's end: the tasks after
    it in its own list, then after each list holding it (a SWITCH, FORK or DO_WHILE is one step
    of the list it is in; a loop's later iterations are not counted). The dispatcher starts the
    task with fewer first (ADR 69). A task the definition does not name (a dynamic fork's
    branch) counts 0."""
    steps = 0
    loc = d.index.get(ref)
    while loc is not None:
        steps += len(loc.siblings) - loc.position - 1
        loc = d.index.get(loc.container) if loc.container is not None else None
    return steps


def parse_tasks(docs: Any, problems: list[str], where: str) -> tuple[WorkflowTask, ...]:
    if not isinstance(docs, list):
        problems.append(f"{where}: tasks must be a list")
        return ()
    parsed = [_task(doc, problems, f"{where}[{i}]") for i, doc in enumerate(docs)]
    return tuple(t for t in parsed if t is not None)


def parse_workflow(doc: Any) -> tuple[WorkflowDef | None, list[str]]:
    """Parse a Conductor workflow definition; returns (definition or None, problems)."""
    problems: list[str] = []
    if not isinstance(doc, Mapping):
        return None, ["a workflow definition must be a JSON/YAML object"]
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        problems.append("workflow: missing required field name")
        name = ""
    version = doc.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        problems.append(f"workflow {name!r}: version must be a positive integer")
        version = 1
    if "tasks" not in doc:
        problems.append(f"workflow {name!r}: missing required field tasks")
    tasks = parse_tasks(doc.get("tasks", []), problems, "tasks")
    index: dict[str, Location] = {}
    _index(tasks, None, "", index, problems)
    return WorkflowDef(name, version, tasks, doc, index), problems


def parse_task_def(doc: Any) -> tuple[TaskDef | None, list[str]]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get("name"), str):
        return None, ["a TaskDef must be an object with a name"]
    return TaskDef(doc["name"], settings_overrides(doc), doc), []


def settings_for(task: WorkflowTask, taskdefs: Mapping[str, TaskDef]) -> TaskSettings:
    """Conductor's defaults, then the TaskDef, then the task's own taskDefinition and fields."""
    merged: dict[str, Any] = {}
    inline = task.get("taskDefinition")
    if task.name in taskdefs:
        merged.update(taskdefs[task.name].overrides)
    elif not isinstance(inline, Mapping):
        merged["retry_count"] = 0  # Conductor retries only tasks that have a TaskDef
    if isinstance(inline, Mapping):
        merged.update(settings_overrides(inline))
    merged.update(settings_overrides(task.raw))
    return TaskSettings(**merged)


frozen_by_constructor(globals())  # pickled through constructors (domain.pickling, ADR 51)
