"""Conductor's workflow resource under ``/api/workflow`` (issue 14 item 1; ADR 23).

Writes are commands through ``CommandClient`` that answer once their effect is visible to the
next call (``es_sched.api.writes``, ADR 56): a start answers the workflow id once the decider
accepted it and the read model has it, and a refusal is Conductor's error with the decider's
reason; terminate, pause, resume and retry answer once the read model shows the decider's
verdict. A workflow the read model does not have yet still gets the command: only the
decider's "no such workflow" becomes a 404, a refusal by the workflow a 409; pause, resume and
terminate of one the read model shows ended answer 409 without a command. A wait that runs
out answers 503 with the reason and the token. Every write answers the command's
read-your-writes token in ``X-Es-Sched-Token`` (``/api/v1``'s ``?after=``).

Reads come from the PostgreSQL read model, free text from the search store, and every
answer names the events offsets it reflects in ``X-Es-Sched-Reflects`` (``partition:offset``
of the events topic, comma-separated; the rows reflect at least these), since the body must
stay Conductor's. Bulk actions send every id, wait for all the verdicts together and report
each refusal, with its reason, in ``bulkErrorResults``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Body, Depends, Query, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from es_sched.api import writes
from es_sched.api.auth import Principal, require
from es_sched.api.conductor import models
from es_sched.api.conductor.query import QueryError, parse_query, parse_sort
from es_sched.api.errors import TOKEN_HEADER, ApiError
from es_sched.api.reflected import reflected, reflected_async
from es_sched.api.services import Services, services
from es_sched.commands.client import Submitted
from es_sched.commands.prepare import UnknownDefinition
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries
from es_sched.projections.views import Row

router = APIRouter(prefix="/api", tags=["workflow"])

REFLECTS = "X-Es-Sched-Reflects"
AFTER_HEADER = TOKEN_HEADER
TOTAL_CAPPED = "X-Es-Sched-Total-Capped"  # totalHits stopped counting here (ES_SCHED_API_COUNT_MAX)
ENDED = frozenset({"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"})
FREE_TEXT_LIMIT = 10_000  # ids a free-text search may resolve to (the engines' result window)
MAX_PRIORITY = 8  # es-sched's priorities: 0 (highest) to 8
TEXT: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/plain": {"schema": {"type": "string"}}}}
}
SVC = Depends(services)
OPERATOR = require("operator")
VIEWER = require("viewer")


def reflects(svc: Services) -> str:
    """The events offsets the PostgreSQL rows reflect, as ``partition:offset,...``."""
    offsets = reflected(svc, topics_for(svc.settings).events)  # a lower bound, cached briefly
    return _header(offsets)


async def reflects_async(svc: Services) -> str:
    return _header(await reflected_async(svc, topics_for(svc.settings).events))


def _header(offsets: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(offsets.items()))


def _accepted(verdict: writes.Verdict, response: Response) -> None:
    response.headers[AFTER_HEADER] = verdict.token


# -- starting -------------------------------------------------------------------------------
def _start(
    svc: Services,
    name: str,
    input: dict[str, Any],
    version: int | None,
    correlation_id: str | None,
    priority: int | None,
    command_id: str | None = None,
    *,
    actor: str,
    sla_tier: str | None = None,
    deadline: datetime | None = None,
) -> writes.Verdict:
    if priority is not None and not 0 <= priority <= MAX_PRIORITY:
        raise ApiError(
            400,
            f"priority {priority} is out of range: es-sched's are 0 (highest) to {MAX_PRIORITY}",
        )
    try:
        sent = svc.commands.get().submit(
            name,
            input,
            version=version,
            priority=4 if priority is None else priority,
            correlation_id=correlation_id,
            command_id=command_id,
            actor=actor,
            sla_tier=sla_tier,
            deadline=deadline,
        )
    except UnknownDefinition as exc:
        raise writes.unknown_definition(exc) from None
    return writes.started(svc, sent)


def _plain(verdict: writes.Verdict) -> PlainTextResponse:
    response = PlainTextResponse(verdict.workflow_id)
    _accepted(verdict, response)
    return response


@router.post("/workflow", response_class=PlainTextResponse, responses=TEXT)
def start_workflow(
    request: models.StartWorkflowRequest,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> PlainTextResponse:
    """Start a workflow (Conductor's ``StartWorkflowRequest``); answers its id as text."""
    unsupported = [
        (request.taskToDomain, "taskToDomain: es-sched has no task domains"),
        (
            request.workflowDef,
            "workflowDef: register the definition with "
            "POST /api/metadata/workflow, then start it by name",
        ),
        (
            request.externalInputPayloadStoragePath,
            "externalInputPayloadStoragePath: es-sched keeps no external payload storage",
        ),
    ]
    problems = [reason for value, reason in unsupported if value]
    if problems:
        raise ApiError(400, "; ".join(problems))
    command_id = None
    if request.idempotencyKey:
        if request.idempotencyStrategy not in (None, "RETURN_EXISTING"):
            raise ApiError(
                400,
                f"idempotencyStrategy {request.idempotencyStrategy}: es-sched supports "
                "RETURN_EXISTING only (the same key answers the same workflow id)",
            )
        command_id = f"conductor:{request.name}:{request.idempotencyKey}"[:200]
    started = _start(
        svc,
        request.name,
        request.input,
        request.version,
        request.correlationId,
        request.priority,
        command_id,
        actor=who.name,
        sla_tier=request.slaTier,
        deadline=request.deadline_at(),
    )
    return _plain(started)


# -- searching (before /workflow/{id}, which would take "search" for an id) ------------------
@router.get("/workflow/search", response_model=models.SearchResultWorkflowSummary)
async def search(
    start: Annotated[int, Query(ge=0)] = 0,
    size: Annotated[int, Query(ge=0, le=1000)] = 100,
    sort: str | None = None,
    freeText: str = "*",
    query: str | None = None,
    svc: Services = SVC,
    _who: Principal = VIEWER,
) -> Response:
    # On the event loop (ADR 37); free text asks the search store on a thread. The answer is
    # ``response_model``'s JSON, written directly (``models.summary``).
    try:
        f = parse_query(query)
        order = parse_sort(sort)
    except QueryError as exc:
        raise ApiError(400, str(exc)) from None
    text = freeText.strip()
    if text and text != "*":
        hits = await run_in_threadpool(_search_text, svc, text)
        found = tuple(dict.fromkeys(str(h["workflow_id"]) for h in hits))
        ids = found if f.ids is None else tuple(i for i in f.ids if i in found)
        f = replace(f, ids=ids)
    headers = {REFLECTS: await reflects_async(svc)}
    cap = svc.settings.api.count_max
    total, capped, rows = await svc.reads.search_page(f, start, size, order, cap)
    if capped:  # totalHits is then a lower bound: at least this many match
        headers[TOTAL_CAPPED] = str(total)
    body = {"totalHits": total, "results": [models.summary(r) for r in rows]}
    return Response(orjson.dumps(body), media_type="application/json", headers=headers)


def _search_text(svc: Services, text: str) -> list[Row]:
    return svc.search.get().search_text(text, limit=FREE_TEXT_LIMIT)


# -- bulk (before /workflow/{id}/..., which would take "bulk" for an id) ---------------------
BULK: dict[str, Callable[..., Submitted]] = {
    "pause": lambda c, wf_id, actor: c.pause(wf_id, actor=actor),
    "resume": lambda c, wf_id, actor: c.resume(wf_id, actor=actor),
    "retry": lambda c, wf_id, actor: c.retry(wf_id, actor=actor),
    "terminate": lambda c, wf_id, actor, reason: c.terminate(wf_id, reason=reason, actor=actor),
}


def _precheck(action: str, row: Row | None, workflow_id: str) -> str | None:
    """Why the read model says ``action`` cannot apply, or None (the decider decides). A
    workflow the rows do not have may be one started a moment ago: the decider decides."""
    if row is None:
        return None
    if action in ("pause", "resume", "terminate") and row["status"] in ENDED:
        return f"workflow {workflow_id} has already ended ({models.workflow_status(row['status'])})"
    return None


def _bulk(
    svc: Services, who: Principal, action: str, ids: list[str], reason: str | None = None
) -> models.BulkResponse:
    if len(ids) > 1000:
        raise ApiError(400, f"a bulk request takes at most 1000 workflow ids, not {len(ids)}")
    out = models.BulkResponse()
    client = svc.commands.get()
    unique = tuple(dict.fromkeys(ids))
    _, rows = queries.search_workflows(svc.engine, queries.WorkflowFilter(ids=unique), 0, 1000)
    by_id = {r["workflow_id"]: r for r in rows}
    sent: list[Submitted] = []
    for workflow_id in unique:
        problem = _precheck(action, by_id.get(workflow_id), workflow_id)
        if problem is not None:
            out.bulkErrorResults[workflow_id] = problem
            continue
        if action == "terminate":
            sent.append(BULK[action](client, workflow_id, who.name, reason or "terminated in bulk"))
        else:
            sent.append(BULK[action](client, workflow_id, who.name))
    for verdict in writes.settler(svc).settle(sent):
        refused = writes.refusal_error(action, verdict)
        if refused is None:
            out.bulkSuccessfulResults.append(verdict.workflow_id)
        else:
            out.bulkErrorResults[verdict.workflow_id] = refused.message
    return out


IDS = Annotated[list[str], Body(description="workflow ids")]


@router.put("/workflow/bulk/pause", response_model=models.BulkResponse)
def bulk_pause(
    response: Response,
    ids: IDS,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> models.BulkResponse:
    response.headers[REFLECTS] = reflects(svc)
    return _bulk(svc, who, "pause", ids)


@router.put("/workflow/bulk/resume", response_model=models.BulkResponse)
def bulk_resume(
    response: Response,
    ids: IDS,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> models.BulkResponse:
    response.headers[REFLECTS] = reflects(svc)
    return _bulk(svc, who, "resume", ids)


@router.post("/workflow/bulk/retry", response_model=models.BulkResponse)
def bulk_retry(
    response: Response,
    ids: IDS,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> models.BulkResponse:
    response.headers[REFLECTS] = reflects(svc)
    return _bulk(svc, who, "retry", ids)


@router.post("/workflow/bulk/terminate", response_model=models.BulkResponse)
def bulk_terminate(
    response: Response,
    ids: IDS,
    reason: str | None = None,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> models.BulkResponse:
    response.headers[REFLECTS] = reflects(svc)
    return _bulk(svc, who, "terminate", ids, reason)


# -- one workflow -----------------------------------------------------------------------------
@router.post("/workflow/{name}", response_class=PlainTextResponse, responses=TEXT)
def start_workflow_by_name(
    name: str,
    input: Annotated[dict[str, Any] | None, Body()] = None,
    version: int | None = None,
    correlationId: str | None = None,
    priority: int | None = None,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> PlainTextResponse:
    """Start ``name`` with the body as its input; answers the workflow id as text."""
    started = _start(svc, name, input or {}, version, correlationId, priority, actor=who.name)
    return _plain(started)


def _absent(svc: Services, workflow_id: str) -> ApiError:
    refused = queries.rejections(svc.engine, workflow_id)
    if refused:
        last = refused[-1]
        return ApiError(
            404,
            f"workflow {workflow_id} has no history: its {last['command_type']} was "
            f"refused: {last['reason']}",
        )
    return ApiError(404, f"No such workflow found by id: {workflow_id}")


@router.get("/workflow/{workflowId}", response_model=models.Workflow)
async def get_workflow(
    workflowId: str,
    response: Response,
    includeTasks: bool = True,
    svc: Services = SVC,
    _who: Principal = VIEWER,
) -> models.Workflow:
    # On the event loop (ADR 37): the most requested read answers without a thread.
    offsets = await reflects_async(svc)  # read first: the rows then reflect at least these
    row, tasks = await svc.reads.workflow(workflowId)
    if row is None:
        raise await run_in_threadpool(_absent, svc, workflowId)
    response.headers[REFLECTS] = offsets
    return models.workflow(row, tasks, includeTasks)


def _act(
    svc: Services, who: Principal, action: str, workflow_id: str, response: Response, **kw: Any
) -> None:
    row, _ = queries.workflow(svc.engine, workflow_id)
    problem = _precheck(action, row, workflow_id)
    if problem is not None:
        raise ApiError(409, problem)
    sent = BULK[action](svc.commands.get(), workflow_id, who.name, *kw.values())
    _accepted(writes.acted(svc, sent, action), response)
    response.headers[REFLECTS] = reflects(svc)


@router.delete("/workflow/{workflowId}")
def terminate(
    workflowId: str,
    response: Response,
    reason: str | None = None,
    triggerFailureWorkflow: bool = False,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> None:
    if triggerFailureWorkflow:
        raise ApiError(
            400, "triggerFailureWorkflow: es-sched does not start a failure workflow on terminate"
        )
    _act(svc, who, "terminate", workflowId, response, reason=reason or "terminated")


@router.put("/workflow/{workflowId}/pause")
def pause(
    workflowId: str,
    response: Response,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> None:
    _act(svc, who, "pause", workflowId, response)


@router.put("/workflow/{workflowId}/resume")
def resume(
    workflowId: str,
    response: Response,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> None:
    _act(svc, who, "resume", workflowId, response)


@router.post("/workflow/{workflowId}/retry")
def retry(
    workflowId: str,
    response: Response,
    resumeSubworkflowTasks: bool = False,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> None:
    _act(svc, who, "retry", workflowId, response)
