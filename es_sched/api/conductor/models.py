"""Conductor's JSON shapes, and the read model's rows translated into them.

Field names and types are Conductor's (``common/metadata/run/Workflow``, ``.../tasks/Task``,
``run/WorkflowSummary``, ``run/SearchResult``, ``common/model/BulkResponse``), so its SDKs
deserialize our answers unchanged. Times in ``Workflow`` and ``Task`` are epoch milliseconds
(0 when not yet, as Conductor's ``long`` fields are); ``WorkflowSummary`` carries them as ISO
8601 text and ``input``/``output`` as JSON text, as Conductor's does.

es-sched's ``CANCELED`` workflow status has no Conductor counterpart (its SDK refuses unknown
statuses): it reads as ``TERMINATED``, whose reason says it was a cancel. A row's input or
output too large to copy into the read model stays the ``{"$ref": "event", ...}`` reference
to the archived event (``es_sched.projections.views``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from es_sched.api import correlation
from es_sched.api.sla import SlaRequest
from es_sched.projections.views import Row

JSON = dict[str, Any]
CONDUCTOR_STATUS = {"CANCELED": "TERMINATED"}
TERMINAL_TASK = frozenset(
    {
        "COMPLETED",
        "COMPLETED_WITH_ERRORS",
        "FAILED",
        "FAILED_WITH_TERMINAL_ERROR",
        "TIMED_OUT",
        "CANCELED",
        "SKIPPED",
    }
)
UNSUCCESSFUL_TASK = frozenset({"FAILED", "FAILED_WITH_TERMINAL_ERROR", "TIMED_OUT", "CANCELED"})
# es-sched task statuses Conductor has no name for, as its clients must read them (their SDKs
# refuse an unknown task status): a task parked for review (ADR 71) waits for a person, as a
# Conductor HUMAN task does while IN_PROGRESS; its reason says why it waits.
CONDUCTOR_TASK_STATUS = {"PARKED_FOR_REVIEW": "IN_PROGRESS"}


class StartWorkflowRequest(SlaRequest):
    """Conductor's ``StartWorkflowRequest``; fields es-sched cannot honour are refused by the
    route with a reason, not dropped (``taskToDomain``, ``workflowDef``, external storage)."""

    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1)
    version: int | None = None
    correlationId: str | None = None
    input: JSON = Field(default_factory=dict)
    priority: int | None = Field(default=None, ge=0, le=99)
    taskToDomain: dict[str, str] | None = None
    workflowDef: JSON | None = None
    externalInputPayloadStoragePath: str | None = None
    idempotencyKey: str | None = None
    idempotencyStrategy: str | None = None
    createdBy: str | None = None


class Task(BaseModel):
    taskId: str
    taskType: str
    taskDefName: str
    referenceTaskName: str
    status: str
    inputData: Any
    outputData: Any
    retryCount: int
    seq: int
    pollCount: int
    workerId: str | None
    scheduledTime: int
    startTime: int
    endTime: int
    updateTime: int
    reasonForIncompletion: str | None
    workflowInstanceId: str
    workflowType: str
    correlationId: str | None
    workflowPriority: int
    iteration: int
    retried: bool
    executed: bool
    callbackAfterSeconds: int


class Workflow(BaseModel):
    workflowId: str
    workflowName: str
    workflowVersion: int
    status: str
    input: Any
    output: Any
    correlationId: str | None
    reasonForIncompletion: str | None
    createTime: int
    startTime: int
    updateTime: int
    endTime: int
    priority: int
    parentWorkflowId: str | None
    tasks: list[Task]
    failedReferenceTaskNames: list[str]
    failedTaskNames: list[str]
    taskToDomain: dict[str, str]
    variables: JSON


class WorkflowSummary(BaseModel):
    workflowType: str
    version: int
    workflowId: str
    correlationId: str | None
    startTime: str
    updateTime: str
    endTime: str
    status: str
    input: str
    output: str
    reasonForIncompletion: str | None
    executionTime: int
    failedReferenceTaskNames: str
    priority: int


class SearchResultWorkflowSummary(BaseModel):
    totalHits: int
    results: list[WorkflowSummary]


class BulkResponse(BaseModel):
    bulkErrorResults: dict[str, str] = Field(default_factory=dict)
    bulkSuccessfulResults: list[str] = Field(default_factory=list)


def epoch_ms(when: datetime | None) -> int:
    return 0 if when is None else int(when.timestamp() * 1000)


def iso(when: datetime | None) -> str:
    """Conductor's summary time format (``yyyy-MM-dd'T'HH:mm:ss.SSS'Z'``); '' when not yet."""
    if when is None:
        return ""
    # Fields formatted by hand, truncated to milliseconds as Conductor does: cheaper than
    # isoformat, an f-string or strftime, paid three times per row of a search (ADR 38). The
    # reads ask PostgreSQL for UTC (``aio``).
    if when.tzinfo is not UTC:
        when = when.astimezone(UTC)
    return "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ" % (  # noqa: UP031 - the fastest, above
        when.year,
        when.month,
        when.day,
        when.hour,
        when.minute,
        when.second,
        when.microsecond // 1000,
    )


