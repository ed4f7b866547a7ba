"""``available``: what a PostgreSQL failure means to a reader. A missing table (a reader that
started before any projector migrated its schema, e.g. the HTTP API) is an outage the caller
can wait out (``StoreUnavailable``, a 503 from the API), not a programming error (a 500)."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy.exc import ProgrammingError

from es_sched.projections.postgres.store import available
from es_sched.projections.store import StoreUnavailable


def test_a_missing_table_is_an_unavailable_store() -> None:
    missing = ProgrammingError("SELECT 1 FROM checkpoints", {}, psycopg.errors.UndefinedTable())
    with pytest.raises(StoreUnavailable, match="do not exist yet"), available("checkpoints"):
        raise missing


def test_other_programming_errors_stay_bugs() -> None:
    syntax = ProgrammingError("SELEC 1", {}, psycopg.errors.SyntaxError())
    with pytest.raises(ProgrammingError), available("query"):
        raise syntax
