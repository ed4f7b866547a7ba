"""The console's operations pages: queues, workers, definitions, submit, media (issue 14 item 4).

Each page is a server-rendered view of what the native API answers (``api.native``: the same
queries, the same worker board, the same freshness), so the console and ``/api/v1`` cannot
disagree; every page shows the offsets it reflects and a notice when the read model lags the
log. Submitting goes through the ``CommandClient`` like ``POST /api/v1/workflows``, waits as it
does (``es_sched.api.writes``) and redirects to the workflow's page, which then shows the
workflow the form just started.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from es_sched.api import writes
from es_sched.api.auth import Principal, require
from es_sched.api.errors import TOKEN_HEADER, ApiError
from es_sched.api.fleet import read_fleet
from es_sched.api.native.ops import (
    lift_blacklisting,
    post_lift_version,
    post_revert,
    workers_of,
)
from es_sched.api.native.routes import queues_of
from es_sched.api.read_model_freshness import freshness_of, wait_after
from es_sched.api.roles import grants
from es_sched.api.services import Services, services
from es_sched.api.ui.common import json_object
from es_sched.api.ui.diagram import default_input, diagram
from es_sched.api.ui.media import media_view
from es_sched.api.ui.render import templates
from es_sched.commands.prepare import UnknownDefinition
from es_sched.kafka.topics import topics_for
from es_sched.projections.postgres import queries

router = APIRouter(prefix="/ui", include_in_schema=False)
VIEWER = require("viewer")
OPERATOR = require("operator")
SVC = Depends(services)


def _page(request: Request, template: str, who: Principal, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, template, {"who": who, **context})


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, svc: Services = SVC, who: Principal = VIEWER) -> HTMLResponse:
    fresh = freshness_of(svc)
    rows = queues_of(queries.queues(svc.engine), fleet=read_fleet(svc))
    return _page(request, "ops_queues.html", who, queues=rows, fresh=fresh)


@router.get("/workers", response_class=HTMLResponse)
def workers_page(request: Request, svc: Services = SVC, who: Principal = VIEWER) -> HTMLResponse:
    fleet = workers_of(svc, read_fleet(svc))
    can_lift = grants(who.role, "operator")
    return _page(request, "ops_workers.html", who, fleet=fleet, can_lift=can_lift)


@router.post("/workers/{worker_id}/lift")
def lift_worker(worker_id: str, svc: Services = SVC, who: Principal = OPERATOR) -> Response:
    """The console's lift button: the API's lift, then back to the workers page, which reads
    the config topic to its end and so shows the worker lifted."""
    lift_blacklisting(worker_id, svc, who)
    return RedirectResponse("/ui/workers", status_code=303)


@router.post("/workers/rollouts/{task_type}/revert")
def revert_rollout(task_type: str, svc: Services = SVC, who: Principal = OPERATOR) -> Response:
    """The console's Revert button (ADR 70): the API's revert, then back to the workers page."""
    post_revert(task_type, svc, who)
    return RedirectResponse("/ui/workers#versions", status_code=303)


@router.post("/workers/version-stops/{task_type}/{version}/lift")
def lift_version(
    task_type: str, version: str, svc: Services = SVC, who: Principal = OPERATOR
) -> Response:
    """The console's Lift button for a version's stop (ADR 70)."""
    post_lift_version(task_type, version, svc, who)
    return RedirectResponse("/ui/workers#versions", status_code=303)


@router.get("/definitions", response_class=HTMLResponse)
def definitions_page(
    request: Request,
    name: str | None = None,
    version: int | None = None,
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> HTMLResponse:
    found, _taskdefs = svc.commands.get().definitions()
    versions: dict[str, list[int]] = {}
    for n, v in sorted(found):
        versions.setdefault(n, []).append(v)
    chosen = None
    if name is not None:
        v = version if version is not None else max(versions.get(name, [0]))
        chosen = found.get((name, v))
        if chosen is None:
            raise ApiError(404, f"no definition {name} version {v}")
    return _page(
        request,
        "ops_definitions.html",
        who,
        topic=topics_for(svc.settings).definitions,
        versions=versions,
        chosen=chosen,
        svg=diagram(chosen) if chosen else None,
        may_edit=grants(who.role, "operator"),
        text=json.dumps(chosen, indent=2, sort_keys=True) if chosen else None,
    )


@router.get("/submit", response_class=HTMLResponse)
def submit_form(
    request: Request,
    name: str | None = None,
    version: int | None = None,
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> HTMLResponse:
    found, _taskdefs = svc.commands.get().definitions()
    names = sorted({n for n, _ in found})
    name = name if name in names else (names[0] if names else None)
    versions = sorted(v for n, v in found if n == name)
    chosen = found.get((name, version or max(versions))) if name and versions else None
    prefill = json.dumps(default_input(chosen), indent=2) if chosen else "{}"
    return _page(
        request,
        "ops_submit.html",
        who,
        topic=topics_for(svc.settings).definitions,
        names=names,
        name=name,
        versions=versions,
        version=chosen.get("version") if chosen else None,
        prefill=prefill,
    )


@router.post("/submit")
def submit(
    name: Annotated[str, Form()],
    input: Annotated[str, Form()] = "{}",
    version: Annotated[int | None, Form()] = None,
    priority: Annotated[int, Form(ge=0, le=8)] = 4,
    correlation_id: Annotated[str, Form(max_length=256)] = "",
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> Response:
    """Start ``name`` (priority 0, the highest, to 8, Conductor's range; a correlation id only
    when one is given)."""
    document = json_object(input)
    try:
        done = svc.commands.get().submit(
            name,
            document,
            version,
            priority,
            correlation_id=correlation_id.strip() or None,
            actor=who.name,
        )
    except UnknownDefinition as exc:
        raise writes.unknown_definition(exc) from None
    token = writes.started(svc, done).token  # the page shows it at once (ADR 56)
    target = f"/ui/workflows/{done.workflow_id}?after={token}"
    return RedirectResponse(target, status_code=303, headers={TOKEN_HEADER: token})


@router.get("/media/{workflow_id}", response_class=HTMLResponse)
def media_page(
    request: Request,
    workflow_id: str,
    after: str | None = None,
    svc: Services = SVC,
    who: Principal = VIEWER,
) -> HTMLResponse:
    wait_after(svc, after)
    fresh = freshness_of(svc)
    row, tasks = queries.workflow(svc.engine, workflow_id)
    if row is None:
        raise ApiError(404, f"no workflow {workflow_id} in the read model")
    return _page(
        request,
        "ops_media.html",
        who,
        wf=row,
        media=media_view(tasks),
        fresh=fresh,
        now=datetime.now(UTC),
    )
