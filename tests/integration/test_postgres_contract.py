"""PostgreSQL contract through SQLAlchemy 2 and psycopg 3.

Projections rely on: a transaction that commits is visible, one that rolls back leaves nothing,
and ``INSERT ... ON CONFLICT DO UPDATE ... WHERE version < excluded.version`` never lets an older
version overwrite a newer one. Each test works in its own schema.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, create_engine, text

from tests.integration.backends import Backend


@pytest.fixture
def schema_engine(backend: Backend, unique: str) -> Iterator[tuple[Engine, str]]:
    engine = create_engine(backend.pg_url)
    assert engine.dialect.driver == "psycopg"
    with engine.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{unique}"'))
        conn.execute(
            text(
                f'CREATE TABLE "{unique}".workflows ('
                "workflow_id text PRIMARY KEY, status text NOT NULL, version int NOT NULL)"
            )
        )
    try:
        yield engine, unique
    finally:
        with engine.begin() as conn:
            conn.execute(text(f'DROP SCHEMA "{unique}" CASCADE'))
        engine.dispose()


def test_commit_is_visible_and_rollback_leaves_nothing(
    schema_engine: tuple[Engine, str],
) -> None:
    engine, schema = schema_engine
    with engine.begin() as conn:
        conn.execute(text(f"INSERT INTO \"{schema}\".workflows VALUES ('wf-1', 'RUNNING', 1)"))

    with engine.connect() as conn:
        tx = conn.begin()
        conn.execute(text(f"INSERT INTO \"{schema}\".workflows VALUES ('wf-2', 'RUNNING', 1)"))
        tx.rollback()

    with engine.connect() as conn:
        rows = conn.execute(text(f'SELECT workflow_id FROM "{schema}".workflows')).all()
    assert [r.workflow_id for r in rows] == ["wf-1"]


def test_version_guarded_upsert_never_regresses(schema_engine: tuple[Engine, str]) -> None:
    engine, schema = schema_engine
    upsert = text(
        f'INSERT INTO "{schema}".workflows AS w VALUES (:id, :status, :version) '
        "ON CONFLICT (workflow_id) DO UPDATE SET status = excluded.status, "
        "version = excluded.version WHERE w.version < excluded.version"
    )
    applied = []
    for status, version in (("RUNNING", 2), ("COMPLETED", 5), ("RUNNING", 3)):
        with engine.begin() as conn:
            result = conn.execute(upsert, {"id": "wf-1", "status": status, "version": version})
            applied.append(result.rowcount)
    assert applied == [1, 1, 0]
    with engine.connect() as conn:
        row = conn.execute(text(f'SELECT status, version FROM "{schema}".workflows')).one()
    assert (row.status, row.version) == ("COMPLETED", 5)
