"""Queries over the PostgreSQL read models, for the CLI, the HTTP API and the console.

``WorkflowFilter`` is the one shape every workflow list asks in: the CLI's ``query`` options,
Conductor's search query (parsed in ``es_sched.api``), the console's filter form. Its free text
is resolved by the caller against the search store into ``ids`` first (PostgreSQL keeps no
text index over inputs and outputs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Engine,
    Select,
    bindparam,
    func,
    select,
)

from es_sched.projections.postgres.models import CHECKPOINTS, EVENTS, REJECTIONS, TASKS, WORKFLOWS
from es_sched.projections.postgres.store import available
from es_sched.projections.views import Row


def workflow(engine: Engine, workflow_id: str) -> tuple[Row | None, list[Row]]:
    with available("status"), engine.connect() as conn:
        wf = conn.execute(select(WORKFLOWS).where(WORKFLOWS.c.workflow_id == workflow_id))
        row = wf.mappings().first()
        tasks = conn.execute(
            select(TASKS)
            .where(TASKS.c.workflow_id == workflow_id)
            .order_by(TASKS.c.scheduled_at, TASKS.c.version)
        ).mappings()
        return (dict(row) if row else None), [dict(t) for t in tasks]


def rejections(engine: Engine, workflow_id: str) -> list[Row]:
    """Refusals of inputs for ``workflow_id`` while it had no history (ADR 11), oldest first."""
    r = REJECTIONS.c
    query = select(REJECTIONS).where(r.workflow_id == workflow_id)
    with available("rejections"), engine.connect() as conn:
        return [dict(x) for x in conn.execute(query.order_by(r.kafka_offset)).mappings()]


def refusal_of(engine: Engine, workflow_id: str, command_id: str) -> tuple[str, bool] | None:
    """The decider's refusal of one command, once the read model reflects it: its reason and
    whether it was refused outside any history (the workflow has none: ADR 11) rather than by
    the workflow (``command.rejected``); None when the command was accepted."""
    r, e = REJECTIONS.c, EVENTS.c
    outside = select(r.reason).where(r.workflow_id == workflow_id, r.command_id == command_id)
    inside = select(e.payload).where(
        e.workflow_id == workflow_id,
        e.type == "command.rejected",
        e.causation_id == command_id,
    )
    with available("rejections"), engine.connect() as conn:
        reason = conn.execute(outside.limit(1)).scalar()
        if reason is not None:
            return str(reason), True
        payload = conn.execute(inside.limit(1)).scalar()
    if payload is None:
        return None
    return str(payload.get("reason") if isinstance(payload, dict) else payload), False


SORTABLE = frozenset(
    {"created_at", "updated_at", "ended_at", "name", "status", "priority", "workflow_id"}
)


@dataclass(frozen=True)
class WorkflowFilter:
    """Conjunction of conditions on workflow rows; an empty tuple or None means any."""

    names: tuple[str, ...] = ()
    versions: tuple[int, ...] = ()
    statuses: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    correlation_ids: tuple[str, ...] = ()
    ids: tuple[str, ...] | None = None  # None: any id; (): no row (free text matched nothing)
    parent_workflow_id: str | None = None
    created_from: datetime | None = None  # inclusive
    created_to: datetime | None = None  # exclusive
    updated_from: datetime | None = None
    updated_to: datetime | None = None


# Each condition a filter can set, on a bind parameter named after its field: ``apply_filter``
# writes them with the filter's values; ``pages`` writes a shape of them once and binds each
# request's values (``filter_params``), so the rule for a field lives here alone.
_C = WORKFLOWS.c
CONDITIONS: dict[str, Callable[[BindParameter[Any]], ColumnElement[bool]]] = {
    "names": _C.name.in_,
    "versions": _C.def_version.in_,
    "statuses": _C.status.in_,
    "tenants": _C.tenant.in_,
    "correlation_ids": _C.correlation_id.in_,
    "ids": _C.workflow_id.in_,
    "parent_workflow_id": lambda p: _C.parent_workflow_id == p,
    "created_from": lambda p: _C.created_at >= p,
    "created_to": lambda p: _C.created_at < p,
    "updated_from": lambda p: _C.updated_at >= p,
    "updated_to": lambda p: _C.updated_at < p,
}
LISTS = frozenset({"names", "versions", "statuses", "tenants", "correlation_ids", "ids"})


def filter_params(f: WorkflowFilter, suffix: str = "") -> dict[str, Any]:
    """The conditions ``f`` sets, as bind parameter (field + ``suffix``) -> value, in
    ``CONDITIONS``' order: its keys are the filter's shape. An empty list constrains nothing,
    except ``ids``: () there matches no row (None: any)."""
    found: dict[str, Any] = {}
    for field in CONDITIONS:
        value = getattr(f, field)
        if field == "ids" and value is not None:
            found[field + suffix] = list(value)
        elif field in LISTS:
            if value:
                found[field + suffix] = list(value)
        elif value is not None:
            found[field + suffix] = value
    return found


def where(
    query: Select[Any],
    fields: Iterable[str],
    suffix: str = "",
    values: Mapping[str, Any] | None = None,
) -> Select[Any]:
    """``query`` with the condition of each field in ``fields``, on ``bindparam(field +
    suffix)``, holding its entry of ``values`` when given (else bound at execution)."""
    for field in fields:
        name = field + suffix
        expanding = field in LISTS
        param: BindParameter[Any]
        if values is None:
            param = bindparam(name, expanding=expanding)
        else:
            param = bindparam(name, values[name], expanding=expanding)
        query = query.where(CONDITIONS[field](param))
    return query


def apply_filter(query: Select[Any], f: WorkflowFilter) -> Select[Any]:
    values = filter_params(f)
    return where(query, values, values=values)


def ordering(sort: Sequence[tuple[str, bool]]) -> list[ColumnElement[Any]]:
    """``sort``'s (column, descending) pairs as an ORDER BY over ``SORTABLE`` columns, ties
    broken by workflow id (so pages never overlap)."""
    c = WORKFLOWS.c
    order = []
    for column, descending in sort:
        if column not in SORTABLE:
            raise ValueError(f"cannot sort by {column!r}; choose from {sorted(SORTABLE)}")
        order.append(c[column].desc() if descending else c[column].asc())
    return [*order, c.workflow_id.asc()]


def search_workflows(
    engine: Engine,
    f: WorkflowFilter,
    start: int = 0,
    size: int = 100,
    sort: Sequence[tuple[str, bool]] = (("created_at", True),),
) -> tuple[int, list[Row]]:
    """One page of rows matching ``f`` and their total; ``sort`` is (column, descending) pairs
    over ``SORTABLE`` (ties broken by workflow id, so pages never overlap)."""
    order = ordering(sort)
    rows_query = apply_filter(select(WORKFLOWS), f).order_by(*order).offset(start).limit(size)
    total_query = apply_filter(select(func.count()).select_from(WORKFLOWS), f)
    with available("search"), engine.connect() as conn:
        total = int(conn.execute(total_query).scalar_one())
        rows = [dict(r) for r in conn.execute(rows_query).mappings()]
    return total, rows


def status_counts(engine: Engine, f: WorkflowFilter) -> dict[str, int]:
    """Rows matching ``f`` per status."""
    query = apply_filter(select(WORKFLOWS.c.status, func.count()), f).group_by(WORKFLOWS.c.status)
    with available("count"), engine.connect() as conn:
        return {str(s): int(n) for s, n in conn.execute(query)}


def _filtered(
    query: Select[Any],
    status: str | None,
    name: str | None,
    tenant: str | None,
    since: datetime | None,
) -> Select[Any]:
    for column, value in (("status", status), ("name", name), ("tenant", tenant)):
        if value is not None:
            query = query.where(WORKFLOWS.c[column] == value)
    if since is not None:
        query = query.where(WORKFLOWS.c.created_at >= since)
    return query


def workflows(
    engine: Engine,
    status: str | None = None,
    name: str | None = None,
    tenant: str | None = None,
    since: datetime | None = None,
    limit: int = 50,
) -> list[Row]:
    query = select(WORKFLOWS).order_by(WORKFLOWS.c.created_at.desc()).limit(limit)
    query = _filtered(query, status, name, tenant, since)
    with available("query"), engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def count_workflows(
    engine: Engine,
    status: str | None = None,
    name: str | None = None,
    tenant: str | None = None,
    since: datetime | None = None,
) -> dict[str, int]:
    """Counts by status (with the same filters as ``workflows``)."""
    query = select(WORKFLOWS.c.status, func.count()).group_by(WORKFLOWS.c.status)
    query = _filtered(query, status, name, tenant, since)
    with available("count"), engine.connect() as conn:
        return {str(s): int(n) for s, n in conn.execute(query)}


def total_workflows(engine: Engine) -> int:
    with available("count"), engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(WORKFLOWS)).scalar_one())


def reflected(engine: Engine, projection: str = "pg") -> dict[str, dict[int, int]]:
    """Which offsets the rows reflect: topic -> partition -> next offset."""
    c = CHECKPOINTS.c
    with available("checkpoints"), engine.connect() as conn:
        rows = conn.execute(
            select(c.topic, c.kafka_partition, c.next_offset).where(c.projection == projection)
        )
        out: dict[str, dict[int, int]] = {}
        for topic, part, offset in rows:
            out.setdefault(str(topic), {})[int(part)] = int(offset)
        return out


# -- the console (issue 14 item 4) -----------------------------------------------------------
# Events the console's history lists under "failed only": failures, refusals, lost leases.
FAILED_EVENTS = frozenset(
    {
        "workflow.ending",
        "workflow.rejected",
        "command.rejected",
        "task.failed",
        "task.timed_out",
        "task.completed_with_errors",
        "task.completion_rejected",
        "task.lease_expired",
    }
)


def history(
    engine: Engine,
    workflow_id: str,
    start: int = 0,
    size: int = 2000,
    failed_only: bool = False,
) -> list[Row]:
    """One page of the workflow's archived events in order, from seq ``start`` (its primary
    key's prefix: one index range); ``failed_only`` keeps ``FAILED_EVENTS``."""
    e = EVENTS.c
    query = select(EVENTS).where(e.workflow_id == workflow_id, e.seq >= start)
    if failed_only:
        query = query.where(e.type.in_(sorted(FAILED_EVENTS)))
    with available("history"), engine.connect() as conn:
        rows = conn.execute(query.order_by(e.seq).limit(size)).mappings()
        return [dict(r) for r in rows]


