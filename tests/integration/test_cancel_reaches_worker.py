"""Cancellation reaches the worker: ``es-sched cancel`` ends the task in the log, and the
dispatcher holding its lease sends ``Cancel`` to the worker within a tick, so the handler stops
its side effects within two heartbeats instead of running to its end (issue 12, item 2).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from es_sched.domain.events import Event
from testkit.runtime import Env, Role, final_status, read_events, roles
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
HEARTBEAT_S = 1.0
TICKING = {
    "name": "ticking",
    "version": 1,
    "tasks": [{"name": "tick.step", "taskReferenceName": "tick"}],
}


def _ticks(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_cancelled_workflows_running_handler_stops_within_two_heartbeats(
    tmp_path: Path,
) -> None:
    env = Env(
        extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": str(HEARTBEAT_S), "ES_SCHED_DISPATCH_LEASE_K": "4"}
    )
    env.create()
    env.push(TICKING, [{"name": "tick.step", "retryCount": 0, "responseTimeoutSeconds": 600}])
    ticks = tmp_path / "ticks.txt"
    with roles(env, "decider", "dispatcher"):
        worker = Role(
            env,
            "ticker",
            ["ticker"],
            module="tests.integration.ticking_worker",
            TICK_FILE=str(ticks),
        )
        try:
            worker.wait_log("started", 60)
            [submitted] = env.submit("ticking", [{}])
            wf = submitted.workflow_id
            wait_until(lambda: len(_ticks(ticks)) >= 10, 60, "the handler's first second of work")
            env.cli("cancel", wf, "--reason", "operator changed their mind")
            # Without the Cancel the handler would tick on for 60 s; its marker is the fact.
            wait_until(
                lambda: any(t.startswith("cancelled") for t in _ticks(ticks)),
                10 * HEARTBEAT_S,
                "the handler to see its cancellation",
            )
        finally:
            worker.stop()
    events = read_events(env)[wf]
    [canceled] = [e for e in events if e.type == "task.canceled"]
    lines = _ticks(ticks)
    last_tick = float([t for t in lines if not t.startswith("cancelled")][-1])
    stopped_after = last_tick - canceled.occurred_at.timestamp()
    assert stopped_after <= 2 * HEARTBEAT_S, f"side effects went on {stopped_after:.2f}s"
    assert final_status(events) == "CANCELED"
    assert not _reports_after(events, canceled), "a cancelled task reports nothing"


def _reports_after(events: list[Event], canceled: Event) -> list[str]:
    later = events[events.index(canceled) + 1 :]
    return [e.type for e in later if e.type in ("task.completed", "task.completion_rejected")]
