"""The review queue (ADR 71): tasks parked for an operator, found without scanning every task.

A partial index on ``tasks(scheduled_at)`` for ``status = 'PARKED_FOR_REVIEW'``: parked tasks
are few among many, and the console and ``GET /api/v1/review`` list them oldest first.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-07
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_tasks_parked",
        "tasks",
        ["scheduled_at"],
        postgresql_where=sa.text("status = 'PARKED_FOR_REVIEW'"),
    )


def downgrade() -> None:
    op.drop_index("ix_tasks_parked", table_name="tasks")
