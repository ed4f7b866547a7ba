"""Queries over the PostgreSQL read models, for the CLI, the HTTP API and the console.

``WorkflowFilter`` is the one shape every workflow list asks in: the CLI's ``query`` options,
Conductor's search query (parsed in ``es_sched.api``), the console's filter form. Its free text
is resolved by the caller against the search store into ``ids`` first (PostgreSQL keeps no
text index over inputs and outputs).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, ScalarSelect, Select, func, literal_column, select

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


def apply_filter(query: Select[Any], f: WorkflowFilter) -> Select[Any]:
    c = WORKFLOWS.c
    for column, values in (
        (c.name, f.names),
        (c.def_version, f.versions),
        (c.status, f.statuses),
        (c.tenant, f.tenants),
        (c.correlation_id, f.correlation_ids),
    ):
        if values:
            query = query.where(column.in_(values))
    if f.ids is not None:
        query = query.where(c.workflow_id.in_(f.ids))
    if f.parent_workflow_id is not None:
        query = query.where(c.parent_workflow_id == f.parent_workflow_id)
    for column, low, high in (
        (c.created_at, f.created_from, f.created_to),
        (c.updated_at, f.updated_from, f.updated_to),
    ):
        if low is not None:
            query = query.where(column >= low)
        if high is not None:
            query = query.where(column < high)
    return query


def search_workflows(
    engine: Engine,
    f: WorkflowFilter,
    start: int = 0,
    size: int = 100,
    sort: Sequence[tuple[str, bool]] = (("created_at", True),),
) -> tuple[int, list[Row]]:
    """One page of rows matching ``f`` and their total; ``sort`` is (column, descending) pairs
    over ``SORTABLE`` (ties broken by workflow id, so pages never overlap)."""
    c = WORKFLOWS.c
    order = []
    for column, descending in sort:
        if column not in SORTABLE:
            raise ValueError(f"cannot sort by {column!r}; choose from {sorted(SORTABLE)}")
        order.append(c[column].desc() if descending else c[column].asc())
    order.append(c.workflow_id.asc())
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
    query: Select[Any], status: str | None, name: str | None, tenant: str | None,
    since: datetime | None,
) -> Select[Any]:  # fmt: skip
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
        "workflow.ending", "workflow.rejected", "command.rejected", "task.failed",
        "task.timed_out", "task.completed_with_errors", "task.completion_rejected",
        "task.lease_expired",
    }
)  # fmt: skip


def history(
    engine: Engine, workflow_id: str, start: int = 0, size: int = 2000,
    failed_only: bool = False,
) -> list[Row]:  # fmt: skip
    """One page of the workflow's archived events in order, from seq ``start`` (its primary
    key's prefix: one index range); ``failed_only`` keeps ``FAILED_EVENTS``."""
    e = EVENTS.c
    query = select(EVENTS).where(e.workflow_id == workflow_id, e.seq >= start)
    if failed_only:
        query = query.where(e.type.in_(sorted(FAILED_EVENTS)))
    with available("history"), engine.connect() as conn:
        rows = conn.execute(query.order_by(e.seq).limit(size)).mappings()
        return [dict(r) for r in rows]


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


# -- reads sized for the API at 100k rows (issue 14 item 6) ----------------------------------
@contextmanager
def snapshot(engine: Engine, what: str) -> Iterator[Connection]:
    """One connection, one REPEATABLE READ transaction: every query in it sees the same rows,
    so a count and the page it counts agree even while projectors write."""
    with available(what), engine.connect() as conn:
        conn.execution_options(isolation_level="REPEATABLE READ")
        with conn.begin():
            yield conn


def _capped_count(f: WorkflowFilter, limit: int) -> ScalarSelect[Any]:
    """How many rows match ``f``, counting at most ``limit + 1`` (one past: "more than")."""
    matching = apply_filter(select(literal_column("1")).select_from(WORKFLOWS), f)
    return select(func.count()).select_from(matching.limit(limit + 1).subquery()).scalar_subquery()


