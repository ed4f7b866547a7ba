"""One workflow's console page: its DAG, attempts timeline, a panel per task, the event
history, and the actions an operator takes on it. An action answers once the read model shows
the decider's verdict (``es_sched.api.writes``): a refusal is an error with its reason.

Everything is read from the PostgreSQL read model: the row and task rows
(``queries.workflow``), the definition the workflow started with (its ``workflow.started``
event in the archive), the history (the archive, by primary key). The parts that change while
a workflow runs are one fragment (``live``) that re-reads itself every two seconds while the
workflow runs, and for a while after an action, so an operator sees a retry take effect
without reloading and without the page guessing the outcome: the decider's verdict arrives
through the log like everything else.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, Response
from starlette.concurrency import run_in_threadpool

from es_sched.api import correlation, writes
from es_sched.api.actions import offered, refusal
from es_sched.api.auth import Principal
from es_sched.api.errors import ApiError
from es_sched.api.services import Services, services
from es_sched.api.ui import dag, panels, timeline
from es_sched.api.ui.common import TERMINAL, VIEWER, act, fragment, page
from es_sched.commands import Submitted
from es_sched.projections.postgres import queries
from es_sched.projections.views import Row

router = APIRouter(prefix="/workflows")
WATCH_POLLS = 30  # live re-reads after an action (two seconds apart) even on a final status
SIGNAL_STATUSES = ("COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR")


def _live(svc: Services, workflow_id: str, who: Principal) -> dict[str, Any]:
    row, rows = queries.workflow(svc.engine, workflow_id)
    if row is None:
        raise ApiError(404, f"no workflow {workflow_id!r} in the read model (yet)")
    started = queries.started_definition(svc.engine, workflow_id) or {}
    definition = started.get("definition") or {}
    bars, span = timeline.bars(rows, datetime.now(UTC))
    waiting = [
        t
        for t in rows
        if t["task_type"] == "WAIT" and t["status"] not in TERMINAL and t["status"] != "COMPLETED"
    ]
    return {
        "wf": row,
        "tasks": rows,
        "layout": dag.layout(definition, rows),
        "bars": bars,
        "media": any(str(t["task_type"]).startswith("media.") for t in rows),
        "span": span,
        "definition": definition,
        "waiting": waiting,
        "parent_task_id": started.get("parent_task_id"),
        "offered": offered(who.role, str(row["status"])),
        "correlation": correlation.given(row),
    }


@router.get("/{workflow_id}", response_class=HTMLResponse)
def workflow_page(
    request: Request,
    workflow_id: str,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    live = _live(svc, workflow_id, who)
    return page(request, "workflow.html", svc, who, watch=0, shown=live["wf"]["status"], **live)


@router.get("/{workflow_id}/live", response_class=HTMLResponse)
def workflow_live(
    request: Request,
    workflow_id: str,
    watch: int = Query(0, ge=0, le=WATCH_POLLS),
    shown: str = Query("", max_length=40),
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """``shown``: the status the page's buttons were drawn for; when it changed, the buttons
    are drawn again (an out-of-band swap), else left alone so a half-typed reason survives."""
    return fragment(
        request, "_live.html", watch=watch, shown=shown, who=who, **_live(svc, workflow_id, who)
    )


@router.get("/{workflow_id}/data", response_class=HTMLResponse)
def data_panel(
    request: Request,
    workflow_id: str,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """The workflow's input, output and variables (as its SET_VARIABLE tasks left them)."""
    row, _ = queries.workflow(svc.engine, workflow_id)
    if row is None:
        raise ApiError(404, f"no workflow {workflow_id!r} in the read model (yet)")
    started = queries.started_definition(svc.engine, workflow_id) or {}
    events = queries.history(svc.engine, workflow_id)
    variables = panels.variables(started.get("definition") or {}, events)
    return fragment(request, "_data.html", wf=row, variables=variables, dumps=_dumps)