OUTCOMES = ("task.completed", "task.failed")  # the events that carry a worker's logs (ADR 60)


def task_outcomes(engine: Engine, workflow_id: str, task_ids: Iterable[str]) -> dict[str, Row]:
    """The log lines and traceback a worker sent with each task attempt's outcome, by task
    id: ``{"logs": [...], "traceback": str, "at": time}``, read from the outcome events in
    the archive (the workflow's key prefix, two event types), so a rebuild or a replay keeps
    them with everything else. Attempts without an outcome event are absent."""
    wanted = set(task_ids)
    if not wanted:
        return {}
    e = EVENTS.c
    query = select(e.payload, e.occurred_at).where(
        e.workflow_id == workflow_id,
        e.type.in_(OUTCOMES),
        e.payload["task_id"].astext.in_(sorted(wanted)),
    )
    out: dict[str, Row] = {}
    with available("task logs"), engine.connect() as conn:
        for payload, at in conn.execute(query):
            task_id = payload.get("task_id")
            if task_id in wanted:
                out[task_id] = {
                    "logs": list(payload.get("logs") or []),
                    "traceback": str(payload.get("traceback") or ""),
                    "at": at,
                }
    return out


def task_row(engine: Engine, task_id: str) -> Row | None:
    with available("task"), engine.connect() as conn:
        found = conn.execute(select(TASKS).where(TASKS.c.task_id == task_id)).mappings().first()
        return dict(found) if found else None


