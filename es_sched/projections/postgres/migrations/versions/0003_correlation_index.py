"""An index for Conductor's ``correlationId = X`` search (``/api/workflow/search``), newest
first: without it, a correlation id matching few of 100k workflows scans them all.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_workflows_correlation_created", "workflows", ["correlation_id", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_workflows_correlation_created", table_name="workflows")
