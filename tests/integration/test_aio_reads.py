"""The API's reads on asyncio against a real PostgreSQL (ADR 37).

``AsyncReads`` must answer exactly what ``queries`` answers (the rows the Conductor detail,
search and the console are built from): a workflow and its tasks (same keys, values, task
order), a search page with its capped total, the console's counts per status and page, over
filters that exercise every condition ``apply_filter`` writes.
The fault: ``pg_terminate_backend`` on every connection it keeps; what proves it fired is that
those backends are gone from ``pg_stat_activity``, and the next read ran on another backend.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import insert

from es_sched.projections.postgres import pages, queries
from es_sched.projections.postgres.aio import AsyncReads
from es_sched.projections.postgres.models import TASKS, WORKFLOWS
from es_sched.projections.postgres.queries import WorkflowFilter
from es_sched.projections.postgres.store import PgStore
from testkit.pg import terminate_backends
from testkit.settings import settings_with, unique_name

T0 = datetime(2026, 12, 2, 19, 0, tzinfo=UTC)


DSN = settings_with({}).postgres.libpq_dsn


@pytest.fixture
def store() -> Iterator[PgStore]:
    found = PgStore(settings_with({"ES_SCHED_PG_SCHEMA_NAME": unique_name()}))
    found.ensure()
    yield found
    found.engine.dispose()
    with psycopg.connect(DSN, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{found.schema}" CASCADE')


def _task(n: int) -> dict[str, object]:
    return {
        "task_id": f"t{n}",
        "workflow_id": "wf1",
        "ref": f"r{n}",
        "name": "transcode",
        "task_type": "transcode",
        "attempt": 1 + (n == 1),
        "iteration": 0,
        "status": "COMPLETED" if n else "FAILED",
        "worker_id": f"w{n}" if n else None,
        "lease_epoch": n,
        "reason": "" if n else "boom",
        "resources": {"cpu": 1},
        "input": {"height": 720 + n},
        "output": {"ok": n} if n else {},
        "progress": 0.25 * n,
        "scheduled_at": T0 + timedelta(seconds=3 - n),
        "started_at": T0 if n else None,
        "ended_at": T0 + timedelta(seconds=n),
        "retried": n == 0,
        "version": 10 - n,
    }


def _seed(store: PgStore) -> None:
    workflow = {
        "workflow_id": "wf1",
        "name": "media",
        "def_version": 3,
        "tenant": None,
        "priority": 2,
        "status": "RUNNING",
        "ending": None,
        "reason": "",
        "correlation_id": "c-1",
        "parent_workflow_id": None,
        "input": {"src": "s3://in/a.mp4", "n": [1, 2.5, None, True], "deep": {"é": "ü"}},
        "output": {},
        "created_at": T0,
        "updated_at": T0 + timedelta(seconds=3),
        "ended_at": None,
        "version": 7,
    }
    tasks = [_task(n) for n in range(3)]
    tasks.append({**tasks[0], "task_id": "t9", "version": 1})  # a tie in scheduled_at
    with store.engine.begin() as conn:
        conn.execute(insert(WORKFLOWS), [workflow])
        conn.execute(insert(TASKS), tasks)


def _backends(reads: AsyncReads) -> set[int]:
    return {conn.info.backend_pid for conn in reads._idle}


def test_a_workflow_reads_as_the_sqlalchemy_query_reads_it(store: PgStore) -> None:
    _seed(store)
    reads = AsyncReads(DSN, store.schema, 4)
    try:
        row, tasks = asyncio.run(reads.workflow("wf1"))
        expected_row, expected_tasks = queries.workflow(store.engine, "wf1")
        assert row == expected_row and row is not None and row["input"]["deep"] == {"é": "ü"}
        assert tasks == expected_tasks and [t["task_id"] for t in tasks] == ["t2", "t1", "t9", "t0"]
        assert asyncio.run(reads.workflow("nope")) == queries.workflow(store.engine, "nope")
        assert asyncio.run(reads.workflow("nope")) == (None, [])
    finally:
        reads.close()


@pytest.mark.fault
def test_a_read_on_a_connection_the_server_dropped_runs_again_on_a_new_one(
    store: PgStore,
) -> None:
    _seed(store)
    reads = AsyncReads(DSN, store.schema, 4)

    async def scenario() -> None:
        await reads.workflow("wf1")
        held = _backends(reads)
        assert held, "the reads keep their connection between requests"
        alive = terminate_backends(DSN, held)
        assert alive == 0, "the fault fired: the kept backends are gone"
        row, tasks = await reads.workflow("wf1")
        assert _backends(reads) and _backends(reads).isdisjoint(held)  # a new connection
        # Invariant: the read after the fault is the read model, whole.
        assert (row, tasks) == queries.workflow(store.engine, "wf1") and len(tasks) == 4

    try:
        asyncio.run(scenario())
        # Kept connections belong to their loop: a read on another loop opens its own.
        before = _backends(reads)
        assert asyncio.run(reads.workflow("wf1"))[0] is not None
        assert _backends(reads).isdisjoint(before)
    finally:
        reads.close()


STATUSES = ("RUNNING", "COMPLETED", "FAILED", "PAUSED")
FILTERS = [
    WorkflowFilter(),
    WorkflowFilter(statuses=("COMPLETED", "FAILED")),
    WorkflowFilter(names=("media", "thumbs"), versions=(1,), tenants=("acme",)),
    WorkflowFilter(correlation_ids=("c-3", "c-4", "c-5")),
    WorkflowFilter(ids=()),  # free text matched nothing
    WorkflowFilter(ids=("w01", "w02", "w17", "absent")),
    WorkflowFilter(created_from=T0 + timedelta(minutes=5), created_to=T0 + timedelta(minutes=20)),
    WorkflowFilter(updated_from=T0 + timedelta(minutes=3), parent_workflow_id="w00"),
]


def _row(n: int) -> dict[str, object]:
    return {
        "workflow_id": f"w{n:02d}",
        "name": ("media", "thumbs", "probe")[n % 3],
        "def_version": 1 + n % 2,
        "tenant": ("acme", None)[n % 2],
        "priority": n % 5,
        "status": STATUSES[n % 4],
        "ending": None,
        "reason": "",
        "correlation_id": f"c-{n}",
        "parent_workflow_id": "w00" if n % 5 == 0 and n else None,
        "input": {"n": n},
        "output": {},
        "created_at": T0 + timedelta(minutes=n // 2),  # ties in created_at
        "updated_at": T0 + timedelta(minutes=n),
        "ended_at": None,
        "version": n,
    }


def _many(store: PgStore) -> None:
    rows = [_row(n) for n in range(30)]
    with store.engine.begin() as conn:
        conn.execute(insert(WORKFLOWS), rows)


@pytest.mark.parametrize("f", FILTERS)
def test_search_and_the_console_read_as_the_sqlalchemy_queries_read(
    store: PgStore, f: WorkflowFilter
) -> None:
    _many(store)
    reads = AsyncReads(DSN, store.schema, 2)
    try:
        for start, size, sort, cap in [
            (0, 100, (("created_at", True),), 1000),
            (2, 5, (("name", False), ("priority", True)), 1000),
            (0, 3, (("updated_at", False),), 4),  # the total stops counting at start + cap
        ]:
            got = asyncio.run(reads.search_page(f, start, size, sort, cap))
            assert got == pages.search_page(store.engine, f, start, size, sort, cap)
            # Both ran ``pages``' bound statements: hold them to the filter written with its
            # values (``apply_filter``), counted exactly, too.
            total, rows = queries.search_workflows(store.engine, f, start, size, sort)
            assert got == (min(total, start + cap), total > start + cap, rows)
        for start, size, cap in [(0, 50, 1000), (1, 4, 3)]:
            got_page = asyncio.run(reads.console_page(f, STATUSES, start, size, cap))
            expected = pages.console_page(store.engine, f, STATUSES, start, size, cap)
            assert got_page == expected
            exact = queries.status_counts(store.engine, replace(f, statuses=()))
            assert got_page[0] == {s: min(n, start + cap) for s, n in exact.items()}
            newest = queries.newest_workflows(store.engine, f, start, size)
            listed = [c.name for c in pages.LISTED]
            assert got_page[2] == [{k: r[k] for k in listed} for r in newest]
            assert asyncio.run(reads.console_page(f, (), start, size, cap)) == (
                pages.console_page(store.engine, f, (), start, size, cap)
            )
    finally:
        reads.close()


def test_the_filters_select_different_rows(store: PgStore) -> None:
    """The comparison above is not between two empty answers."""
    _many(store)
    totals = [pages.search_page(store.engine, f, 0, 100, (), 1000)[0] for f in FILTERS]
    # n in 0..29: status n % 4; name n % 3, version and tenant n % 2; created n // 2 min
    assert totals == [30, 15, 10, 3, 0, 3, 20, 5]
