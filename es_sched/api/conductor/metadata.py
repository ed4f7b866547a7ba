"""Conductor's metadata resource under ``/api/metadata`` (issue 14 item 1).

Writes go the way ``es-sched defs push`` goes (``CommandClient.push_documents``): every
document is checked (JSON Schema, ``validate_workflow``, sub-workflow cycles) and the whole
request is refused when one has a problem, each listed in ``validationErrors``; nothing of a
refused request reaches the ``definitions`` topic. A write answers once the registry the API
reads holds it (``api.writes.registered``, ADR 56; 503 past
``ES_SCHED_API_READ_YOUR_WRITES_TIMEOUT_S``), so the next read and the next start see it.
Reads come from that registry (the compacted topic, caught up to its end on each call). A
definition's key is its name and version: pushing the same pair again replaces it
(``overwrite=false`` refuses that with 409, as Conductor does).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response

from es_sched.api import writes
from es_sched.api.auth import Principal, require
from es_sched.api.conductor.models import BulkResponse
from es_sched.api.errors import ApiError
from es_sched.api.services import Services, services
from es_sched.commands.files import Documents
from es_sched.domain.definitions import DefinitionError

router = APIRouter(prefix="/api/metadata", tags=["metadata"])

JSON = dict[str, Any]
SVC = Depends(services)
ADMIN = require("admin")
VIEWER = require("viewer")
DOC = Annotated[JSON, Body(description="a Conductor WorkflowDef or TaskDef")]
DOCS = Annotated[list[JSON], Body(description="Conductor WorkflowDefs or TaskDefs")]


def _push(svc: Services, workflows: list[JSON], taskdefs: list[JSON]) -> None:
    docs = Documents(workflows=workflows, taskdefs=taskdefs)
    for i, doc in enumerate(workflows):
        docs.sources[id(doc)] = Path(f"request body [{i}]")
    try:
        svc.commands.get().push_documents(docs)
    except DefinitionError as exc:
        problems = [{"path": "body", "message": p, "invalidValue": None} for p in exc.problems]
        raise ApiError(400, f"invalid definitions: {exc}", problems) from None
    writes.registered(svc, workflows, taskdefs)


def _refuse_existing(svc: Services, workflows: list[JSON]) -> None:
    known, _ = svc.commands.get().definitions()
    taken = [
        f"{d.get('name')} v{writes.version_of(d)}"
        for d in workflows
        if (d.get("name"), writes.version_of(d)) in known
    ]
    if taken:
        raise ApiError(
            409,
            f"workflow definition already exists: {', '.join(taken)} "
            "(pass overwrite=true to replace it)",
        )


def _is_workflow(docs: list[JSON]) -> None:
    for i, doc in enumerate(docs):
        if not isinstance(doc.get("tasks"), list):
            raise ApiError(
                400,
                f"document {i} ({doc.get('name')!r}) is not a workflow "
                "definition: it has no tasks list",
            )


@router.post("/workflow")
def create_workflow_def(
    doc: DOC, overwrite: bool = True, svc: Services = SVC, _who: Principal = ADMIN
) -> Response:
    """Register one workflow definition."""
    _is_workflow([doc])
    if not overwrite:
        _refuse_existing(svc, [doc])
    _push(svc, [doc], [])
    return Response(status_code=200)


@router.put("/workflow", response_model=BulkResponse)
def update_workflow_defs(
    docs: DOCS, overwrite: bool = True, svc: Services = SVC, _who: Principal = ADMIN
) -> BulkResponse:
    """Register or replace several workflow definitions, all or nothing."""
    _is_workflow(docs)
    if not overwrite:
        _refuse_existing(svc, docs)
    _push(svc, docs, [])
    return BulkResponse(bulkSuccessfulResults=[str(d.get("name")) for d in docs])


@router.get("/workflow")
def all_workflow_defs(svc: Services = SVC, _who: Principal = VIEWER) -> list[JSON]:
    """Every registered version of every workflow definition, by name then version."""
    known, _ = svc.commands.get().definitions()
    return [known[k] for k in sorted(known)]


@router.get("/workflow/{name}")
def workflow_def(
    name: str, version: int | None = None, svc: Services = SVC, _who: Principal = VIEWER
) -> JSON:
    """One definition: ``version``, or the latest one registered."""
    known, _ = svc.commands.get().definitions()
    versions = [v for n, v in known if n == name]
    if version is not None and (name, version) in known:
        return known[(name, version)]
    if version is None and versions:
        return known[(name, max(versions))]
    which = f"version {version}" if version is not None else "any version"
    raise ApiError(404, f"No such workflow found by name: {name}, {which}")


@router.post("/taskdefs")
def create_taskdefs(docs: DOCS, svc: Services = SVC, _who: Principal = ADMIN) -> Response:
    """Register TaskDefs (a list), all or nothing."""
    _push(svc, [], docs)
    return Response(status_code=200)


@router.put("/taskdefs")
def update_taskdef(doc: DOC, svc: Services = SVC, _who: Principal = ADMIN) -> Response:
    """Register or replace one TaskDef."""
    _push(svc, [], [doc])
    return Response(status_code=200)


@router.get("/taskdefs")
def all_taskdefs(svc: Services = SVC, _who: Principal = VIEWER) -> list[JSON]:
    _, taskdefs = svc.commands.get().definitions()
    return [taskdefs[k] for k in sorted(taskdefs)]


@router.get("/taskdefs/{tasktype}")
def taskdef(tasktype: str, svc: Services = SVC, _who: Principal = VIEWER) -> JSON:
    _, taskdefs = svc.commands.get().definitions()
    found = taskdefs.get(tasktype)
    if found is None:
        raise ApiError(404, f"No such taskType found by name: {tasktype}")
    return found