@router.get("/{workflow_id}/tasks/{ref}", response_class=HTMLResponse)
def task_panel(
    request: Request,
    workflow_id: str,
    ref: str,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """Every row of one task (attempts, iterations): input, output, worker, lease, progress,
    and what the worker sent with each outcome: log lines and a failure's traceback (ADR 60)."""
    _, rows = queries.workflow(svc.engine, workflow_id)
    mine = [r for r in rows if dag.base_ref(str(r["ref"])) == ref]
    outcomes = queries.task_outcomes(svc.engine, workflow_id, [str(r["task_id"]) for r in mine])
    return fragment(
        request,
        "_task.html",
        workflow_id=workflow_id,
        ref=ref,
        rows=mine,
        outcomes=outcomes,
        dumps=_dumps,
        log_text=log_text,
    )


def log_text(lines: list[dict[str, Any]]) -> str:
    """Log lines as the panel shows them: the time (UTC, to the millisecond) and the text."""
    out = []
    for x in lines:
        at = str(x.get("at") or "")
        clock = at[11:23] if len(at) >= 19 else "?"
        out.append(f"{clock}  {x.get('log', '')}")
    return "\n".join(out)


@router.get("/{workflow_id}/history", response_class=HTMLResponse)
def history(
    request: Request,
    workflow_id: str,
    failed: bool = False,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    events = queries.history(svc.engine, workflow_id, failed_only=failed)
    return fragment(
        request,
        "_history.html",
        workflow_id=workflow_id,
        events=events,
        failed=failed,
        dumps=_dumps,
    )


@router.get("/{workflow_id}/history.json")
def history_json(
    workflow_id: str,
    failed: bool = False,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> Response:
    events = queries.history(svc.engine, workflow_id, failed_only=failed)
    name = f"{workflow_id}-{'failed-' if failed else ''}events.json"
    return Response(
        json.dumps([_plain(e) for e in events], indent=2),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


@router.post("/{workflow_id}/actions/{action}", response_class=HTMLResponse)
async def action(
    request: Request,
    workflow_id: str,
    action: str,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """One action, checked by the table the page's buttons come from (ADR 59) before it is
    sent: a stale page's click is refused with the reason (403 role, 409 state)."""
    _check(svc, who, action, workflow_id)
    form = await request.form()
    client = svc.commands.get()
    sent: Submitted
    if action == "rerun":
        task_id = str(form.get("task_id") or "")
        if not task_id:
            raise ApiError(400, "rerun needs the task_id to rerun from")
        sent = client.rerun(workflow_id, task_id, actor=who.name)
    else:
        sent = act(client, action, workflow_id, str(form.get("reason") or ""), who.name)
    await run_in_threadpool(writes.acted, svc, sent, action)  # a blocking wait (ADR 56)
    return _accepted(request, action, sent)


def _check(svc: Services, who: Principal, action: str, workflow_id: str) -> None:
    """Refuse what the rule table refuses; a workflow the read model lacks goes to the decider,
    whose verdict lands in the log."""
    row, _ = queries.workflow(svc.engine, workflow_id)
    refused = refusal(action, who.role, str(row["status"]) if row else None)
    if refused is not None:
        raise ApiError(refused.status, refused.reason)


@router.post("/{workflow_id}/signal", response_class=HTMLResponse)
async def signal(
    request: Request,
    workflow_id: str,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """Complete (or fail) a WAIT task with the output the operator typed."""
    _check(svc, who, "signal", workflow_id)
    form = await request.form()
    ref = str(form.get("ref") or "") or None
    status = str(form.get("status") or "COMPLETED")
    if status not in SIGNAL_STATUSES:
        raise ApiError(400, f"status must be one of {list(SIGNAL_STATUSES)}, not {status!r}")
    try:
        output = json.loads(str(form.get("output") or "{}"))
    except json.JSONDecodeError as exc:
        raise ApiError(400, f"output is not JSON: {exc}") from None
    if not isinstance(output, dict):
        raise ApiError(400, "output must be a JSON object")
    sent = svc.commands.get().signal(workflow_id, output, ref=ref, status=status, actor=who.name)
    await run_in_threadpool(writes.acted, svc, sent, "signal")
    return _accepted(request, "signal", sent)


def _accepted(request: Request, what: str, sent: Submitted) -> HTMLResponse:
    """Done: the read model shows the decider's verdict (``writes.acted``); the page re-reads."""
    response = fragment(request, "_action_done.html", what=what, sent=sent)
    response.headers["HX-Trigger"] = "wf-changed"
    return response


def _plain(event: Row) -> dict[str, Any]:
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in event.items()}


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)
