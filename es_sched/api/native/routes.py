"""The native API under ``/api/v1`` (issue 14 item 2).

Writes are commands through ``CommandClient`` that answer once the read model shows the
decider's verdict (``es_sched.api.writes``, ADR 56), with the command's read-your-writes
token; reads come from the PostgreSQL read model, wait for ``?after=TOKEN`` when given, and
carry ``freshness`` (the offsets the rows reflect and the lag behind the log). The operations
views (queues, workers, config) and the audit of one workflow are in sibling modules, included
here so ``app.py`` keeps one router per part.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Query

from es_sched.api import correlation, writes
from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.fleet import Fleet, read_fleet
from es_sched.api.native import audit, config, ops, review, system
from es_sched.api.native.models import (
    History,
    HistoryEvent,
    Queue,
    Queues,
    SubmitRequest,
    Submitted,
    TaskLog,
    Workflow,
    WorkflowAnswer,
    WorkflowList,
    task_of,
)
from es_sched.api.read_model_freshness import freshness_of, wait_after
from es_sched.api.services import Services, services
from es_sched.commands.prepare import UnknownDefinition
from es_sched.projections.postgres import queries
from es_sched.projections.views import Row

router = APIRouter(prefix="/api/v1", tags=["native"])
VIEWER = require("viewer")
OPERATOR = require("operator")
SVC = Depends(services)
Many = Annotated[list[str] | None, Query()]  # repeat the parameter for several values


@router.post("/workflows", status_code=201, response_model=Submitted)
def submit(body: SubmitRequest, svc: Services = SVC, who: Principal = OPERATOR) -> Submitted:
    """Start a workflow; answers once the decider accepted it and the read model has it (a
    refusal is a 400 with the decider's reason)."""
    try:
        done = svc.commands.get().submit(
            body.name,
            body.input,
            body.version,
            body.priority,
            body.tenant,
            command_id=body.idempotencyKey,
            correlation_id=body.correlationId,
            actor=who.name,
            sla_tier=body.slaTier,
            deadline=body.deadline_at(),
        )
    except UnknownDefinition as exc:
        raise writes.unknown_definition(exc) from None
    verdict = writes.started(svc, done)
    return Submitted(workflowId=done.workflow_id, commandId=done.command_id, token=verdict.token)


@router.get("/workflows/{workflow_id}", response_model=WorkflowAnswer)
def get_workflow(
    workflow_id: str,
    after: str | None = Query(None, description="a submit's token: wait until it is reflected"),
    tasks: bool = Query(True, description="include the task rows"),
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> WorkflowAnswer:
    wait_after(svc, after)
    fresh = freshness_of(svc)
    row, task_rows = queries.workflow(svc.engine, workflow_id)
    if row is None:
        raise ApiError(
            404, f"no workflow {workflow_id} in the read model (reflecting {fresh.reflects})"
        )
    return WorkflowAnswer(workflow=workflow_of(row, task_rows if tasks else None), freshness=fresh)


@router.get("/workflows", response_model=WorkflowList)
def list_workflows(
    name: Many = None,
    version: Annotated[list[int] | None, Query()] = None,
    status: Many = None,
    tenant: Many = None,
    correlationId: Many = None,
    start: int = Query(0, ge=0),
    size: int = Query(100, ge=1, le=1000),
    after: str | None = Query(None, description="a submit's token: wait until it is reflected"),
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> WorkflowList:
    wait_after(svc, after)
    fresh = freshness_of(svc)
    f = queries.WorkflowFilter(
        names=tuple(name or ()),
        versions=tuple(version or ()),
        statuses=tuple(status or ()),
        tenants=tuple(tenant or ()),
        correlation_ids=tuple(correlationId or ()),
    )
    total, rows = queries.search_workflows(svc.engine, f, start, size)
    return WorkflowList(
        total=total, start=start, results=[workflow_of(r, None) for r in rows], freshness=fresh
    )


@router.get("/queues", response_model=Queues)
def get_queues(svc: Services = SVC, who: Principal = VIEWER) -> Queues:
    """Backlog per task type and priority (``queries.queues`` says what "queued" means)."""
    fresh = freshness_of(svc)
    rows = queues_of(queries.queues(svc.engine), fleet=read_fleet(svc))
    return Queues(queues=rows, freshness=fresh)


@router.get("/workflows/{workflow_id}/history", response_model=History)
def get_history(
    workflow_id: str,
    start: int = Query(0, ge=0, description="the first seq"),
    size: int = Query(100, ge=1, le=1000),
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> History:
    """The workflow's events as archived by the PostgreSQL projector, by seq, one page."""
    fresh = freshness_of(svc)
    rows = queries.history(svc.engine, workflow_id, start, size)
    if not rows and start == 0:
        raise ApiError(404, f"no events of workflow {workflow_id} in the archive")
    events = [history_event(r) for r in rows]
    following = events[-1].seq + 1 if len(events) == size else None
    return History(
        workflowId=workflow_id, start=start, nextStart=following, events=events, freshness=fresh
    )


@router.get("/tasks/{task_id}/log", response_model=TaskLog)
def get_task_log(task_id: str, svc: Services = SVC, who: Principal = VIEWER) -> TaskLog:
    """A task attempt's log lines and traceback, as its outcome carried them (ADR 60)."""
    row = queries.task_row(svc.engine, task_id)
    if row is None:
        raise ApiError(404, f"no task {task_id!r} in the read model (yet)")
    workflow_id = str(row["workflow_id"])
    ended = queries.task_outcomes(svc.engine, workflow_id, [task_id]).get(task_id)
    return TaskLog(
        taskId=task_id,
        workflowId=workflow_id,
        status=row["status"],
        reason=row["reason"],
        ended=ended is not None,
        logs=ended["logs"] if ended else [],
        traceback=ended["traceback"] if ended else "",
    )


def workflow_of(row: Row, tasks: list[Row] | None) -> Workflow:
    return Workflow(
        workflowId=row["workflow_id"],
        name=row["name"],
        version=row["def_version"],
        status=row["status"],
        priority=row["priority"],
        tenant=row["tenant"],
        correlationId=correlation.given(row),
        parentWorkflowId=row["parent_workflow_id"],
        reason=row["reason"],
        input=row["input"],
        output=row["output"],
        createdAt=row["created_at"],
        updatedAt=row["updated_at"],
        endedAt=row["ended_at"],
        seq=row["version"],
        tasks=None if tasks is None else [task_of(t) for t in tasks],
    )


def queues_of(
    rows: list[Row], now: datetime | None = None, fleet: Fleet | None = None
) -> list[Queue]:
    """The read model's queues; with ``fleet``, why a queue with tasks waiting has no eligible
    worker (``Fleet.why_unplaceable``)."""
    now = now or datetime.now(UTC)
    out = []
    for r in rows:
        why = fleet.why_unplaceable(r["task_type"]) if fleet and r["depth"] else None
        out.append(
            Queue(
                taskType=r["task_type"],
                priority=r["priority"],
                depth=r["depth"],
                leased=r["leased"],
                oldestScheduledAt=r["oldest"],
                oldestAgeS=None if r["oldest"] is None else (now - r["oldest"]).total_seconds(),
                unplaceable=None if why is None else why[1],
                unplaceableReason=None if why is None else why[0],
            )
        )
    return out


def history_event(r: Row) -> HistoryEvent:
    return HistoryEvent(
        seq=r["seq"],
        eventId=r["event_id"],
        type=r["type"],
        occurredAt=r["occurred_at"],
        causationId=r["causation_id"],
        payload=r["payload"],
        kafkaPartition=r["kafka_partition"],
        kafkaOffset=r["kafka_offset"],
    )


for _part in (audit, config, ops, review, system):
    router.include_router(_part.router)
