"""Events: every change of workflow or task state, past tense, frozen, with a full envelope.

``Event`` is the envelope (``event_id``, ``workflow_id``, ``seq``, ``occurred_at``,
``causation_id``, ``correlation_id``, optional ``actor``) around one payload class per stable
type string (``"task.completed"``). ``EVENT_TYPES`` is the one registry of those strings; the
serialization package maps it to JSON Schemas in ``schemas/events/`` and never stores Python
import paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from es_sched.domain.fastinit import dict_init

JSON = dict[str, Any]


@dataclass(frozen=True)
class Payload:
    TYPE: ClassVar[str] = ""
    SCHEMA_VERSION: ClassVar[int] = 1


# -- workflow lifecycle ---------------------------------------------------------------------
@dataclass(frozen=True)
class WorkflowStarted(Payload):
    TYPE = "workflow.started"
    definition: JSON  # the Conductor document, so replay never depends on a registry
    taskdefs: list[JSON]
    input: JSON
    priority: int = 4
    tenant: str | None = None
    command_id: str | None = None
    parent_workflow_id: str | None = None
    parent_task_id: str | None = None
    subworkflow_definitions: list[JSON] = field(default_factory=list)
    sla_tier: str | None = None  # domain.sla; absent: no tier
    deadline: datetime | None = None
    sla_retries: int | None = None  # each worker task's retries, the tier's (ADR 67)


@dataclass(frozen=True)
class WorkflowSlaAtRisk(Payload):
    """The workflow still runs with the last share of its deadline's window left (domain.sla)."""

    TYPE = "workflow.sla_at_risk"
    sla_tier: str | None
    deadline: datetime


@dataclass(frozen=True)
class WorkflowSlaBreached(Payload):
    """The workflow's deadline passed before it ended (domain.sla)."""

    TYPE = "workflow.sla_breached"
    sla_tier: str | None
    deadline: datetime


@dataclass(frozen=True)
class WorkflowCompleted(Payload):
    TYPE = "workflow.completed"
    output: JSON
    reason: str = ""  # set when a TERMINATE task completed the workflow


@dataclass(frozen=True)
class WorkflowEnding(Payload):
    """The workflow will end in ``status``; CALLBACK tasks run first, then the final event."""

    TYPE = "workflow.ending"
    status: str  # FAILED | TIMED_OUT | TERMINATED | CANCELED
    reason: str
    output: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowEnded(Payload):
    """Final event of a workflow that did not complete (after its callbacks ran)."""

    TYPE = "workflow.ended"
    status: str
    reason: str
    output: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class WorkflowPaused(Payload):
    TYPE = "workflow.paused"


@dataclass(frozen=True)
class WorkflowResumed(Payload):
    TYPE = "workflow.resumed"


@dataclass(frozen=True)
class WorkflowRetried(Payload):
    TYPE = "workflow.retried"
    from_status: str


@dataclass(frozen=True)
class VariablesSet(Payload):
    TYPE = "workflow.variables_set"
    variables: JSON


@dataclass(frozen=True)
class WorkflowStartRequested(Payload):
    """A START_WORKFLOW task, a SUB_WORKFLOW task or failureWorkflow asks for a new workflow."""

    TYPE = "workflow.start_requested"
    child_workflow_id: str
    name: str
    version: int | None
    input: JSON
    task_id: str | None = None  # set for SUB_WORKFLOW: the parent task waiting on the child
    definition: JSON | None = None  # an inline definition (subWorkflowParam.workflowDefinition)


@dataclass(frozen=True)
class CommandRejected(Payload):
    TYPE = "command.rejected"
    command_id: str
    command_type: str
    reason: str


# -- tasks ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskScheduled(Payload):
    TYPE = "task.scheduled"
    SCHEMA_VERSION = 2  # v2 added rate_limit_key and callback (see serialization.upcasters)
    task_id: str
    ref: str  # with the __N suffix inside a DO_WHILE
    def_ref: str  # the taskReferenceName in the definition
    task_type: str  # Conductor's execution type: FORK for FORK_JOIN, the name for SIMPLE
    name: str
    attempt: int
    input: JSON
    iteration: int = 0
    status: str = "SCHEDULED"  # IN_PROGRESS for system tasks that wait (JOIN, DO_WHILE, WAIT)
    priority: int = 4
    resources: JSON = field(default_factory=dict)
    rate_limit_key: str | None = None
    wait_until: datetime | None = None
    dynamic_tasks: list[JSON] = field(default_factory=list)
    callback: bool = False
    # The total timeout this attempt uses and where it came from, for a task whose settings
    # ask for a dynamic one (``domain.timeouts``, ADR 65); {} otherwise. What the timers and
    # replay read, never the stats topic again.
    timeout: JSON = field(default_factory=dict)


