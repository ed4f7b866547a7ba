"""The backlog index: task rows still ``SCHEDULED``, by task type (``queries.queues``).

A partial index holds only the tasks that wait, so the queues view of ``GET /api/v1/queues``
and the console costs in proportion to the backlog, not to every task ever run.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_scheduled_type",
        "tasks",
        ["task_type", "scheduled_at"],
        postgresql_where=sa.text("status = 'SCHEDULED'"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_scheduled_type", table_name="tasks")
