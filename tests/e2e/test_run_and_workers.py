"""End to end: `es-sched run` (every role) and two `es-sched worker --noop` processes run 1,000
media-pipeline workflows to COMPLETED through the real dispatcher, and the PostgreSQL
projection ends equal to the log."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.net import free_port, metric, scrape
from testkit.runtime import MEDIA, Env, Role, completed, media_inputs, read_events
from testkit.wait import wait_until
from tests.integration.projection_harness import dropped_schemas, projected

pytestmark = pytest.mark.e2e
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"]


@pytest.fixture
def env() -> Iterator[Env]:
    """Fresh topics, PostgreSQL schema and search indices (dropped afterwards)."""
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
    with dropped_schemas(env):
        yield env


def test_a_thousand_media_workflows_through_dispatcher_and_noop_workers(env: Env) -> None:
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
        env.cli_submit("media_pipeline", media_inputs(1000))
        wait_until(lambda: completed(env) == 1000, 600, "1000 workflows through the dispatcher")
        wait_until(lambda: projected(env), 180, "the PostgreSQL projection to equal the log")
        # the decider copies its counters to the registry once a second: wait until they count
        # every input the log shows it handled
        logged = read_events(env)
        handled = 1000 + sum(e.type == "task.completed" for v in logged.values() for e in v)
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
    assert (metric(run_text, "es_sched_decider_inputs_total") or 0) >= 1000 + completions
    assert metric(run_text, "es_sched_dispatched_total") == dispatched
    assert metric(run_text, "es_sched_dispatch_latency_seconds_count") == dispatched
    assert metric(run_text, "es_sched_timers_pending") is not None
    assert metric(run_text, "es_sched_retry_backlog") == 0  # no task failed: nothing to retry
    for role in ("decider", "timers", "retry", "dispatcher"):
        assert metric(run_text, "es_sched_consumer_lag_records", role=role) is not None, role
    done = [metric(t, "es_sched_worker_tasks_total", outcome="completed") for t in worker_texts]
    assert all(n for n in done) and sum(n or 0 for n in done) >= scheduled_worker_tasks