@dataclass(frozen=True)
class TaskDispatched(Payload):
    TYPE = "task.dispatched"
    task_id: str
    attempt: int
    worker_id: str
    lease_epoch: int
    lease_token: str


@dataclass(frozen=True)
class TaskStarted(Payload):
    TYPE = "task.started"
    task_id: str
    worker_id: str


@dataclass(frozen=True)
class TaskProgressed(Payload):
    TYPE = "task.progressed"
    task_id: str
    percent: float
    message: str = ""


@dataclass(frozen=True)
class TaskCompleted(Payload):
    TYPE = "task.completed"
    task_id: str
    output: JSON
    logs: list[JSON] = field(default_factory=list)  # the worker's log lines (ADR 60)


@dataclass(frozen=True)
class TaskCompletedWithErrors(Payload):
    """An optional task that ran out of retries, or a JOIN over one: the workflow goes on."""

    TYPE = "task.completed_with_errors"
    task_id: str
    output: JSON | None = None  # None keeps the output the task already has


@dataclass(frozen=True)
class TaskFailed(Payload):
    TYPE = "task.failed"
    SCHEMA_VERSION = 2  # v2 added host_fault (see serialization.upcasters)
    task_id: str
    reason: str
    terminal: bool = False  # FAILED_WITH_TERMINAL_ERROR: never retried
    output: JSON = field(default_factory=dict)
    # The worker's log lines and its handler's traceback, as it bounded them (ADR 60): kept
    # in the log and the read model's event archive, never in the decider's state.
    logs: list[JSON] = field(default_factory=list)
    traceback: str = ""
    host_fault: bool = False  # its worker's host failed, not the input (ADR 58)


@dataclass(frozen=True)
class TaskTimedOut(Payload):
    TYPE = "task.timed_out"
    task_id: str
    kind: str  # response | total


@dataclass(frozen=True)
class TaskCanceled(Payload):
    TYPE = "task.canceled"
    task_id: str
    reason: str


@dataclass(frozen=True)
class TaskRetryScheduled(Payload):
    TYPE = "task.retry_scheduled"
    task_id: str  # the failed attempt
    next_attempt: int
    delay_seconds: float
    due_at: datetime


@dataclass(frozen=True)
class LeaseExpired(Payload):
    """The worker holding the task stopped heartbeating; the task goes back to its queue."""

    TYPE = "task.lease_expired"
    task_id: str
    lease_epoch: int


@dataclass(frozen=True)
class LoopIterated(Payload):
    TYPE = "task.loop_iterated"
    task_id: str  # the DO_WHILE task
    iteration: int  # the iteration that starts now
    output: JSON


@dataclass(frozen=True)
class CompletionRejected(Payload):
    """A worker report that cannot be accepted: stale attempt, wrong lease, unknown task."""

    TYPE = "task.completion_rejected"
    task_id: str
    attempt: int
    worker_id: str
    reason: str


@dataclass(frozen=True)
class TaskRequeued(Payload):
    """The reconciler queued the task again (ADR 15): it was still SCHEDULED and unleased a
    whole ``ES_SCHED_RUN_REQUEUE_AFTER_S`` after it was last queued, so its ready record may
    be lost (dead-lettered, or gone with the ready topic's retention)."""

    TYPE = "task.requeued"
    task_id: str
    attempt: int


@dataclass(frozen=True)
class WorkflowRejected(Payload):
    """An input refused for a workflow id that has no history: a StartWorkflow that cannot
    start (no definition, or one that fails validation), or any other input for a workflow
    that does not exist. Written outside every history (``seq`` 0, see
    ``domain.refusals``): it answers the sender and changes no state."""

    TYPE = "workflow.rejected"
    command_id: str
    command_type: str
    reason: str
    name: str | None = None  # a StartWorkflow's definition name and version, as sent
    version: int | None = None
    problems: list[str] = field(default_factory=list)  # every validation problem


