"""Alembic environment: migrate the schema named in ``config.attributes["schema"]`` over the
connection in ``config.attributes["connection"]``
(``es_sched.projections.postgres.store.migrate``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import text

from es_sched.projections.postgres.models import Base

config = context.config
connection = config.attributes["connection"]
schema = config.attributes["schema"]
connection.execute(text(f'CREATE SCHEMA IF NOT EXISTS "{schema}"'))
connection.execute(text(f'SET search_path TO "{schema}"'))
context.configure(connection=connection, target_metadata=Base.metadata, version_table_schema=schema)
with context.begin_transaction():
    context.run_migrations()
