"""Helpers for the projection tests: a PostgreSQL schema per test, the rows a store holds, and
the rows the log says it should hold (``views.fold_rows`` over the events topic)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select, text

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.errors import EsSchedError
from es_sched.projections.postgres.models import CHECKPOINTS, EVENTS, TASKS, WORKFLOWS
from es_sched.projections.postgres.store import engine_for
from es_sched.projections.views import Row, comparable, fold_rows
from es_sched.settings import (
    DispatchSettings,
    KafkaSettings,
    PostgresSettings,
    RuntimeSettings,
    SearchSettings,
    Settings,
    StackSettings,
)
from tests.integration.runtime_harness import BOOTSTRAP, Env, read_events


def settings_for(env: Env) -> Settings:
    return Settings(
        kafka=KafkaSettings(bootstrap_servers=BOOTSTRAP, topic_prefix=env.prefix,
                            partitions=env.partitions),
        postgres=PostgresSettings(schema_name=env.prefix),
        search=SearchSettings(index_prefix=f"es-sched-{env.prefix}"),
        stack=StackSettings(), runtime=RuntimeSettings(), dispatch=DispatchSettings(),
    )  # fmt: skip


def projection_env(**kw: Any) -> Env:
    env = Env(**kw)
    env.extra.update(
        {
            "ES_SCHED_PG_SCHEMA_NAME": env.prefix,
            "ES_SCHED_SEARCH_INDEX_PREFIX": f"es-sched-{env.prefix}",
        }
    )
    return env


@contextmanager
def dropped_schemas(env: Env) -> Iterator[None]:
    """Drop every schema and search index of this test (live, rebuilds, retired) afterwards."""
    try:
        yield
    finally:
        _drop_indices(env)
        engine = engine_for(settings_for(env), "public")
        with engine.begin() as conn:
            names = conn.execute(
                text("SELECT nspname FROM pg_namespace WHERE nspname LIKE :p"),
                {"p": f"{env.prefix}%"},
            ).scalars()
            for name in list(names):
                conn.execute(text(f'DROP SCHEMA "{name}" CASCADE'))
        engine.dispose()


def pg_rows(env: Env, schema: str | None = None) -> tuple[list[Row], list[Row], int]:
    engine = engine_for(settings_for(env), schema)
    with engine.connect() as conn:
        wfs = [dict(r) for r in conn.execute(select(WORKFLOWS)).mappings()]
        tasks = [dict(r) for r in conn.execute(select(TASKS)).mappings()]
        archived = len(conn.execute(select(EVENTS.c.seq)).all())
    engine.dispose()
    return wfs, tasks, archived


def pg_checkpoints(env: Env) -> list[Row]:
    engine = engine_for(settings_for(env))
    with engine.connect() as conn:
        rows = [dict(r) for r in conn.execute(select(CHECKPOINTS)).mappings()]
    engine.dispose()
    return rows


def expected_rows(env: Env) -> tuple[list[Row], list[Row], int]:
    by_wf = read_events(env)
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

    store = SearchStore(settings_for(env))
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


def submit_for(env: Env, seconds: float) -> None:
    """A steady stream of workflows (about 2 per second) for ``seconds``."""
    end, i = time.monotonic() + seconds, 0
    while time.monotonic() < end:
        starts = []
        for k in range(2):
            cid = f"load-{env.prefix}-{i}-{k}"
            doc = {"source_uri": f"file:///{i}-{k}.mp4", "asset_id": f"a{i}-{k}",
                   "callback_url": "http://cb"}  # fmt: skip
            starts.append(
                c.StartWorkflow(cid, workflow_id_for_command(cid), name="media_pipeline", input=doc)
            )
        env.send(starts)
        i += 1
        time.sleep(1.0)
