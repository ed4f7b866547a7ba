"""End to end: `es-sched run` (every role) and two `es-sched worker --noop` processes run 1,000
media-pipeline workflows to COMPLETED through the real dispatcher."""

from __future__ import annotations

import pytest

from tests.integration.runtime_harness import (
    Env,
    Role,
    final_status,
    load_json,
    read_events,
    wait_until,
)

pytestmark = pytest.mark.e2e
TYPES = "media.probe,media.transcode,media.thumbnail,media.write_asset,media.callback"


def test_a_thousand_media_workflows_through_dispatcher_and_noop_workers() -> None:
    env = Env(extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
    env.create()
    env.push(load_json("examples/media_pipeline.json"), load_json("examples/media_taskdefs.json"))
    roles = [Role(env, "all", ["run"])]
    workers = [
        Role(
            env,
            f"worker{i}",
            ["worker", "--noop", "--types", TYPES, "--concurrency", "8", "--heartbeat-s", "1"],
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
