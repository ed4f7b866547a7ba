"""The PostgreSQL read models (SQLAlchemy 2): workflows, tasks (one row per attempt), the
append-only event archive, refusals outside any history and the projection checkpoints.

Tables carry no schema name: every connection's ``search_path`` is the projection's schema
(``ES_SCHED_PG_SCHEMA_NAME``, default ``es_sched``), so a rebuild can fill a fresh schema and
switch over by renaming schemas in one transaction (``es_sched.projections.postgres.store``). The
migrations under ``migrations/`` create exactly these tables; a unit test compares them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    Index,
    Integer,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

JSON = dict[str, Any]


class Base(DeclarativeBase):
    type_annotation_map = {  # noqa: RUF012
        datetime: DateTime(timezone=True),
        JSON: JSONB,
        str: Text,
    }


class Workflow(Base):
    __tablename__ = "workflows"

    workflow_id: Mapped[str] = mapped_column(primary_key=True)
    name: Mapped[str]
    def_version: Mapped[int] = mapped_column(Integer)
    tenant: Mapped[str | None]
    priority: Mapped[int] = mapped_column(SmallInteger)
    status: Mapped[str]
    ending: Mapped[str | None]
    reason: Mapped[str]
    correlation_id: Mapped[str]
    parent_workflow_id: Mapped[str | None]
    input: Mapped[JSON]  # or a reference to the archived event when large
    output: Mapped[JSON]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    ended_at: Mapped[datetime | None]
    version: Mapped[int] = mapped_column(BigInteger)  # seq of the last event applied

    __table_args__ = (
        Index("ix_workflows_status_created", "status", "created_at"),
        Index("ix_workflows_name_created", "name", "created_at"),
        Index("ix_workflows_tenant_created", "tenant", "created_at"),
        Index("ix_workflows_created", "created_at"),
        Index("ix_workflows_correlation_created", "correlation_id", "created_at"),
        Index("ix_workflows_name_status_version", "name", "status", "def_version"),
    )


class Task(Base):
    __tablename__ = "tasks"

    task_id: Mapped[str] = mapped_column(primary_key=True)
    workflow_id: Mapped[str] = mapped_column(index=True)
    ref: Mapped[str]
    name: Mapped[str]
    task_type: Mapped[str]
    attempt: Mapped[int] = mapped_column(Integer)
    iteration: Mapped[int] = mapped_column(Integer)
    status: Mapped[str]
    worker_id: Mapped[str | None]
    lease_epoch: Mapped[int] = mapped_column(Integer)
    reason: Mapped[str]
    resources: Mapped[JSON]
    input: Mapped[JSON]
    output: Mapped[JSON]
    progress: Mapped[float] = mapped_column(Float)
    scheduled_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    retried: Mapped[bool] = mapped_column(Boolean)
    version: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (  # the backlog only (``queries.queues``; migration 0004)
        Index(
            "ix_tasks_scheduled_type",
            "task_type",
            "scheduled_at",
            postgresql_where=text("status = 'SCHEDULED'"),
        ),
        # The review queue (``queries.parked_tasks``, ADR 71; migration 0007).
        Index(
            "ix_tasks_parked",
            "scheduled_at",
            postgresql_where=text("status = 'PARKED_FOR_REVIEW'"),
        ),
    )


class ArchivedEvent(Base):
    """Every event as the log has it: the auditors' second copy and the target of references."""

    __tablename__ = "events"

    workflow_id: Mapped[str] = mapped_column(primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    event_id: Mapped[str]
    type: Mapped[str]
    occurred_at: Mapped[datetime]
    causation_id: Mapped[str]
    correlation_id: Mapped[str]
    payload: Mapped[JSON]
    kafka_partition: Mapped[int] = mapped_column(Integer)
    kafka_offset: Mapped[int] = mapped_column(BigInteger)
    actor: Mapped[str | None]  # who caused it (the envelope's optional actor, ADR 27)


class Rejection(Base):
    """A refusal outside any history (``workflow.rejected``): the answer a sender of an input
    for a workflow with no history gets; never a workflow row (ADR 11)."""

    __tablename__ = "rejections"

    event_id: Mapped[str] = mapped_column(primary_key=True)
    workflow_id: Mapped[str] = mapped_column(index=True)
    command_id: Mapped[str]
    command_type: Mapped[str]
    reason: Mapped[str]
    occurred_at: Mapped[datetime]
    payload: Mapped[JSON]  # the event's payload (name, version, every problem)
    kafka_partition: Mapped[int] = mapped_column(Integer)
    kafka_offset: Mapped[int] = mapped_column(BigInteger)
    actor: Mapped[str | None]


class Checkpoint(Base):
    """The next offset to project, per (projection, topic, partition), written in the same
    transaction as the rows; ``duplicates_skipped`` counts re-delivered records skipped."""

    __tablename__ = "checkpoints"

    projection: Mapped[str] = mapped_column(primary_key=True)
    topic: Mapped[str] = mapped_column(primary_key=True)
    kafka_partition: Mapped[int] = mapped_column(Integer, primary_key=True)
    next_offset: Mapped[int] = mapped_column(BigInteger)
    duplicates_skipped: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime]


WORKFLOWS = cast(Table, Workflow.__table__)
TASKS = cast(Table, Task.__table__)
EVENTS = cast(Table, ArchivedEvent.__table__)
CHECKPOINTS = cast(Table, Checkpoint.__table__)
REJECTIONS = cast(Table, Rejection.__table__)
