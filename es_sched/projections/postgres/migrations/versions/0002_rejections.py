"""Refusals outside any history (``workflow.rejected``, seq 0): one row per refusal event.

They cannot share the event archive, keyed by (workflow_id, seq): every refusal has seq 0,
and one workflow id may be refused several times (ADR 11).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rejections",
        sa.Column("event_id", sa.Text, primary_key=True),
        sa.Column("workflow_id", sa.Text, nullable=False),
        sa.Column("command_id", sa.Text, nullable=False),
        sa.Column("command_type", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", JSONB, nullable=False),
        sa.Column("kafka_partition", sa.Integer, nullable=False),
        sa.Column("kafka_offset", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_rejections_workflow_id", "rejections", ["workflow_id"])


def downgrade() -> None:
    op.drop_table("rejections")
