"""SLA tiers on the real system (ADR 67): a P0 submitted behind a P3 backlog on a saturated
worker is dispatched next, and a P3 whose deadline passed while it waited gets
``workflow.sla_at_risk`` then ``workflow.sla_breached`` from the decider, and still completes.

Decider, timers and dispatcher in one process, one worker of one slot whose tasks take 2 s."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from es_sched.domain.events import Event
from testkit.runtime import Env, Role, final_status, read_events
from testkit.wait import wait_until

pytestmark = [pytest.mark.integration]
ONE = {
    "name": "one_slow",
    "version": 1,
    "tasks": [{"name": "slow.step", "taskReferenceName": "step"}],
}
BACKLOG = 5


def _dispatched_at(events: list[Event]) -> datetime | None:
    found = [e.occurred_at for e in events if e.type == "task.dispatched"]
    return found[0] if found else None


def _submit(env: Env, command_id: str, tier: str, deadline_s: float | None = None) -> str:
    deadline = None if deadline_s is None else datetime.now(UTC) + timedelta(seconds=deadline_s)
    with env.client() as client:
        done = client.submit(
            "one_slow", {}, command_id=command_id, sla_tier=tier, deadline=deadline
        )
    return done.workflow_id


def test_a_p0_goes_before_a_p3_backlog_and_a_late_p3_is_breached() -> None:
    # P0 tasks get 2 retries whatever their TaskDef says (none here); P3 keeps the TaskDef's
    env = Env(
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "1",
            "ES_SCHED_DISPATCH_LEASE_K": "4",
            "ES_SCHED_SLA_RETRIES_P0": "2",
        }
    )
    env.create()
    env.push(ONE, [{"name": "slow.step", "retryCount": 0}])
    run = Role(env, "sla", ["run", "--role", "decider", "--role", "timers", "--role", "dispatcher"])
    worker = Role(
        env,
        "sla-worker",
        ["w1"],
        module="tests.integration.slow_worker",
        SLOW_WORKER_S="2",
        SLOW_WORKER_CONCURRENCY="1",
    )
    try:
        run.wait_log("dispatcher started", 90)
        worker.wait_log("started", 60)
        bulk = [_submit(env, f"bulk-{i}", "P3") for i in range(BACKLOG)]
        late = _submit(env, "late", "P3", deadline_s=4)
        worker.wait_log("working on", 60)  # the first P3 holds the only slot
        urgent = _submit(env, "urgent", "P0", deadline_s=60)
        everyone = [*bulk, late, urgent]
        wait_until(
            lambda: all(
                final_status(read_events(env).get(wf, [])) == "COMPLETED" for wf in everyone
            ),
            90,
            "every workflow completed",
        )
        found = read_events(env)
        queued = next(e.occurred_at for e in found[urgent] if e.type == "task.scheduled")
        urgent_at = _dispatched_at(found[urgent])
        assert urgent_at is not None
        p3_at = [t for wf in [*bulk, late] if (t := _dispatched_at(found[wf])) is not None]
        # Queued behind a backlog, it overtook it: the P3s still waiting went after it (one
        # may have taken the slot while its ready record was on the way to the dispatcher).
        overtaken = [t for t in p3_at if t > urgent_at]
        slipped_in = [t for t in p3_at if queued <= t < urgent_at]
        assert len(overtaken) >= 2 and len(slipped_in) <= 1, (queued, urgent_at, sorted(p3_at))
        types = [e.type for e in found[late]]
        assert types.index("workflow.sla_at_risk") < types.index("workflow.sla_breached")
        assert types.index("workflow.sla_breached") < types.index("workflow.completed")
        assert "workflow.sla_breached" not in [e.type for e in found[urgent]]
        # the tier's retries, from the submitting client's settings, recorded at the start
        started = {wf: found[wf][0].payload for wf in (urgent, late)}
        assert started[urgent].sla_retries == 2  # type: ignore[attr-defined]
        assert started[late].sla_retries is None  # type: ignore[attr-defined]
        assert all("workflow.sla_at_risk" not in [e.type for e in found[wf]] for wf in bulk)
    finally:
        worker.stop()
        run.stop()
