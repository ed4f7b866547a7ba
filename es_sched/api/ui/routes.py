"""The console under ``/ui`` (issue 14 item 4): the workflows list and its bulk actions; a
workflow's page lives in ``es_sched.api.ui.workflow`` (included here).

The list is two PostgreSQL reads in one snapshot whatever the table's size
(``pages.console_page``'s statements, run on the event loop in one round trip: ADR 37):
the counts per status (over the filter without its statuses, so each count is a link that
narrows; the total is their sum), each counted to at most ``ES_SCHED_API_CONSOLE_COUNT_MAX``
rows past the page's start and shown "N+" beyond (an exact count scans the whole table, most
of a page's time on a large read model: ADR 26), and one page of rows, newest first, on the
``created_at`` indexes; free text is resolved by the search store into ids first. No query
per row.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from es_sched.api import writes
from es_sched.api.actions import refusal, role_allows
from es_sched.api.auth import Principal
from es_sched.api.errors import ApiError
from es_sched.api.read_model_freshness import page_freshness_async
from es_sched.api.services import Services, services
from es_sched.api.ui import filters, workflow
from es_sched.api.ui.common import VIEWER, act, fragment, page
from es_sched.projections.postgres import queries
from es_sched.projections.postgres.queries import WorkflowFilter

router = APIRouter(prefix="/ui", include_in_schema=False)
BULK_ACTIONS = ("retry", "terminate", "cancel")


def _filter(svc: Services, q: filters.ListQuery) -> WorkflowFilter:
    text = q.one("q")
    ids = None
    if text:
        hits = svc.search.get().search_text(text, limit=filters.FREE_TEXT_MAX)
        ids = tuple(dict.fromkeys(str(h["workflow_id"]) for h in hits if h.get("workflow_id")))
    return filters.to_filter(q, ids)


@router.get("/", response_class=HTMLResponse)
async def workflows_page(
    request: Request,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """On the event loop (ADR 37): free text and stale offsets are read on a thread."""
    q = filters.parse(request.query_params)
    f = await run_in_threadpool(_filter, svc, q) if q.one("q") else filters.to_filter(q, None)
    fresh = await page_freshness_async(svc)  # before the rows: they reflect at least these offsets
    cap = svc.settings.api.console_count_max
    counts, capped, rows = await svc.reads.console_page(f, filters.STATUSES, q.start, q.size, cap)
    chosen = f.statuses or tuple(counts)
    total = sum(n for s, n in counts.items() if s in chosen)
    return page(
        request,
        "workflows.html",
        svc,
        who,
        fresh=fresh,
        q=q,
        rows=rows,
        total=total,
        counts=counts,
        capped=capped,
        more=any(s in capped for s in chosen),
        statuses=filters.STATUSES,
        sizes=filters.PAGE_SIZES,
        actions=BULK_ACTIONS,
        may_act=all(role_allows(a, who.role) for a in BULK_ACTIONS),
    )


async def _bulk_form(
    request: Request, who: Principal
) -> tuple[str, str, list[str], filters.ListQuery]:
    """The form of a bulk action, refused by the actions' table for the key's role (ADR 59);
    each workflow's state is the decider's to judge, one command at a time."""
    form = await request.form()
    action = str(form.get("action") or "")
    if action not in BULK_ACTIONS:
        raise ApiError(400, f"action must be one of {list(BULK_ACTIONS)}, not {action!r}")
    refused = refusal(action, who.role, None)
    if refused is not None:
        raise ApiError(refused.status, refused.reason)
    scope = str(form.get("scope") or "selected")
    if scope not in ("selected", "filter"):
        raise ApiError(400, f"scope must be 'selected' or 'filter', not {scope!r}")
    ids = [str(i) for i in form.getlist("ids") if str(i)]
    if scope == "selected" and not ids:
        raise ApiError(400, "no workflow selected")
    return action, scope, ids, filters.parse(form)


@router.post("/bulk/preview", response_class=HTMLResponse)
async def bulk_preview(
    request: Request,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """The confirmation: what the action would touch, counted, before anything is sent."""
    action, scope, ids, q = await _bulk_form(request, who)
    if scope == "filter":
        count = sum(queries.status_counts(svc.engine, _filter(svc, q)).values())
    else:
        count = len(ids)
    cap = svc.settings.api.console_bulk_max
    return fragment(
        request,
        "_bulk_confirm.html",
        action=action,
        scope=scope,
        ids=ids,
        q=q,
        count=min(count, cap),
        capped=count > cap,
        cap=cap,
    )


@router.post("/bulk", response_class=HTMLResponse)
async def bulk(
    request: Request,
    svc: Services = Depends(services),  # noqa: B008
    who: Principal = VIEWER,
) -> HTMLResponse:
    """One command per workflow; each is accepted or refused by the decider on its own."""
    action, scope, ids, q = await _bulk_form(request, who)
    if str((await request.form()).get("confirm") or "") != "yes":
        raise ApiError(400, "a bulk action needs confirm=yes (ask /ui/bulk/preview first)")
    if scope == "filter":
        ids = queries.workflow_ids(svc.engine, _filter(svc, q), svc.settings.api.console_bulk_max)
    client = svc.commands.get()
    sent = [act(client, action, wf_id, f"bulk {action} by {who.name}", who.name) for wf_id in ids]
    verdicts = await run_in_threadpool(writes.settler(svc).settle, sent)  # ADR 56
    refused = {v.workflow_id: v.refused for v in verdicts if v.refused is not None}
    return fragment(request, "_bulk_done.html", action=action, sent=sent, refused=refused)


router.include_router(workflow.router)
