"""The native API's request and response bodies (pydantic v2), so ``/openapi.json`` documents
every field. Requests refuse unknown fields (``extra="forbid"``): a misspelt option is a 400
naming it, never silently ignored. Field names are camelCase on the wire, like Conductor's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from es_sched.api.sla import SlaRequest
from es_sched.projections.views import Row

JSON = dict[str, Any]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SubmitRequest(Strict, SlaRequest):
    name: str = Field(min_length=1, max_length=256)
    version: int | None = Field(default=None, ge=1, description="None: the latest version")
    input: JSON = Field(default_factory=dict)
    priority: int = Field(default=4, ge=0, le=9, description="0 runs first")
    tenant: str | None = Field(default=None, max_length=256)
    correlationId: str | None = Field(default=None, max_length=256)
    idempotencyKey: str | None = Field(
        default=None,
        min_length=1,
        max_length=256,
        description="The command id: a resubmit with the same key answers the same workflow",
    )


class Freshness(BaseModel):
    """Which events the answer reflects, and how far behind the log that is."""

    topic: str
    reflects: dict[int, int] = Field(description="partition -> next events offset reflected")
    lag: dict[int, int] = Field(description="partition -> events not reflected yet")
    lagging: bool
    endsReadAt: datetime = Field(
        description="when the log's ends the lag is measured to were read (kept in the "
        "background); every event the log held then counts, later ones may not"
    )
    endsAgeMs: float = Field(description="how long before this answer the ends were read")


class Submitted(BaseModel):
    workflowId: str
    commandId: str
    token: str | None = Field(
        description="PARTITION:OFFSET of the command; pass it as ?after= to read your write"
    )


class Task(BaseModel):
    taskId: str
    ref: str
    name: str
    taskType: str
    status: str
    attempt: int
    iteration: int
    workerId: str | None
    reason: str
    progress: float
    input: Any
    output: Any
    scheduledAt: datetime
    startedAt: datetime | None
    endedAt: datetime | None


def task_of(t: Row) -> Task:
    return Task(
        taskId=t["task_id"],
        ref=t["ref"],
        name=t["name"],
        taskType=t["task_type"],
        status=t["status"],
        attempt=t["attempt"],
        iteration=t["iteration"],
        workerId=t["worker_id"],
        reason=t["reason"],
        progress=t["progress"],
        input=t["input"],
        output=t["output"],
        scheduledAt=t["scheduled_at"],
        startedAt=t["started_at"],
        endedAt=t["ended_at"],
    )


class LogLine(BaseModel):
    at: str = Field(default="", description="ISO 8601 time the worker took the line")
    log: str


class TaskLog(BaseModel):
    """What a worker sent with a task attempt's outcome (ADR 60): its log lines, bounded
    (``ES_SCHED_WORKER_LOG_MAX_CHARS``), and a failed handler's traceback (its last
    ``ES_SCHED_WORKER_TRACEBACK_MAX_CHARS`` characters)."""

    taskId: str
    workflowId: str
    status: str
    reason: str = Field(description="the whole reason of a failure, empty otherwise")
    ended: bool = Field(description="false: no outcome yet, so no lines yet")
    logs: list[LogLine]
    traceback: str


class Workflow(BaseModel):
    workflowId: str
    name: str
    version: int
    status: str
    priority: int
    tenant: str | None
    correlationId: str | None  # None when the start gave none (Conductor's null)
    parentWorkflowId: str | None
    reason: str
    input: Any
    output: Any
    createdAt: datetime
    updatedAt: datetime
    endedAt: datetime | None
    seq: int = Field(description="seq of the last event the row reflects")
    tasks: list[Task] | None = None


class WorkflowAnswer(BaseModel):
    workflow: Workflow
    freshness: Freshness


class WorkflowList(BaseModel):
    total: int
    start: int
    results: list[Workflow]
    freshness: Freshness


class Queue(BaseModel):
    taskType: str
    priority: int
    depth: int = Field(description="SCHEDULED tasks no lease holds")
    leased: int = Field(description="SCHEDULED tasks leased to a worker, not started yet")
    oldestScheduledAt: datetime | None
    oldestAgeS: float | None
    unplaceable: str | None = Field(
        default=None,
        description="why no worker can take its tasks now, e.g. "
        '"pool media: 1 worker, blacklisted until 02:05: 6 of 10 failed"',
    )
    unplaceableReason: str | None = Field(
        default=None,
        description="no_worker | blacklisted | banned | version_stopped | not_alive | mixed",
    )


class Queues(BaseModel):
    queues: list[Queue]
    freshness: Freshness


class BlacklistInfo(BaseModel):
    since: datetime
    until: datetime
    why: str = Field(description='e.g. "6 of 10 failed": its own faults of its recent outcomes')
    failures: list[JSON] = Field(description="taskId, reason, at and fault of each")
    decidedBy: str = Field(description="the dispatcher that decided it")


class WorkerInfo(BaseModel):
    workerId: str
    pool: str
    version: str
    types: list[str]
    capacity: JSON = Field(description="what the worker declared: cpu, memoryMb, gpus, slots")
    used: JSON = Field(description="declared needs of the tasks it runs, summed")
    running: list[str]
    lastHeartbeat: datetime | None
    health: str = Field(description="alive | suspect | dead, by the dispatcher's thresholds")
    banned: bool = Field(description="its version is banned on the config topic")
    blacklisted: bool = Field(
        description="a blacklisting is in force: no new task until it ends or is lifted (ADR 58)"
    )
    blacklist: BlacklistInfo | None = Field(
        default=None, description="the blacklisting in force: why and until when"
    )
    liftedAt: datetime | None = Field(default=None, description="its last blacklisting's lift")
    liftedBy: str | None = None
    versionStopped: dict[str, str] = Field(
        default_factory=dict,
        description="task type -> why its version may take none of that type's tasks (ADR 70)",
    )


class Lift(BaseModel):
    workerId: str
    liftedAt: datetime
    by: str


class Seen(BaseModel):
    failureRate: float
    outcomes: int
    failures: int
    windowEnd: str = Field(description="the end of the analytics role's window")


class RolloutInfo(BaseModel):
    taskType: str
    candidate: str
    current: str
    state: str = Field(description="rolling | promoted | stopped")
    share: float = Field(description="the candidate's share while rolling")
    given: float = Field(description="the share the candidate receives now")
    margin: float
    minSamples: int
    at: datetime = Field(description="when this state began")
    by: str = Field(description="the operator, or the dispatcher that decided")
    why: str
    seenCandidate: Seen | None = None
    seenCurrent: Seen | None = None
    reverted: str | None = Field(default=None, description="the decision a revert undid")


class RolloutStart(BaseModel):
    taskType: str = Field(min_length=1, max_length=200)
    candidate: str = Field(min_length=1, max_length=200)
    current: str = Field(min_length=1, max_length=200)
    share: float = Field(gt=0, le=1, description="of the type's tasks, to the candidate")
    margin: float = Field(default=0.05, ge=0, le=1)
    minSamples: int = Field(default=20, ge=1)


class VersionStopInfo(BaseModel):
    taskType: str
    version: str
    state: str = Field(description="stopped | lifted")
    at: datetime
    by: str
    why: str
    seen: Seen | None = None
    maxFailureRate: float | None = None


class VersionRuleInfo(BaseModel):
    taskType: str = Field(description="a task type, or * for every type")
    maxFailureRate: float
    minSamples: int


class Workers(BaseModel):
    workers: list[WorkerInfo]
    rollouts: list[RolloutInfo] = Field(default_factory=list)
    versionStops: list[VersionStopInfo] = Field(default_factory=list)
    versionRules: list[VersionRuleInfo] = Field(default_factory=list)
    topic: str
    readUpTo: dict[int, int]
    readAgeMs: float = Field(description="how long before this answer the fleet was read")


class HistoryEvent(BaseModel):
    seq: int
    eventId: str
    type: str
    occurredAt: datetime
    causationId: str
    payload: Any
    kafkaPartition: int
    kafkaOffset: int


class History(BaseModel):
    workflowId: str
    start: int
    nextStart: int | None
    events: list[HistoryEvent]
    freshness: Freshness


class Difference(BaseModel):
    kind: str
    id: str
    field: str
    log: Any
    store: Any


class Verified(BaseModel):
    workflowId: str
    equal: bool
    events: int
    differences: list[Difference]
    freshness: Freshness


class ConfigSettings(BaseModel):
    settings: dict[str, JSON] = Field(description="config key -> value in force")


class ConfigValue(BaseModel):
    key: str
    value: JSON | None


class RoleProcess(BaseModel):
    """One role process as its liveness record on ``<prefix>.system`` says (ADR 61)."""

    deployment: str
    role: str
    instance: str
    host: str
    pid: int
    version: str
    startedAt: datetime
    lastSeen: datetime
    silentS: float = Field(description="seconds since the record was last renewed")
    partitions: list[str] = Field(description='"topic[p]" its consumer holds')
    lag: int | None = Field(description="records its consumer has not read yet; None: none")
    health: str = Field(description="alive | stale (not renewed in staleAfterS) | stopped")
    foreign: bool = Field(description="of another deployment than this API's")


class System(BaseModel):
    deployment: str = Field(description="this API process's deployment id")
    topic: str
    intervalS: float
    staleAfterS: float
    processes: list[RoleProcess]


class ReviewRequest(Strict):
    """An operator's decision on a task parked for review (ADR 71)."""

    decision: Literal["retry", "fail"]
    input: JSON | None = Field(
        default=None,
        description="retry only: the whole input of the next attempt, as edited; "
        "absent: the parked attempt's input",
    )
    reason: str = Field(default="", max_length=2000)
    idempotencyKey: str | None = Field(default=None, min_length=1, max_length=256)


class ParkedTask(BaseModel):
    workflowId: str
    workflowName: str
    workflowStatus: str
    task: Task


class ReviewQueue(BaseModel):
    tasks: list[ParkedTask]
