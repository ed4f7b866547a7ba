"""Helpers for the projection tests: a PostgreSQL schema per test, the rows a store holds, and
the rows the log says it should hold (``views.fold_rows`` over the events topic).

An ``Env`` names its own schema and search index prefix (``testkit.settings``), so every
projector role a test starts writes there; ``dropped_schemas`` removes them afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import select, text

from es_sched.errors import EsSchedError
from es_sched.projections.postgres.models import CHECKPOINTS, EVENTS, TASKS, WORKFLOWS
from es_sched.projections.postgres.store import engine_for
from es_sched.projections.search.store import SearchStore
from es_sched.projections.views import Row, comparable, fold_rows
from testkit.runtime import Env, histories, media_inputs


@contextmanager
def dropped_schemas(env: Env) -> Iterator[None]:
    """Drop every schema and search index of this test (live, rebuilds, retired) afterwards."""
    try:
        yield
    finally:
        _drop_indices(env)
        engine = engine_for(env.settings, "public")
        with engine.begin() as conn:
            names = conn.execute(
                text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :p"),
                {"p": f"{env.prefix}%"},
            ).scalars()
            for name in list(names):
                conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        engine.dispose()


def pg_rows(env: Env, schema: str | None = None) -> tuple[list[Row], list[Row], int]:
    engine = engine_for(env.settings, schema)
    with engine.connect() as conn:
        wfs = [dict(r) for r in conn.execute(select(WORKFLOWS)).mappings()]
        tasks = [dict(r) for r in conn.execute(select(TASKS)).mappings()]
        archived = len(conn.execute(select(EVENTS.c.seq)).all())
    engine.dispose()
    return wfs, tasks, archived


def pg_checkpoints(env: Env) -> list[Row]:
    engine = engine_for(env.settings)
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(CHECKPOINTS)).mappings()]
    engine.dispose()
    return rows


def expected_rows(env: Env) -> tuple[list[Row], list[Row], int]:
    by_wf = histories(env)  # refusals (ADR 11) are no workflow's rows, nor in the archive
    wfs: list[Row] = []
    tasks: list[Row] = []
    count = 0
    for events in by_wf.values():
        count += len(events)
        rows = fold_rows(events)
        assert rows is not None
        wfs.append(rows.workflow)
        tasks += rows.tasks.values()
    return wfs, tasks, count


def by_id(rows: list[Row], key: str) -> dict[str, Row]:
    return {str(r[key]): comparable(r) for r in rows}


def _drop_indices(env: Env) -> None:
    from es_sched.projections.search.store import SearchStore  # noqa: PLC0415

    store = SearchStore(env.settings)
    try:
        store.drop()
    except EsSchedError:
        pass  # the search engine is down or was never used by this test
    finally:
        store.close()


def projected(env: Env) -> bool:
    """The PostgreSQL rows and archive equal the fold of the events topic."""
    want_wf, want_tasks, want_events = expected_rows(env)
    have_wf, have_tasks, archived = pg_rows(env)
    return (
        archived == want_events
        and by_id(have_wf, "workflow_id") == by_id(want_wf, "workflow_id")
        and by_id(have_tasks, "task_id") == by_id(want_tasks, "task_id")
    )


def search_equal(env: Env) -> bool:
    """The search engine holds exactly the documents the fold of the log gives."""
    want_wf, want_tasks, _ = expected_rows(env)
    store = SearchStore(env.settings)
    try:
        loaded = store.load([str(w["workflow_id"]) for w in want_wf])
        have_wf = [r.workflow for r in loaded.values()]
        have_tasks = [t for r in loaded.values() for t in r.tasks.values()]
        store.refresh()
        counts = (store.count("workflow"), store.count("task"))
    finally:
        store.close()
    return (
        by_id(have_wf, "workflow_id") == by_id(want_wf, "workflow_id")
        and by_id(have_tasks, "task_id") == by_id(want_tasks, "task_id")
        and counts == (len(want_wf), len(want_tasks))
    )


def submit_for(env: Env, seconds: float) -> None:
    """A steady stream of media workflows (2 a second) for ``seconds``, through the client."""
    end, i = time.monotonic() + seconds, 0
    with env.client() as client:
        while time.monotonic() < end:
            client.submit_many("media_pipeline", media_inputs(2, tag=f"load{i}-"))
            i += 1
            time.sleep(1.0)  # the pace of the load, not a synchronisation
