"""The console's Review page (ADR 71): the tasks parked for an operator, each with its last
attempt's input and failure, and the forms that retry it (with the input as edited there) or
fail it.

The same queue and the same command as the native API (``api.native.review``): a decision
waits until the read model shows the decider's verdict (``es_sched.api.writes``, ADR 56), so
the page it redirects to no longer lists a task that was retried or failed; a refusal (the
task was decided meanwhile) is the decider's reason, 409. Viewers see the queue; the forms
are an operator's, the role the ``review`` rule names (``domain.actions``, ADR 59).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from es_sched.api.actions import role_allows
from es_sched.api.auth import Principal, require
from es_sched.api.errors import TOKEN_HEADER, ApiError
from es_sched.api.native.models import ReviewRequest
from es_sched.api.native.review import review_queue, review_task
from es_sched.api.read_model_freshness import freshness_of
from es_sched.api.services import Services, services
from es_sched.api.ui.common import json_object
from es_sched.api.ui.render import templates

router = APIRouter(prefix="/ui", include_in_schema=False)
VIEWER = require("viewer")
OPERATOR = require("operator")
SVC = Depends(services)


@router.get("/review", response_class=HTMLResponse)
def review_page(request: Request, svc: Services = SVC, who: Principal = VIEWER) -> HTMLResponse:
    queue = review_queue(svc, who)
    context = {
        "who": who,
        "queue": queue.tasks,
        "fresh": freshness_of(svc),
        "can_review": role_allows("review", who.role),
        "dumps": _dumps,
    }
    return templates.TemplateResponse(request, "ops_review.html", context)


@router.post("/review/{workflow_id}/{task_id}")
def decide(
    workflow_id: str,
    task_id: str,
    decision: Annotated[str, Form()],
    input: Annotated[str, Form()] = "",
    reason: Annotated[str, Form(max_length=2000)] = "",
    svc: Services = SVC,
    who: Principal = OPERATOR,
) -> Response:
    """Retry (with the input as edited in the form) or fail one parked task."""
    if decision not in ("retry", "fail"):
        raise ApiError(400, f"decision must be retry or fail, not {decision!r}")
    edited = json_object(input) if decision == "retry" and input.strip() else None
    body = ReviewRequest(decision=decision, input=edited, reason=reason)
    done = review_task(workflow_id, task_id, body, svc, who)
    headers = {TOKEN_HEADER: done.token} if done.token else None
    return RedirectResponse("/ui/review", status_code=303, headers=headers)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