def _ordered(
    query: Select[Any], sort: Sequence[tuple[str, bool]], start: int, size: int
) -> Select[Any]:
    c = WORKFLOWS.c
    order = []
    for column, descending in sort:
        if column not in SORTABLE:
            raise ValueError(f"cannot sort by {column!r}; choose from {sorted(SORTABLE)}")
        order.append(c[column].desc() if descending else c[column].asc())
    return query.order_by(*order, c.workflow_id.asc()).offset(start).limit(size)


def search_statements(
    f: WorkflowFilter, start: int, size: int, sort: Sequence[tuple[str, bool]], cap: int
) -> tuple[Select[Any], Select[Any]]:
    """``search_page``'s two statements: its capped count and its page (ADR 37 runs them on
    asyncio too)."""
    count = select(_capped_count(f, start + cap))
    return count, _ordered(apply_filter(select(WORKFLOWS), f), sort, start, size)


def capped(total: int, start: int, cap: int) -> tuple[int, bool]:
    """A count made by ``_capped_count``: (at most ``start + cap``, whether it stopped there)."""
    return min(total, start + cap), total > start + cap


def search_page(
    engine: Engine, f: WorkflowFilter, start: int, size: int,
    sort: Sequence[tuple[str, bool]], cap: int,
) -> tuple[int, bool, list[Row]]:  # fmt: skip
    """``search_workflows`` with a bounded total: (total, capped, rows). The total counts at
    most ``start + cap`` rows (an exact count scans every match: 58k rows for one status at
    100k workflows); ``capped`` says there are more. Count and page share one snapshot."""
    count, page = search_statements(f, start, size, sort, cap)
    with snapshot(engine, "search") as conn:
        total = int(conn.execute(count).scalar_one())
        rows = [dict(r) for r in conn.execute(page).mappings()]
    return *capped(total, start, cap), rows


def console_statements(
    f: WorkflowFilter, statuses: Sequence[str], start: int, size: int, cap: int
) -> tuple[Select[Any], Select[Any]]:
    """``console_page``'s two statements: one row of a capped count per status in
    ``statuses`` (over ``f`` without its statuses), and the page of ``f``'s rows."""
    others = replace(f, statuses=())
    limit = start + cap
    counted = select(*(_capped_count(replace(others, statuses=(s,)), limit) for s in statuses))
    page = _ordered(apply_filter(select(WORKFLOWS), f), (("created_at", True),), start, size)
    return counted, page


def console_counts(
    statuses: Sequence[str], found: Sequence[int], start: int, cap: int
) -> tuple[dict[str, int], frozenset[str]]:
    """The counts per status a ``console_statements`` count row holds, and the statuses whose
    count stopped at ``start + cap``."""
    seen = {s: capped(int(n), start, cap) for s, n in zip(statuses, found, strict=True) if n}
    return {s: n for s, (n, _) in seen.items()}, frozenset(s for s, (_, c) in seen.items() if c)


def console_page(
    engine: Engine, f: WorkflowFilter, statuses: Sequence[str], start: int, size: int,
    cap: int,
) -> tuple[dict[str, int], frozenset[str], list[Row]]:  # fmt: skip
    """The console's list: rows matching ``f`` per status in ``statuses`` (over ``f`` without
    its statuses, each counted to at most ``start + cap``: one index range per status, not a
    scan of the table), the statuses whose count stopped there, and one page of ``f``'s rows,
    newest first; all in one snapshot, so the counts and the page agree."""
    counted, page = console_statements(f, statuses, start, size, cap)
    with snapshot(engine, "count") as conn:
        found = conn.execute(counted).one() if statuses else ()
        rows = [dict(r) for r in conn.execute(page).mappings()]
    return *console_counts(statuses, found, start, cap), rows