def workflow_status(status: str) -> str:
    return CONDUCTOR_STATUS.get(status, status)


def task(row: Row, seq: int, wf: Row) -> Task:
    times = [row.get(k) for k in ("scheduled_at", "started_at", "ended_at")]
    return Task(
        taskId=row["task_id"],
        taskType=row["task_type"],
        taskDefName=row["name"],
        referenceTaskName=row["ref"],
        status=CONDUCTOR_TASK_STATUS.get(row["status"], row["status"]),
        inputData=row.get("input") or {},
        outputData=row.get("output") or {},
        retryCount=max(int(row.get("attempt") or 1) - 1, 0),
        seq=seq,
        pollCount=1 if row.get("started_at") else 0,
        workerId=row.get("worker_id"),
        scheduledTime=epoch_ms(row.get("scheduled_at")),
        startTime=epoch_ms(row.get("started_at")),
        endTime=epoch_ms(row.get("ended_at")),
        updateTime=max(epoch_ms(t) for t in times),
        reasonForIncompletion=row.get("reason") or None,
        workflowInstanceId=wf["workflow_id"],
        workflowType=wf["name"],
        correlationId=correlation.given(wf),
        workflowPriority=int(wf.get("priority") or 0),
        iteration=int(row.get("iteration") or 0),
        retried=bool(row.get("retried")),
        executed=row["status"] in TERMINAL_TASK,
        callbackAfterSeconds=0,
    )


def _failed(tasks: list[Row]) -> list[Row]:
    """Tasks whose last attempt did not succeed (a retried attempt is not a failure yet)."""
    return [t for t in tasks if t["status"] in UNSUCCESSFUL_TASK and not t.get("retried")]


def workflow(row: Row, tasks: list[Row], include_tasks: bool = True) -> Workflow:
    failed = _failed(tasks)
    return Workflow(
        workflowId=row["workflow_id"],
        workflowName=row["name"],
        workflowVersion=int(row["def_version"]),
        status=workflow_status(row["status"]),
        input=row.get("input") or {},
        output=row.get("output") or {},
        correlationId=correlation.given(row),
        reasonForIncompletion=row.get("reason") or None,
        createTime=epoch_ms(row["created_at"]),
        startTime=epoch_ms(row["created_at"]),
        updateTime=epoch_ms(row.get("updated_at")),
        endTime=epoch_ms(row.get("ended_at")),
        priority=int(row.get("priority") or 0),
        parentWorkflowId=row.get("parent_workflow_id"),
        tasks=[task(t, i + 1, row) for i, t in enumerate(tasks)] if include_tasks else [],
        failedReferenceTaskNames=sorted({t["ref"] for t in failed}),
        failedTaskNames=sorted({t["name"] for t in failed}),
        taskToDomain={},
        variables={},
    )


def summary(row: Row) -> dict[str, Any]:
    """A ``WorkflowSummary`` as the JSON object search answers (``test_conductor_models``
    holds it to the model). Plain data, not the model: building and validating a model per
    row, then dumping it, was the largest part of a search's CPU (ADR 38)."""
    created, ended = row["created_at"], row.get("ended_at")
    return {
        "workflowType": row["name"],
        "version": int(row["def_version"]),
        "workflowId": row["workflow_id"],
        "correlationId": correlation.given(row),
        "startTime": iso(created),
        "updateTime": iso(row.get("updated_at")),
        "endTime": iso(ended),
        "status": workflow_status(row["status"]),
        "input": orjson.dumps(row.get("input") or {}).decode(),
        "output": orjson.dumps(row.get("output") or {}).decode(),
        "reasonForIncompletion": row.get("reason") or None,
        "executionTime": epoch_ms(ended) - epoch_ms(created) if ended else 0,
        "failedReferenceTaskNames": "",
        "priority": int(row.get("priority") or 0),
    }
