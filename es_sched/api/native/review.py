"""The review queue (ADR 71): ``GET /api/v1/review`` lists the tasks parked for an operator;
``POST /api/v1/workflows/{id}/tasks/{task_id}/review`` retries one (with edited input, or the
parked attempt's) or fails it.

The decision is the ``task.review`` command through the decider, which alone says whether the
task is still parked (``domain.review``); the answer comes once the read model shows its
verdict (``es_sched.api.writes``, ADR 56): 409 with the decider's reason when refused, 404 for
a workflow with no history. The queue is read from the PostgreSQL read model.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends

from es_sched.api import writes
from es_sched.api.auth import Principal, require
from es_sched.api.native.models import (
    ParkedTask,
    ReviewQueue,
    ReviewRequest,
    Submitted,
    task_of,
)
from es_sched.api.services import Services, services
from es_sched.projections.postgres import queries
from es_sched.projections.views import Row

router = APIRouter()
VIEWER = require("viewer")
OPERATOR = require("operator")
SVC = Depends(services)


@router.get("/review", response_model=ReviewQueue)
def review_queue(svc: Services = SVC, who: Principal = VIEWER) -> ReviewQueue:
    return ReviewQueue(tasks=[parked_of(r) for r in queries.parked_tasks(svc.engine)])


@router.post("/workflows/{workflow_id}/tasks/{task_id}/review", response_model=Submitted)
def review_task(
    workflow_id: str,
    task_id: str,
    body: ReviewRequest,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> Submitted:
    sent = svc.commands.get().review(
        workflow_id,
        task_id,
        body.decision,
        input=body.input,
        reason=body.reason,
        command_id=body.idempotencyKey,
        actor=who.name,
    )
    verdict = writes.acted(svc, sent, "review")
    return Submitted(workflowId=workflow_id, commandId=sent.command_id, token=verdict.token)


def parked_of(r: Row) -> ParkedTask:
    return ParkedTask(
        workflowId=r["workflow_id"],
        workflowName=r["workflow_name"],
        workflowStatus=r["workflow_status"],
        task=task_of(r),
    )
