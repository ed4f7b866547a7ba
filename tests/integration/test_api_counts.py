"""Counts sized for 100k rows (issue 14 item 6), on a real PostgreSQL schema: search's
totalHits and the console's per-status counts stop ``cap`` rows past the page's start and say
so (``X-Es-Sched-Total-Capped``, "N+"), below the cap they are exact, and the rows beside
them come from the same snapshot."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import insert

from es_sched import bootstrap
from es_sched.api.app import create_app
from es_sched.projections.postgres import pages, queries
from es_sched.projections.postgres.models import WORKFLOWS
from es_sched.projections.postgres.store import PgStore
from es_sched.settings import ApiSettings
from testkit.runtime import Env
from tests.integration.projection_harness import dropped_schemas

pytestmark = pytest.mark.integration
T0 = datetime(2026, 1, 1, tzinfo=UTC)
STATUSES = {"COMPLETED": 7, "FAILED": 3, "RUNNING": 1}


def _row(i: int, status: str) -> dict[str, object]:
    at = T0 + timedelta(minutes=i)
    return {
        "workflow_id": f"wf-{i:03d}",
        "name": "counted",
        "def_version": 1,
        "tenant": None,
        "priority": 4,
        "status": status,
        "ending": None,
        "reason": "",
        "correlation_id": f"c-{i}",
        "parent_workflow_id": None,
        "input": {},
        "output": {},
        "created_at": at,
        "updated_at": at,
        "ended_at": None,
        "version": 1,
    }


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    env = Env()
    with dropped_schemas(env):
        store = PgStore(env.settings)
        store.ensure()
        statuses = [s for s, n in STATUSES.items() for _ in range(n)]
        with store.engine.begin() as conn:
            conn.execute(insert(WORKFLOWS), [_row(i, s) for i, s in enumerate(statuses)])
        store.engine.dispose()
        yield env


def test_search_counts_to_the_cap_then_says_so_and_is_exact_below(env: Env) -> None:
    engine = PgStore(env.settings).engine
    completed = queries.WorkflowFilter(statuses=("COMPLETED",))
    newest = (("created_at", True),)
    assert pages.search_page(engine, completed, 0, 2, newest, cap=5)[:2] == (5, True)
    assert pages.search_page(engine, completed, 0, 2, newest, cap=7)[:2] == (7, False)
    # Past the start: the count goes cap rows further, so paging on always knows there is more.
    total, capped, rows = pages.search_page(engine, completed, 4, 2, newest, cap=2)
    assert (total, capped, [r["workflow_id"] for r in rows]) == (6, True, ["wf-002", "wf-001"])
    engine.dispose()


def test_the_console_counts_each_status_to_the_cap_beside_its_page(env: Env) -> None:
    engine = PgStore(env.settings).engine
    failed = queries.WorkflowFilter(statuses=("FAILED",))
    order = ("RUNNING", "COMPLETED", "FAILED", "PAUSED")
    counts, capped, rows = pages.console_page(engine, failed, order, 0, 10, cap=3)
    assert counts == {"RUNNING": 1, "COMPLETED": 3, "FAILED": 3}
    assert capped == {"COMPLETED"}  # 7 rows: "3+"; FAILED has exactly 3
    assert [r["workflow_id"] for r in rows] == ["wf-009", "wf-008", "wf-007"]
    engine.dispose()


def test_the_routes_say_when_a_count_stopped(env: Env) -> None:
    api = ApiSettings(auth="off", count_max=4, console_count_max=4)
    svc = bootstrap.api_services(replace(env.settings, api=api))
    with TestClient(create_app(svc)) as client:
        page = client.get("/api/workflow/search", params={"query": "status = COMPLETED"})
        assert page.status_code == 200, page.text
        assert page.json()["totalHits"] == 4
        assert page.headers["X-Es-Sched-Total-Capped"] == "4"
        exact = client.get("/api/workflow/search", params={"query": "status = FAILED"})
        assert exact.json()["totalHits"] == 3
        assert "X-Es-Sched-Total-Capped" not in exact.headers
        listed = client.get("/ui/", params={"status": "COMPLETED"})
        assert listed.status_code == 200, listed.text
        assert "<b>4+</b>" in listed.text and "of 4+" in listed.text
        assert "<b>3</b>" in listed.text  # FAILED, exact
