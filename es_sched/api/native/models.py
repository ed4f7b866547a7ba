"""The native API's request and response bodies (pydantic v2), so ``/openapi.json`` documents
every field. Requests refuse unknown fields (``extra="forbid"``): a misspelt option is a 400
naming it, never silently ignored. Field names are camelCase on the wire, like Conductor's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from es_sched.api.sla import SlaRequest

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
        default=None, description="no_worker | blacklisted | banned | not_alive | mixed"
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


class Lift(BaseModel):
    workerId: str
    liftedAt: datetime
    by: str


class Workers(BaseModel):
    workers: list[WorkerInfo]
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
