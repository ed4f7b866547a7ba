"""An index for Conductor's ``workflowType`` searches with a status or a version (and the
console's name filter with its counts per status): ``(name, status, def_version)``.

Counting ``workflowType = X AND status IN (...)`` to its cap (ADR 38) went through
``ix_workflows_name_created`` and the heap, or a bitmap scan, with or without a version; this
index makes either an index-only scan, several times cheaper on a large read model.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_workflows_name_status_version", "workflows", ["name", "status", "def_version"]
    )


def downgrade() -> None:
    op.drop_index("ix_workflows_name_status_version", table_name="workflows")
