"""The suite's one "N workflows complete" test: `es-sched run` (every role in one process) and
two `es-sched worker --noop` processes run ``N`` media-pipeline workflows (a few hundred at the
CI test scale, 1,000 at ``ES_SCHED_TEST_SCALE=full``) to COMPLETED through the real dispatcher.
Every history is clean (seq 1..n, one start, every task of the DAG scheduled), every worker task
went through a lease, both read models end equal to the log (PostgreSQL rows, the event archive
and the search documents), and the metrics count what the log shows."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.net import free_port, metric, scrape
from testkit.runtime import MEDIA, Env, Role, completed, media_inputs, read_events
from testkit.scale import pick
from testkit.wait import wait_until
from tests.integration.projection_harness import (
    by_id,
    dropped_schemas,
    expected_rows,
    pg_rows,
    projected,
    search_equal,
)

pytestmark = pytest.mark.e2e
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"]
N = pick(ci=200, full=1000)
# The steps every branch of the DAG runs; which renditions depend on the probed height.
DAG = {"probe", "thumbnail", "package", "write_asset", "notify_done"}


@pytest.fixture
def env() -> Iterator[Env]:
    """Fresh topics, PostgreSQL schema and search indices (dropped afterwards)."""
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
    with dropped_schemas(env):
        yield env


def test_n_media_workflows_complete_through_every_role_and_noop_workers(env: Env) -> None:
    env.create()
    env.cli("defs", "push", *map(str, MEDIA))
    ports = [free_port() for _ in range(3)]
    roles = [Role(env, "all", ["run", "--metrics-port", str(ports[0])])]
    workers = [
        Role(
            env,
            f"worker{i}",
            [*WORKER, "--metrics-port", str(ports[i + 1])],
        )
        for i in range(2)
    ]
    try:
        for r in roles:
            r.wait_log("dispatcher started", 90)
        for w in workers:
            w.wait_log("started", 90)
        env.cli_submit("media_pipeline", media_inputs(N))
        wait_until(lambda: completed(env) == N, 600, f"{N} workflows through the dispatcher")
        wait_until(lambda: projected(env), 180, "the PostgreSQL projection to equal the log")
        wait_until(lambda: search_equal(env), 180, "the search documents to equal the log")
        # the decider copies its counters to the registry once a second: wait until they count
        # every input the log shows it handled
        logged = read_events(env)
        handled = N + sum(e.type == "task.completed" for v in logged.values() for e in v)
        wait_until(
            lambda: (metric(scrape(ports[0]), "es_sched_decider_inputs_total") or 0) >= handled,
            30,
            f"the decider's input counter to reach {handled}",
        )
        texts = [scrape(p) for p in ports]
    finally:
        for r in [*workers, *roles]:
            r.stop()
    by_wf = read_events(env)
    assert len(by_wf) == N
    for wf, events in by_wf.items():  # seq 1..n without gaps, no duplicate, one start
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), wf
        assert len({e.event_id for e in events}) == len(events), wf
        assert sum(e.type == "workflow.started" for e in events) == 1, wf
        assert events[-1].type == "workflow.completed", wf
        assert {getattr(e.payload, "ref", "") for e in events} >= DAG, wf
    want_wf, want_tasks, want_events = expected_rows(env)
    have_wf, have_tasks, archived = pg_rows(env)
    assert len(have_wf) == N and {w["status"] for w in have_wf} == {"COMPLETED"}
    assert len(have_tasks) == len(want_tasks) > N and archived == want_events
    assert all(w["version"] == len(by_wf[w["workflow_id"]]) for w in have_wf)
    assert by_id(have_wf, "workflow_id") == by_id(want_wf, "workflow_id")
    dispatched = sum(e.type == "task.dispatched" for v in by_wf.values() for e in v)
    scheduled_worker_tasks = sum(
        e.type == "task.scheduled" and getattr(e.payload, "name", "").startswith("media.")
        for v in by_wf.values()
        for e in v
    )
    assert dispatched >= scheduled_worker_tasks > 0  # every worker task went through a lease
    workers_used = {
        getattr(e.payload, "worker_id", "")
        for v in by_wf.values()
        for e in v
        if e.type == "task.dispatched"
    }
    assert len(workers_used) == 2
    # Every role of the process exports on the one endpoint, and each worker on its own.
    run_text, worker_texts = texts[0], texts[1:]
    completions = sum(e.type == "task.completed" for v in by_wf.values() for e in v)
    assert (metric(run_text, "es_sched_decider_inputs_total") or 0) >= N + completions
    assert metric(run_text, "es_sched_dispatched_total") == dispatched
    assert metric(run_text, "es_sched_dispatch_latency_seconds_count") == dispatched
    assert metric(run_text, "es_sched_timers_pending") is not None
    assert metric(run_text, "es_sched_retry_backlog") == 0  # no task failed: nothing to retry
    for role in ("decider", "timers", "retry", "dispatcher"):
        assert metric(run_text, "es_sched_consumer_lag_records", role=role) is not None, role
    done = [metric(t, "es_sched_worker_tasks_total", outcome="completed") for t in worker_texts]
    assert all(n for n in done) and sum(n or 0 for n in done) >= scheduled_worker_tasks
