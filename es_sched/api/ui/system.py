"""The console's System page: the deployment's role processes, where they run, how far behind,
and which are stale (ADR 61). The same answer as ``GET /api/v1/system`` (``api.native.system``),
rendered; it refreshes itself every liveness interval."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from es_sched.api.auth import Principal, require
from es_sched.api.native.system import system_board, system_view
from es_sched.api.services import Services, services
from es_sched.api.ui.render import templates

router = APIRouter(prefix="/ui", include_in_schema=False)
VIEWER = require("viewer")
SVC = Depends(services)


@router.get("/system", response_class=HTMLResponse)
def system_page(request: Request, svc: Services = SVC, who: Principal = VIEWER) -> HTMLResponse:
    view = system_view(svc, system_board(svc).records(), datetime.now(UTC))
    stale = sum(p.health == "stale" for p in view.processes)
    return templates.TemplateResponse(
        request, "system.html", {"who": who, "system": view, "stale": stale}
    )