def started_definition(engine: Engine, workflow_id: str) -> Row | None:
    """The payload of the workflow's ``workflow.started`` event (the definition it runs)."""
    e = EVENTS.c
    query = (
        select(e.payload)
        .where(e.workflow_id == workflow_id, e.type == "workflow.started")
        .order_by(e.seq)
        .limit(1)
    )
    with available("history"), engine.connect() as conn:
        payload = conn.execute(query).scalar_one_or_none()
        return dict(payload) if payload is not None else None


def workflow_ids(engine: Engine, f: WorkflowFilter, limit: int) -> list[str]:
    """Ids of up to ``limit`` rows matching ``f`` (a bulk action on everything a filter shows)."""
    c = WORKFLOWS.c
    query = apply_filter(select(c.workflow_id), f).order_by(c.created_at.desc(), c.workflow_id)
    with available("search"), engine.connect() as conn:
        return [str(i) for i in conn.execute(query.limit(limit)).scalars()]


def newest_workflows(engine: Engine, f: WorkflowFilter, start: int, size: int) -> list[Row]:
    """One page of rows matching ``f``, newest first, without counting them: the console
    already has the total from ``status_counts`` (one scan of the matching rows, not two)."""
    c = WORKFLOWS.c
    query = apply_filter(select(WORKFLOWS), f).order_by(c.created_at.desc(), c.workflow_id.asc())
    with available("search"), engine.connect() as conn:
        rows = conn.execute(query.offset(start).limit(size)).mappings()
        return [dict(r) for r in rows]


