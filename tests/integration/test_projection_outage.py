"""PostgreSQL stopped for 60 s and OpenSearch for 90 s while workflows keep running: the
decider does not slow down, both projectors stop advancing and report their lag, then catch up
with no row or document behind its last seq and none regressing."""

from __future__ import annotations

import threading
import time

import pytest

from es_sched.projections.search.store import SearchStore
from es_sched.projections.views import Row
from tests.integration.projection_harness import (
    by_id,
    dropped_schemas,
    expected_rows,
    pg_rows,
    submit_for,
)
from tests.integration.runtime_harness import MEDIA, Env, Role, Worker, completed, read_events
from tests.support.cli import es_sched
from tests.support.net import free_port, metric, scrape
from tests.support.wait import wait_until

pytestmark = pytest.mark.integration


def _stack(action: str, only: str) -> None:
    done = es_sched("stack", action, "--only", only, timeout_s=300)
    assert done.returncode == 0, done.stderr


def _search_rows(env: Env) -> tuple[dict[str, Row], dict[str, Row]]:
    store = SearchStore(env.settings)
    try:
        ids = list(read_events(env))
        loaded = store.load(ids)
        wfs = [r.workflow for r in loaded.values()]
        tasks = [t for r in loaded.values() for t in r.tasks.values()]
        return by_id(wfs, "workflow_id"), by_id(tasks, "task_id")
    finally:
        store.close()


def _caught_up(env: Env) -> bool:
    want_wf, want_tasks, _ = expected_rows(env)
    have_wf, have_tasks, _ = pg_rows(env)
    pg_ok = by_id(have_wf, "workflow_id") == by_id(want_wf, "workflow_id") and by_id(
        have_tasks, "task_id"
    ) == by_id(want_tasks, "task_id")
    search_wf, search_tasks = _search_rows(env)
    return pg_ok and (search_wf, search_tasks) == (
        by_id(want_wf, "workflow_id"),
        by_id(want_tasks, "task_id"),
    )


def test_both_stores_down_under_load_then_both_catch_up() -> None:
    env = Env()
    env.create()
    env.push_files(*MEDIA)
    port = free_port()
    with dropped_schemas(env):
        decider = Role(env, "decider")
        projectors = Role(
            env, "projectors",
            ["run", "--role", "projector-pg", "--role", "projector-search",
             "--metrics-port", str(port)],
        )  # fmt: skip
        versions: dict[str, int] = {}
        try:
            decider.wait_log("decider", 90)
            projectors.wait_log("projector search started", 90)
            projectors.wait_log("projector pg started", 90)
            with Worker(env):
                load = threading.Thread(target=submit_for, args=(env, 150.0), daemon=True)
                load.start()
                time.sleep(10)
                _stack("down", "postgres,search")
                try:
                    time.sleep(5)
                    done_before = completed(env)
                    time.sleep(55)
                    text = scrape(port)
                    assert metric(text, "es_sched_projector_store_up", projection="pg") == 0
                    lag = metric(text, "es_sched_consumer_lag_records", role="projector-pg")
                    assert lag is not None and lag > 0
                    assert (
                        metric(text, "es_sched_projector_lag_seconds", projection="pg") or 0
                    ) > 30
                    # nothing else stopped: workflows kept finishing during the outage
                    assert completed(env) >= done_before + 60
                    _stack("up", "postgres")
                    time.sleep(30)
                    assert (
                        metric(scrape(port), "es_sched_projector_store_up", projection="search")
                        == 0
                    )
                finally:
                    _stack("up", "postgres,search")
                load.join()
                wait_until(lambda: _caught_up(env), 300, "both projections to catch up")
                versions = {w["workflow_id"]: w["version"] for w in pg_rows(env)[0]}
        finally:
            decider.stop()
            projectors.stop()
        assert len(versions) >= 100
        last = {wf: len(v) for wf, v in read_events(env).items()}
        assert versions == last  # none behind, none regressed
