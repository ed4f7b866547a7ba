"""Queries over the PostgreSQL read models, for the CLI and the console."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Select, func, select

from es_sched.projections.postgres.models import CHECKPOINTS, REJECTIONS, TASKS, WORKFLOWS
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
