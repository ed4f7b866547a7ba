"""Conductor's restart and rerun of a workflow, ``POST /api/workflow/{id}/restart|rerun`` and
``POST /api/workflow/bulk/restart`` (issue 14 item 1), on the core's restart and rerun commands.

Each route sends one command per workflow with the caller as its ``actor`` and answers as
Conductor does once the read model shows the decider's verdict (``es_sched.api.writes``, ADR
56; restart: 204, rerun: the workflow id as text/plain, bulk: ``BulkResponse``). Whether the
workflow may be restarted or rerun is the decider's rule (``domain.rerun``): a refusal comes
back with its reason, 404 when the workflow has no history, 409 when its state refuses it. The
API looks the workflow up only for what the command must carry: the definition's name to
resolve its latest version (``useLatestDefinitions``); a workflow the read model does not show
yet is restarted with the version it runs (the decider knows no other).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field

from es_sched.api import writes
from es_sched.api.auth import Principal, require
from es_sched.api.errors import TOKEN_HEADER, ApiError
from es_sched.api.services import Services, services
from es_sched.commands.client import Submitted
from es_sched.commands.prepare import UnknownDefinition
from es_sched.errors import EsSchedError, InfrastructureError
from es_sched.projections.postgres import queries

router = APIRouter(prefix="/api", tags=["workflow"])

MAX_BULK = 1000  # Conductor's bulk limit
LATEST = Query(False, alias="useLatestDefinitions")
SERVICES = Depends(services)
OPERATOR = require("operator")  # every route here is an operator's action on workflows


class RerunWorkflowRequest(BaseModel):
    """Conductor's ``RerunWorkflowRequest``."""

    model_config = ConfigDict(populate_by_name=True)

    re_run_from_workflow_id: str | None = Field(None, alias="reRunFromWorkflowId")
    workflow_input: dict[str, Any] | None = Field(None, alias="workflowInput")
    re_run_from_task_id: str | None = Field(None, alias="reRunFromTaskId", min_length=1)
    task_input: dict[str, Any] | None = Field(None, alias="taskInput")
    correlation_id: str | None = Field(None, alias="correlationId")


class BulkResponse(BaseModel):
    """Conductor's ``BulkResponse``: ids sent, and the reason for each that was not."""

    bulkErrorResults: dict[str, str] = Field(default_factory=dict)
    bulkSuccessfulResults: list[str] = Field(default_factory=list)
    message: str = ""


def _row(svc: Services, workflow_id: str) -> dict[str, Any] | None:
    row, _ = queries.workflow(svc.engine, workflow_id)
    return row


def _restart(svc: Services, workflow_id: str, latest: bool, actor: str) -> Submitted:
    row = _row(svc, workflow_id) if latest else None
    name = str(row["name"]) if row is not None else None
    try:
        return svc.commands.get().restart(workflow_id, latest_of=name, actor=actor)
    except UnknownDefinition as exc:
        raise writes.unknown_definition(exc) from None


@router.post("/workflow/bulk/restart", response_model=BulkResponse)
def bulk_restart(
    workflow_ids: list[str] = Body(..., max_length=MAX_BULK),  # noqa: B008
    use_latest: bool = LATEST,
    svc: Services = SERVICES,
    principal: Principal = OPERATOR,
) -> BulkResponse:
    """Restart each workflow; one that cannot be sent is listed with the reason."""
    answer = BulkResponse()
    sent: list[Submitted] = []
    for workflow_id in workflow_ids:
        try:
            sent.append(_restart(svc, workflow_id, use_latest, principal.name))
        except InfrastructureError:
            raise  # the command side is down: 503 for the whole request
        except ApiError as exc:
            answer.bulkErrorResults[workflow_id] = exc.message
        except EsSchedError as exc:
            answer.bulkErrorResults[workflow_id] = str(exc)
    for verdict in writes.settler(svc).settle(sent):
        refused = writes.refusal_error("restart", verdict)
        if refused is None:
            answer.bulkSuccessfulResults.append(verdict.workflow_id)
        else:
            answer.bulkErrorResults[verdict.workflow_id] = refused.message
    return answer


@router.post("/workflow/{workflow_id}/restart", status_code=204, response_class=Response)
def restart(
    workflow_id: str,
    use_latest: bool = LATEST,
    svc: Services = SERVICES,
    principal: Principal = OPERATOR,
) -> Response:
    """Restart a workflow in a terminal state from its beginning (same id, same input)."""
    sent = _restart(svc, workflow_id, use_latest, principal.name)
    verdict = writes.acted(svc, sent, "restart")
    return Response(status_code=204, headers={TOKEN_HEADER: verdict.token})


@router.post("/workflow/{workflow_id}/rerun", response_class=PlainTextResponse)
def rerun(
    workflow_id: str,
    request: RerunWorkflowRequest,
    svc: Services = SERVICES,
    principal: Principal = OPERATOR,
) -> PlainTextResponse:
    """Rerun a workflow in a terminal state from ``reRunFromTaskId`` (a task id; a reference
    name is accepted too), or from its beginning with ``workflowInput`` without one."""
    if request.re_run_from_workflow_id not in (None, workflow_id):
        raise ApiError(
            400,
            f"reRunFromWorkflowId {request.re_run_from_workflow_id!r} is not the workflow "
            f"in the path ({workflow_id!r})",
        )
    row = _row(svc, workflow_id) if request.correlation_id is not None else None
    if row is not None and request.correlation_id != row.get("correlation_id"):
        raise ApiError(400, "a rerun cannot change the workflow's correlationId")
    sent = svc.commands.get().rerun(
        workflow_id,
        task=request.re_run_from_task_id,
        task_input=request.task_input,
        workflow_input=request.workflow_input,
        actor=principal.name,
    )
    verdict = writes.acted(svc, sent, "rerun")
    return PlainTextResponse(workflow_id, headers={TOKEN_HEADER: verdict.token})
