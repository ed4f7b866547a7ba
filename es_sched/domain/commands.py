"""Inputs to the decider: commands from people and services, reports from the runtime.

Commands are imperative (``StartWorkflow``) and carry a client-chosen ``command_id`` used for
idempotency and an optional ``expected_version`` (the workflow's last seq) for optimistic
concurrency, and an optional ``actor`` (who asked). Runtime inputs (dispatcher, workers,
timers, child workflows) carry an ``input_id`` for the same purpose. ``INPUT_TYPES`` is the
registry of stable type strings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from es_sched.domain.fastinit import dict_init

JSON = dict[str, Any]


@dataclass(frozen=True)
class Input:
    TYPE: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 1
    input_id: str
    workflow_id: str

    @property
    def command_id(self) -> str:
        return self.input_id


@dataclass(frozen=True)
class Command(Input):
    expected_version: int | None = None
    # Who asked (an operator action carries who did it, DESIGN.md section 8): recorded by the
    # decider on the envelope of every event the command causes, refusals included.
    actor: str | None = None


# -- commands -------------------------------------------------------------------------------
@dataclass(frozen=True)
class StartWorkflow(Command):
    TYPE = "workflow.start"
    name: str = ""
    version: int | None = None
    input: JSON = field(default_factory=dict)
    priority: int = 4
    tenant: str | None = None
    correlation_id: str | None = None
    # Filled by the shell from the definition registry (or given inline by the client):
    definition: JSON | None = None
    taskdefs: list[JSON] = field(default_factory=list)
    subworkflow_definitions: list[JSON] = field(default_factory=list)
    parent_workflow_id: str | None = None
    parent_task_id: str | None = None
    sla_tier: str | None = None  # P0..P3 (domain.sla); None: no tier, today's rules
    deadline: datetime | None = None  # when the workflow should have ended (domain.sla)
    # retries of each worker task instead of its TaskDef's retryCount: the tier's, set by the
    # client from ES_SCHED_SLA_RETRIES_P<n> (ADR 67); None: the TaskDefs'
    sla_retries: int | None = None


@dataclass(frozen=True)
class CancelWorkflow(Command):
    TYPE = "workflow.cancel"
    reason: str = "canceled"


@dataclass(frozen=True)
class TerminateWorkflow(Command):
    TYPE = "workflow.terminate"
    reason: str = "terminated"


@dataclass(frozen=True)
class RetryWorkflow(Command):
    TYPE = "workflow.retry"


@dataclass(frozen=True)
class PauseWorkflow(Command):
    TYPE = "workflow.pause"


@dataclass(frozen=True)
class ResumeWorkflow(Command):
    TYPE = "workflow.resume"


@dataclass(frozen=True)
class SignalWorkflow(Command):
    """Completes a waiting WAIT task (by ref, or the oldest waiting one) with ``output``."""

    TYPE = "workflow.signal"
    ref: str | None = None
    status: str = "COMPLETED"  # or FAILED
    output: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class RestartWorkflow(Command):
    """Start a workflow in a terminal state again from its beginning, same id (Conductor's
    restart). ``input`` None keeps the input it started with; ``definition`` None keeps its
    definition, else the client resolved the latest registered one (``useLatestDefinitions``)
    and sends it with its TaskDefs and pinned sub-workflows, as a StartWorkflow does: the
    decider never looks a definition up."""

    TYPE = "workflow.restart"
    input: JSON | None = None
    definition: JSON | None = None
    taskdefs: list[JSON] = field(default_factory=list)
    subworkflow_definitions: list[JSON] = field(default_factory=list)


@dataclass(frozen=True)
class RerunWorkflow(Command):
    """Run a workflow in a terminal state again from one of its tasks (Conductor's rerun):
    ``task`` (a task id or reference name) and every task scheduled after it are reset and
    run again, the task with ``task_input`` when given; ``workflow_input`` replaces the
    workflow's input. Without ``task`` it is a restart with ``workflow_input``. The exact
    rules (forks, loops, sub-workflows) are ``domain.rerun``'s (ADR 27)."""

    TYPE = "workflow.rerun"
    task: str | None = None
    task_input: JSON | None = None
    workflow_input: JSON | None = None


@dataclass(frozen=True)
class ReviewTask(Command):
    """An operator's decision on a task parked for review (ADR 71, ``domain.review``):
    ``decision`` ``retry`` runs one more attempt, with ``input`` (the whole input, as edited)
    when given, else the last attempt's; ``fail`` fails it with ``reason``."""

    TYPE = "task.review"
    task_id: str = ""
    decision: str = ""
    input: JSON | None = None
    reason: str = ""


@dataclass(frozen=True)
class RegisterDefinition(Command):
    """Registers a workflow definition (and TaskDefs); keyed by definition name, not workflow."""

    TYPE = "definition.register"
    definition: JSON = field(default_factory=dict)
    taskdefs: list[JSON] = field(default_factory=list)


# -- runtime inputs -------------------------------------------------------------------------
@dataclass(frozen=True)
class DispatchTask(Input):
    TYPE = "dispatcher.task_dispatched"
    task_id: str = ""
    attempt: int = 1
    worker_id: str = ""
    lease_epoch: int = 1
    lease_token: str = ""


@dataclass(frozen=True)
class ExpireLease(Input):
    TYPE = "dispatcher.lease_expired"
    task_id: str = ""
    lease_epoch: int = 1


@dataclass(frozen=True)
class WorkerReport(Input):
    task_id: str = ""
    attempt: int = 1
    worker_id: str = ""
    lease_epoch: int = 1
    lease_token: str = ""


@dataclass(frozen=True)
class ReportStarted(WorkerReport):
    TYPE = "worker.task_started"


@dataclass(frozen=True)
class ReportProgress(WorkerReport):
    TYPE = "worker.task_progress"
    percent: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class ReportCompleted(WorkerReport):
    """``started`` (v2, ADR 44): the handler ran and its start was not reported on its own;
    the decider records ``task.started`` with the outcome. v1 had no such field (false)."""

    TYPE = "worker.task_completed"
    SCHEMA_VERSION = 2
    output: JSON = field(default_factory=dict)
    started: bool = False
    # The handler's log lines, ``{"at": ISO time, "log": text}``, bounded by the worker
    # (ADR 60): the decider copies them onto the outcome's event and reads nothing in them.
    logs: list[JSON] = field(default_factory=list)


@dataclass(frozen=True)
class ReportFailed(WorkerReport):
    TYPE = "worker.task_failed"
    SCHEMA_VERSION = 3  # v2 added ``started``, as ReportCompleted's; v3 ``host_fault``
    reason: str = ""
    terminal: bool = False  # FAILED_WITH_TERMINAL_ERROR
    output: JSON = field(default_factory=dict)
    started: bool = False
    logs: list[JSON] = field(default_factory=list)  # as ReportCompleted's
    traceback: str = ""  # the handler's, its last bytes as the worker bounds it (ADR 60)
    host_fault: bool = False  # the handler raised HostFault: counts against the worker (ADR 58)


@dataclass(frozen=True)
class ReportCancelled(WorkerReport):
    """The worker stopped the task (or never started it) because its lease ended: a Cancel
    record, or a lease found expired. Only an audit record: no lease is live after a cancel,
    so the decider records it and changes nothing."""

    TYPE = "worker.task_cancelled"
    reason: str = ""


@dataclass(frozen=True)
class ReportDeclined(WorkerReport):
    """The worker gives its live lease back unused (the gateway worker: no HTTP worker polled
    the task's type, ADR 24 a). The lease ends as if it expired: the task is queued again and
    its attempt is not spent."""

    TYPE = "worker.task_declined"
    reason: str = ""


@dataclass(frozen=True)
class FireTimer(Input):
    """A durable timer came due. ``kind``: retry | wait | response_timeout | total_timeout |
    workflow_timeout. A timer whose workflow moved on is ignored by the decider."""

    TYPE = "timer.fired"
    kind: str = ""
    task_id: str | None = None
    due_at: datetime | None = None


@dataclass(frozen=True)
class ChildWorkflowEnded(Input):
    TYPE = "workflow.child_ended"
    child_workflow_id: str = ""
    task_id: str = ""
    status: str = ""
    output: JSON = field(default_factory=dict)
    reason: str = ""


INPUT_TYPES: dict[str, type[Input]] = {
    cls.TYPE: cls
    for cls in (
        StartWorkflow,
        CancelWorkflow,
        TerminateWorkflow,
        RetryWorkflow,
        PauseWorkflow,
        ResumeWorkflow,
        SignalWorkflow,
        RegisterDefinition,
        DispatchTask,
        ExpireLease,
        ReportStarted,
        ReportProgress,
        ReportCompleted,
        ReportFailed,
        FireTimer,
        ChildWorkflowEnded,
        ReportCancelled,
        RestartWorkflow,
        RerunWorkflow,
        ReportDeclined,
        ReviewTask,
    )
}

dict_init(globals())  # constructors store into __dict__ (domain.fastinit)
