"""What every console page of the workflows part renders with: the frame's context (who is
looking, what the rows reflect, whether they lag) and the command client's actions by name."""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse

from es_sched.api.auth import Principal, require
from es_sched.api.errors import ApiError
from es_sched.api.read_model_freshness import page_freshness
from es_sched.api.services import Services
from es_sched.api.ui.render import templates
from es_sched.commands import CommandClient, Submitted

# The least role (ADR 24): pages are for viewers; the actions on workflows check the key's
# role and the workflow's state by one table (``es_sched.api.actions``, ADR 59).
VIEWER = require("viewer")
TERMINAL = frozenset({"COMPLETED", "FAILED", "TIMED_OUT", "TERMINATED", "CANCELED"})


def page(
    request: Request, name: str, svc: Services, who: Principal, **context: Any
) -> HTMLResponse:
    """A full page: ``name`` extends base.html and includes ``_fresh.html`` in its lag block
    (``fresh``: pass one read before the page's rows, else it is read now)."""
    fresh = context.pop("fresh") if "fresh" in context else page_freshness(svc)
    return templates.TemplateResponse(
        request, name, {"fresh": fresh, "who": who, "terminal": TERMINAL, **context}
    )


def fragment(request: Request, name: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"terminal": TERMINAL, **context})


def act(client: CommandClient, action: str, workflow_id: str, reason: str, actor: str) -> Submitted:
    """Send one workflow action as a command carrying who asked (``actor``, ADR 27); the
    decider's verdict lands in the log."""
    if action == "retry":
        return client.retry(workflow_id, actor=actor)
    if action == "terminate":
        why = reason or "terminated from the console"
        return client.terminate(workflow_id, reason=why, actor=actor)
    if action == "cancel":
        return client.cancel(workflow_id, reason=reason or "canceled from the console", actor=actor)
    if action == "pause":
        return client.pause(workflow_id, actor=actor)
    if action == "resume":
        return client.resume(workflow_id, actor=actor)
    if action == "restart":
        return client.restart(workflow_id, actor=actor)
    raise ApiError(400, f"unknown action {action!r}")


def json_object(text: str) -> dict[str, Any]:
    """A form's JSON input field as an object, or the 400 that says what is wrong with it."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"the input is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ApiError(400, "the input must be a JSON object")
    return document
