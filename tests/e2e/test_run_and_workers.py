"""End to end: `es-sched run` (every role) and two `es-sched worker --noop` processes run 1,000
media-pipeline workflows to COMPLETED through the real dispatcher, and the PostgreSQL
projection ends equal to the log."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from tests.integration.projection_harness import dropped_schemas, projected, projection_env
from tests.integration.runtime_harness import (
    Env,
    Role,
    final_status,
    free_port,
    load_json,
    metric,
    read_events,
    scrape,
    wait_until,
)

pytestmark = pytest.mark.e2e
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"
WORKER = ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"]


@pytest.fixture
def env() -> Iterator[Env]:
    """Fresh topics, PostgreSQL schema and search indices (dropped afterwards)."""
    env = projection_env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
    with dropped_schemas(env):
        yield env


def test_a_thousand_media_workflows_through_dispatcher_and_noop_workers(env: Env) -> None:
    env.create()
    env.push(load_json("examples/media_pipeline.json"), load_json("examples/media_taskdefs.json"))
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
        inputs = [
            {"source_uri": f"file:///in/{i}.mp4", "asset_id": f"a{i}", "callback_url": "http://cb"}
            for i in range(1000)
        ]
        env.send(env.start_commands("media_pipeline", inputs))

        def completed() -> bool:
            return sum(final_status(v) == "COMPLETED" for v in read_events(env).values()) == 1000

        wait_until(completed, 600, "1000 workflows completed through the dispatcher")
        wait_until(lambda: projected(env), 180, "the PostgreSQL projection to equal the log")
        time.sleep(1.5)  # the roles refresh their counters once a second
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
