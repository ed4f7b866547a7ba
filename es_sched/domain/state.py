"""Workflow and task state: what ``fold`` builds from events.

Treat these as values: nothing outside ``evolve`` changes one in place. They are not frozen
only so that ``fold`` can apply a long history to one private copy (copy-on-write per task)
instead of rebuilding the whole state for every event.

A task *instance* is one attempt of one reference (``ref`` carries ``__N`` inside a DO_WHILE);
a retry is a new instance with the next attempt number, like Conductor's task list.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from es_sched.domain.definitions import WORKER_TYPES, TaskDef, WorkflowDef, WorkflowTask
from es_sched.domain.layered import layered

if TYPE_CHECKING:
    from es_sched.domain.fanout import Fan

JSON = dict[str, Any]

RUNNING, PAUSED, COMPLETED = "RUNNING", "PAUSED", "COMPLETED"
FAILED, TIMED_OUT, TERMINATED, CANCELED = "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"
WORKFLOW_TERMINAL = frozenset({COMPLETED, FAILED, TIMED_OUT, TERMINATED, CANCELED})

SCHEDULED, IN_PROGRESS = "SCHEDULED", "IN_PROGRESS"
T_COMPLETED, T_COMPLETED_WITH_ERRORS = "COMPLETED", "COMPLETED_WITH_ERRORS"
T_FAILED, T_FAILED_TERMINAL = "FAILED", "FAILED_WITH_TERMINAL_ERROR"
T_TIMED_OUT, T_CANCELED, T_SKIPPED = "TIMED_OUT", "CANCELED", "SKIPPED"
TASK_SUCCESS = frozenset({T_COMPLETED, T_COMPLETED_WITH_ERRORS, T_SKIPPED})
TASK_UNSUCCESSFUL = frozenset({T_FAILED, T_FAILED_TERMINAL, T_TIMED_OUT, T_CANCELED})
# Out of retries and waiting for an operator (ADR 71): no worker may report on it and no
# timer acts on it (so terminal), yet it is no outcome: the walk waits, the workflow runs.
T_PARKED = "PARKED_FOR_REVIEW"
TASK_TERMINAL = TASK_SUCCESS | TASK_UNSUCCESSFUL | {T_PARKED}

RECENT_INPUTS = 256  # input ids remembered per workflow for idempotency


@dataclass
class TaskState:
    task_id: str
    ref: str
    def_ref: str
    task_type: str
    name: str
    attempt: int
    status: str
    input: JSON
    scheduled_at: datetime
    order: int  # position in the workflow's task list (scheduling order)
    iteration: int = 0
    output: JSON = field(default_factory=dict)
    reason: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    worker_id: str | None = None
    lease_epoch: int = 0
    lease_token: str | None = None
    progress: float = 0.0
    last_progress_at: datetime | None = None
    retry_due_at: datetime | None = None  # set on a failed attempt that will be retried
    retried: bool = False  # a later attempt of this ref exists
    wait_until: datetime | None = None
    child_workflow_id: str | None = None
    callback: bool = False
    priority: int = 4
    resources: JSON = field(default_factory=dict)
    rate_limit_key: str | None = None
    timeout_s: float | None = None  # the recorded total timeout (ADR 65); None: the settings'

    @property
    def terminal(self) -> bool:
        return self.status in TASK_TERMINAL

    def clone(self) -> TaskState:
        """A shallow copy, several times faster than ``copy.copy`` (it sits on fold's hot path)."""
        new = object.__new__(TaskState)
        new.__dict__.update(self.__dict__)
        return new


@dataclass
class WorkflowState:
    workflow_id: str
    definition: WorkflowDef
    taskdefs: Mapping[str, TaskDef]
    status: str
    input: JSON
    created_at: datetime
    correlation_id: str
    seq: int = 0
    priority: int = 4
    tenant: str | None = None
    output: JSON = field(default_factory=dict)
    variables: JSON = field(default_factory=dict)
    reason: str = ""
    ending: str | None = None  # the terminal status being reached while callbacks run
    updated_at: datetime | None = None
    ended_at: datetime | None = None
    parent_workflow_id: str | None = None
    parent_task_id: str | None = None
    tasks: Mapping[str, TaskState] = field(default_factory=dict)  # by task_id, in order
    latest: Mapping[str, str] = field(default_factory=dict)  # ref -> task_id of newest attempt
    dynamic: Mapping[str, WorkflowTask] = field(default_factory=dict)  # dynamic-fork tasks
    subworkflow_definitions: tuple[JSON, ...] = ()
    recent_inputs: tuple[str, ...] = ()
    sla_tier: str | None = None  # domain.sla
    deadline: datetime | None = None
    sla_retries: int | None = None  # replaces retryCount for its worker tasks (ADR 67)
    # Derived, never serialised: the dynamic forks' branch index, kept by evolve and rebuilt
    # for a state built otherwise (``fanout.rebuild``: a restored snapshot).
    fans: Mapping[str, Fan] = field(default_factory=dict, compare=False, repr=False)
    fan_of: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def terminal(self) -> bool:
        return self.status in WORKFLOW_TERMINAL

    def clone(self) -> WorkflowState:
        """A copy to apply events to: task objects shared until changed, and the task maps
        layered (``domain.layered``), so a copy costs O(recent changes), not O(tasks)."""
        new = object.__new__(WorkflowState)
        new.__dict__.update(self.__dict__)
        new.tasks = layered(self.tasks)
        new.latest = layered(self.latest)
        return new

    def instance(self, ref: str) -> TaskState | None:
        task_id = self.latest.get(ref)
        return self.tasks[task_id] if task_id is not None else None

    def lookup_task(self, ref: str) -> WorkflowTask | None:
        loc = self.definition.index.get(ref)
        return loc.task if loc is not None else self.dynamic.get(ref)

    def runs_on_worker(self, def_ref: str) -> bool:
        """Whether workers run this task (SIMPLE, CALLBACK): it is queued, leased, reported."""
        definition = self.lookup_task(def_ref)
        return definition is not None and definition.type in WORKER_TYPES
