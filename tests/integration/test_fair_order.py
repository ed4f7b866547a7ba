"""Fair share between tenants (ADR 68) on the real stack: a decider and a dispatcher process,
a real worker whose tasks are quick, and one module-scoped system for both runs.

Tenant A submits its backlog (``pick(ci=200, full=10_000)`` one-task workflows), then tenant B
10. With fair share on, B's workflows take their share of the worker from the moment they
arrive and finish long before A's backlog; with it off (``ES_SCHED_DISPATCH_FAIR_SHARE=false``,
the old order: older workflow first), B's wait behind all of A's. Completion times (first
event to ``workflow.completed``, the decider's clock) are printed per tenant; the assertions
are on the order of completions, never on seconds.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from es_sched.domain.events import Event
from es_sched.workers import TaskContext, Worker
from testkit.runtime import Env, Role, assert_log_invariants, read_events
from testkit.scale import pick
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
BACKLOG = pick(ci=200, full=10_000)
LATE = 10
STEP_S = 0.02  # what one task takes on the worker: quick, but A's backlog still waits
DEFINITION = {
    "name": "fair.one",
    "version": 1,
    "tasks": [{"name": "fair.step", "taskReferenceName": "s"}],
}
SETTINGS = {"ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5", "ES_SCHED_DISPATCH_TICK_MS": "20"}


@pytest.fixture(scope="module")
def system() -> Iterator[Env]:
    """A decider and a worker (2 slots) for the module; each test runs its own dispatcher."""
    env = Env(partitions=2, extra=SETTINGS)
    env.create()
    env.push(DEFINITION, [{"name": "fair.step", "retryCount": 0}])
    worker = Worker(worker_id="w-fair", concurrency=2, settings=env.settings, heartbeat_s=0.5)

    @worker.task("fair.step")
    def step(_ctx: TaskContext, _input: JSON) -> JSON:
        time.sleep(STEP_S)
        return {}

    decider = Role(env, "decider")
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    try:
        decider.wait_log("started", 90)
        thread.start()
        wait_until(worker.ready.is_set, 30, "the worker")
        yield env
    finally:
        stop.set()
        thread.join(60)
        decider.stop()


def completion(events: list[Event]) -> tuple[datetime, float] | None:
    """When the workflow completed, and how long after its first event."""
    done = next((e for e in events if e.type == "workflow.completed"), None)
    if done is None:
        return None
    return done.occurred_at, (done.occurred_at - events[0].occurred_at).total_seconds()


def backlog_then_late(env: Env, tag: str, fair: bool) -> tuple[list[str], list[str]]:
    """Run A's backlog and B's late 10 through a dispatcher with fair share ``fair``; the
    workflow ids of A and of B."""
    dispatcher = Role(env, "dispatcher", ES_SCHED_DISPATCH_FAIR_SHARE=str(fair).lower())
    try:
        dispatcher.wait_log("started", 90)
        with env.client() as client:
            a = client.submit_many("fair.one", [{}] * BACKLOG, tenant=f"a-{tag}")
            b = client.submit_many("fair.one", [{}] * LATE, tenant=f"b-{tag}")
        ids = [s.workflow_id for s in a + b]

        def all_done() -> bool:
            by_wf = read_events(env)
            return all(completion(by_wf.get(wf, [])) is not None for wf in ids)

        wait_until(all_done, pick(ci=120, full=1800), f"{len(ids)} completed", every_s=0.5)
    finally:
        dispatcher.stop()
    return [s.workflow_id for s in a], [s.workflow_id for s in b]


def report(env: Env, tag: str, a: list[str], b: list[str]) -> tuple[int, int]:
    """Prints per-tenant completion times; returns how many of A's completed after B's last,
    and A's count."""
    by_wf = read_events(env)
    ends: dict[str, tuple[datetime, float]] = {}
    for wf in a + b:
        found = completion(by_wf[wf])
        assert found is not None, f"{wf} did not complete"
        ends[wf] = found
    for name, ids in (("A", a), ("B", b)):
        times = [ends[wf][1] for wf in ids]
        print(
            f"fair share {tag}: tenant {name} ({len(ids)} workflows): completion median "
            f"{statistics.median(times):.2f} s, max {max(times):.2f} s"
        )
    b_last = max(ends[wf][0] for wf in b)
    after = sum(1 for wf in a if ends[wf][0] > b_last)
    print(f"fair share {tag}: {after} of A's {len(a)} workflows completed after B's last")
    return after, len(a)


def test_a_late_tenant_finishes_within_its_share_not_behind_the_backlog(system: Env) -> None:
    a, b = backlog_then_late(system, "on", fair=True)
    after, total = report(system, "on", a, b)
    # B took every other start from its arrival: most of A's backlog was still to run
    assert after > total // 2, f"only {after} of A's {total} finished after B's last"
    assert_log_invariants(system, set(read_events(system)))  # this module's workflows only


def test_off_the_late_tenant_waits_behind_the_backlog(system: Env) -> None:
    a, b = backlog_then_late(system, "off", fair=False)
    after, total = report(system, "off", a, b)
    # the old order: B's workflows started last, so they ran last
    assert after < total // 20, f"{after} of A's {total} finished after B's last"
