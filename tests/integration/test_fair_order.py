"""Queue order on the real stack: fair share between tenants (ADR 68) and downstream-first
across task types (ADR 69). A decider process and a real worker whose tasks are quick are
shared by the module; each test runs its own dispatcher process, with the rule on or off.

Tenant A submits its backlog (``pick(ci=120, full=10_000)`` one-task workflows), then tenant B
10. With fair share on, B's workflows take their share of the worker from the moment they
arrive and finish long before A's backlog; with it off (``ES_SCHED_DISPATCH_FAIR_SHARE=false``,
the old order: older workflow first), B's wait behind all of A's. Completion times (first
event to ``workflow.completed``, the decider's clock) are printed per tenant; the assertions
are on the order of completions, never on seconds.

Downstream-first: workflows of an ingest then two parallel encodes (three task types on one
worker) are submitted faster than the worker runs them for a while. With the rule, the encodes
of a workflow past its ingest go before new ingests, so few workflows are ever part-done and
each finishes soon after its ingest; off, new ingests take their turn and part-done workflows
pile up. Printed: completion after the ingest (median, max), and the most part-done at once.
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
from es_sched.serialization import decode_event
from es_sched.workers import TaskContext, Worker
from testkit.kafka import Reader
from testkit.runtime import Env, Role, assert_log_invariants, read_events
from testkit.scale import pick
from testkit.wait import wait_until

# A backlog at full scale runs for minutes a test (10,000 workflows on one worker's 2 slots)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(pick(ci=300, full=3600))]
JSON = dict[str, Any]
BACKLOG = pick(ci=120, full=10_000)
LATE = 10
STEP_S = 0.02  # what one task takes on the worker: quick, but A's backlog still waits
DEFINITION = {
    "name": "fair.one",
    "version": 1,
    "tasks": [{"name": "fair.step", "taskReferenceName": "s"}],
}
FLOW = {
    "name": "ds.flow",
    "version": 1,
    "tasks": [
        {"name": "ds.ingest", "taskReferenceName": "ingest"},
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN",
            "forkTasks": [
                [{"name": "ds.encode", "taskReferenceName": "e0"}],
                [{"name": "ds.thumb", "taskReferenceName": "e1"}],
            ],
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["e0", "e1"]},
    ],
}
FLOOD = pick(ci=50, full=2_000)  # workflows, submitted at RATE a second
RATE = 15.0  # more than the worker's 2 slots finish: the flood
SETTINGS = {
    "ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5",
    "ES_SCHED_DISPATCH_LEASE_K": "4",
    "ES_SCHED_DISPATCH_TICK_MS": "20",
}


@pytest.fixture(scope="module")
def system() -> Iterator[Env]:
    """A decider and a worker (2 slots) for the module; each test runs its own dispatcher."""
    env = Env(partitions=2, extra=SETTINGS)
    env.create()
    env.push(DEFINITION, [{"name": "fair.step", "retryCount": 0}])
    env.push(FLOW, [{"name": t, "retryCount": 0} for t in ("ds.ingest", "ds.encode", "ds.thumb")])
    worker = Worker(worker_id="w-fair", concurrency=2, settings=env.settings, heartbeat_s=0.5)

    def step(_ctx: TaskContext, _input: JSON) -> JSON:
        time.sleep(STEP_S)
        return {}

    for name in ("fair.step", "ds.ingest", "ds.encode", "ds.thumb"):
        worker.task(name)(step)

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


def wait_completed(env: Env, ids: list[str]) -> None:
    """Until every one of ``ids`` has its ``workflow.completed``, reading the events topic
    once, as it grows (at full scale, reading it whole on every check falls behind)."""
    want, done, reader, seen = set(ids), set[str](), Reader(env.topics.events), 0

    def all_done() -> bool:
        nonlocal seen
        while len(reader.read()) > seen:
            for msg in reader.messages[seen:]:
                event = decode_event(msg.value() or b"")
                if event.type == "workflow.completed":
                    done.add(event.workflow_id)
            seen = len(reader.messages)
        return want <= done

    try:
        wait_until(
            all_done,
            pick(ci=120, full=1800),
            lambda: f"{len(want - done)} of {len(ids)} not completed",
            every_s=0.5,
        )
    finally:
        reader.close()


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
        wait_completed(env, ids)
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


def flood(env: Env, downstream_first: bool) -> list[str]:
    """Submit FLOOD workflows at RATE a second through a dispatcher with the rule on or off;
    their ids once all completed."""
    setting = str(downstream_first).lower()
    dispatcher = Role(env, "dispatcher", ES_SCHED_DISPATCH_DOWNSTREAM_FIRST=setting)
    ids: list[str] = []
    try:
        dispatcher.wait_log("started", 90)
        with env.client() as client:
            begin = time.monotonic()
            for i in range(FLOOD):
                time.sleep(max(0.0, begin + i / RATE - time.monotonic()))
                ids += [s.workflow_id for s in client.submit_many("ds.flow", [{}])]
        wait_completed(env, ids)
    finally:
        dispatcher.stop()
    return ids


def part_done(env: Env, tag: str, ids: list[str]) -> int:
    """Prints completion after the ingest; returns the most workflows part-done at once (past
    their ingest, not complete), from the events' order."""
    by_wf = read_events(env)
    moments: list[tuple[datetime, int]] = []
    after: list[float] = []
    for wf in ids:
        events = by_wf[wf]
        ingested = next(e.occurred_at for e in events if e.type == "task.completed")
        done = next(e.occurred_at for e in events if e.type == "workflow.completed")
        moments += [(ingested, 1), (done, -1)]
        after.append((done - ingested).total_seconds())
    now = worst = 0
    for _, step in sorted(moments):  # at a tie the end (-1) counts first
        now += step
        worst = max(worst, now)
    print(
        f"downstream-first {tag}: {len(ids)} workflows, completion after the ingest median "
        f"{statistics.median(after):.2f} s, max {max(after):.2f} s; at most {worst} part-done"
    )
    return worst


def test_downstream_first_keeps_few_workflows_part_done_under_a_flood(system: Env) -> None:
    on = part_done(system, "on", flood(system, True))
    off = part_done(system, "off", flood(system, False))
    # with the rule a part-done workflow's encodes go before new ingests: a handful at most,
    # however long the flood; without it the part-done pile grows with the flood
    assert on * 3 <= off, f"at most {on} part-done with the rule, {off} without"
