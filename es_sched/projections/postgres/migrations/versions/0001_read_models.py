"""Read models: workflows, tasks, the event archive, checkpoints.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("workflow_id", sa.Text, primary_key=True),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("def_version", sa.Integer, nullable=False),
        sa.Column("tenant", sa.Text),
        sa.Column("priority", sa.SmallInteger, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("ending", sa.Text),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("correlation_id", sa.Text, nullable=False),
        sa.Column("parent_workflow_id", sa.Text),
        sa.Column("input", JSONB, nullable=False),
        sa.Column("output", JSONB, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("ended_at", TS),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_workflows_status_created", "workflows", ["status", "created_at"])
    op.create_index("ix_workflows_name_created", "workflows", ["name", "created_at"])
    op.create_index("ix_workflows_tenant_created", "workflows", ["tenant", "created_at"])
    op.create_index("ix_workflows_created", "workflows", ["created_at"])
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.Text, primary_key=True),
        sa.Column("workflow_id", sa.Text, nullable=False),
        sa.Column("ref", sa.Text, nullable=False),
        sa.Column("name", sa.Text, nullable=False),
        sa.Column("task_type", sa.Text, nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("iteration", sa.Integer, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("worker_id", sa.Text),
        sa.Column("lease_epoch", sa.Integer, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("resources", JSONB, nullable=False),
        sa.Column("input", JSONB, nullable=False),
        sa.Column("output", JSONB, nullable=False),
        sa.Column("progress", sa.Float, nullable=False),
        sa.Column("scheduled_at", TS, nullable=False),
        sa.Column("started_at", TS),
        sa.Column("ended_at", TS),
        sa.Column("retried", sa.Boolean, nullable=False),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_tasks_workflow_id", "tasks", ["workflow_id"])
    op.create_table(
        "events",
        sa.Column("workflow_id", sa.Text, primary_key=True),
        sa.Column("seq", sa.BigInteger, primary_key=True),
        sa.Column("event_id", sa.Text, nullable=False),
        sa.Column("type", sa.Text, nullable=False),
        sa.Column("occurred_at", TS, nullable=False),
        sa.Column("causation_id", sa.Text, nullable=False),
        sa.Column("correlation_id", sa.Text, nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("kafka_partition", sa.Integer, nullable=False),
        sa.Column("kafka_offset", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "checkpoints",
        sa.Column("projection", sa.Text, primary_key=True),
        sa.Column("topic", sa.Text, primary_key=True),
        sa.Column("kafka_partition", sa.Integer, primary_key=True),
        sa.Column("next_offset", sa.BigInteger, nullable=False),
        sa.Column("duplicates_skipped", sa.BigInteger, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
    )


def downgrade() -> None:
    for table in ("checkpoints", "events", "tasks", "workflows"):
        op.drop_table(table)