def queues(engine: Engine) -> list[Row]:
    """The backlog per task type and workflow priority, as the read model sees it.

    "Queued" here is a task row in ``SCHEDULED`` that no lease holds (``worker_id`` is null):
    the decider scheduled it (its ready record is on the ready topic) and no dispatcher has
    placed it yet, or a lease on it expired. That is the dispatcher's in-memory queue plus
    ready records it has not read yet, summed over every dispatcher, as of the events the rows
    reflect; a task leased and not yet started (``SCHEDULED`` with a worker) is counted apart
    as ``leased``. The priority is the workflow's (tasks carry their workflow's). Rows:
    ``task_type, priority, depth, leased, oldest`` (the earliest ``scheduled_at`` of the
    queued tasks, None when only leased ones wait).
    """
    t, w = TASKS.c, WORKFLOWS.c
    unleased = t.worker_id.is_(None)
    query = (
        select(
            t.task_type,
            w.priority,
            func.count().filter(unleased).label("depth"),
            func.count().filter(t.worker_id.is_not(None)).label("leased"),
            func.min(t.scheduled_at).filter(unleased).label("oldest"),
        )
        .select_from(TASKS.join(WORKFLOWS, w.workflow_id == t.workflow_id))
        .where(t.status == "SCHEDULED")
        .group_by(t.task_type, w.priority)
        .order_by(t.task_type, w.priority)
    )
    with available("queues"), engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]


def parked_tasks(engine: Engine, limit: int = 200) -> list[Row]:
    """The review queue (ADR 71): tasks parked for an operator, oldest first, each the newest
    attempt of its reference in a workflow still open, with the workflow's name and status."""
    t, w = TASKS.c, WORKFLOWS.c
    query = (
        select(TASKS, w.name.label("workflow_name"), w.status.label("workflow_status"))
        .select_from(TASKS.join(WORKFLOWS, w.workflow_id == t.workflow_id))
        .where(t.status == "PARKED_FOR_REVIEW", t.retried.is_(False))
        .where(w.status.in_(("RUNNING", "PAUSED")))
        .order_by(t.scheduled_at, t.task_id)
        .limit(limit)
    )
    with available("status"), engine.connect() as conn:
        return [dict(r) for r in conn.execute(query).mappings()]
