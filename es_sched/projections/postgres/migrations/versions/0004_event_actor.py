"""Who caused an event: the envelope's optional ``actor`` in the event archive and rejections.

The archive keeps the envelope as the log has it; ``actor`` (the command's caller, ADR 27) is
NULL for events without one (runtime inputs, and everything written before it existed).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("events", sa.Column("actor", sa.Text, nullable=True))
    op.add_column("rejections", sa.Column("actor", sa.Text, nullable=True))


def downgrade() -> None:
    op.drop_column("rejections", "actor")
    op.drop_column("events", "actor")