@dataclass(frozen=True)
class TaskCancelConfirmed(Payload):
    """A worker says it stopped (or never started) a task whose lease ended. Audit only: it is
    not an outcome and changes no state, whatever lease it names."""

    TYPE = "task.cancel_confirmed"
    task_id: str
    attempt: int
    worker_id: str
    lease_epoch: int
    reason: str


@dataclass(frozen=True)
class WorkflowRestarted(Payload):
    """A workflow in a terminal state starts again from its beginning (same id). Every newest
    task instance (``reset``) stops being current and keeps its history; the tasks run again
    as new instances with new ids. ``input`` is the input it runs with now; ``definition``
    (with its TaskDefs and sub-workflows) is set when the restart uses another definition."""

    TYPE = "workflow.restarted"
    from_status: str
    input: JSON
    reset: list[str]  # task ids of the instances that are no longer current
    definition: JSON | None = None
    taskdefs: list[JSON] = field(default_factory=list)
    subworkflow_definitions: list[JSON] = field(default_factory=list)


@dataclass(frozen=True)
class WorkflowRerun(Payload):
    """A workflow in a terminal state runs again from ``task_id``'s reference: that instance
    and the ones in ``reset`` (every instance scheduled after it, and the JOINs and loops
    around it, ``domain.rerun``) stop being current; they run again as new instances."""

    TYPE = "workflow.rerun_started"
    from_status: str
    task_id: str  # the instance the rerun starts from (itself in ``reset``)
    input: JSON  # the workflow's input from now on
    reset: list[str]


@dataclass(frozen=True)
class TaskParkedForReview(Payload):
    """A task out of retries whose policy says ``onExhausted: REVIEW`` (ADR 71): it waits for
    an operator instead of failing its workflow, which stays RUNNING."""

    TYPE = "task.parked_for_review"
    task_id: str  # the last failed attempt
    reason: str  # why that attempt failed
    attempts: int


@dataclass(frozen=True)
class TaskReviewed(Payload):
    """An operator's decision on a parked task (ADR 71): ``retry`` (one more attempt follows,
    with ``input`` when the operator edited it, else the last attempt's) or ``fail`` (the
    task ends FAILED_WITH_TERMINAL_ERROR and its workflow goes on as after any failure)."""

    TYPE = "task.reviewed"
    task_id: str
    decision: str  # retry | fail
    reason: str = ""
    input: JSON | None = None


EVENT_TYPES: dict[str, type[Payload]] = {
    cls.TYPE: cls
    for cls in (
        WorkflowStarted,
        WorkflowCompleted,
        WorkflowEnding,
        WorkflowEnded,
        WorkflowPaused,
        WorkflowResumed,
        WorkflowRetried,
        VariablesSet,
        WorkflowStartRequested,
        CommandRejected,
        TaskScheduled,
        TaskDispatched,
        TaskStarted,
        TaskProgressed,
        TaskCompleted,
        TaskCompletedWithErrors,
        TaskFailed,
        TaskTimedOut,
        TaskCanceled,
        TaskRetryScheduled,
        LeaseExpired,
        LoopIterated,
        CompletionRejected,
        TaskRequeued,
        WorkflowRejected,
        TaskCancelConfirmed,
        WorkflowRestarted,
        WorkflowRerun,
        TaskParkedForReview,
        TaskReviewed,
        WorkflowSlaAtRisk,
        WorkflowSlaBreached,
    )
}


@dataclass(frozen=True)
class Event:
    event_id: str
    workflow_id: str
    seq: int
    occurred_at: datetime
    causation_id: str
    correlation_id: str
    payload: Payload
    # Who caused it: the ``actor`` of the command it answers (``cli:alice``, an API key's
    # name), kept on every event that command caused, refusals included; None for runtime
    # inputs and for events written before actors existed. Envelope, not payload: it says
    # who asked, whatever the event type, and leaves every payload schema as it was.
    actor: str | None = None

    @property
    def type(self) -> str:
        return self.payload.TYPE

    @property
    def schema_version(self) -> int:
        return self.payload.SCHEMA_VERSION


dict_init(globals())  # constructors store into __dict__ (domain.fastinit)
