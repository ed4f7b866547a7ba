"""Conductor TaskDef limits and tenant limits held by real dispatcher processes (ADR 13), read
back from the log: the ``DispatchTask`` records each dispatcher writes to task-results carry
the decision's time, so the starts in any window are counted on the topic itself.

- two ``es-sched run --role dispatcher`` processes sharing a tenant limit start at most its
  count in any window together;
- a TaskDef's ``concurrentExecLimit`` and ``rateLimitPerFrequency`` hold, and a
  ``rateLimitKey`` is one bucket for the two task types that share it;
- a worker started with ``--custom gpu_slot=2`` holds at most 2 tasks needing 1 each.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from es_sched.domain import commands as c
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import decode_event, decode_input
from es_sched.workers import TaskContext, Worker
from testkit.kafka import read_to_end
from testkit.peak import Peak
from testkit.runtime import (
    Env,
    Role,
    assert_log_invariants,
    final_status,
    read_events,
    second_dispatcher,
)
from testkit.settings import kafka_connection
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
JSON = dict[str, Any]
HEARTBEAT = {"ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5", "ES_SCHED_DISPATCH_TICK_MS": "50"}


def worst_window(ms: list[int], span_ms: int) -> int:
    """The most records in any half-open window [x, x + span_ms)."""
    ms, worst, j = sorted(ms), 0, 0
    for i, t in enumerate(ms):
        while ms[j] <= t - span_ms:
            j += 1
        worst = max(worst, i - j + 1)
    return worst


def task_names(env: Env) -> dict[str, str]:
    """Task id -> task name, from the task.scheduled events."""
    return {
        e.payload.task_id: e.payload.name  # type: ignore[attr-defined]
        for events in read_events(env).values()
        for e in events
        if e.type == "task.scheduled"
    }


def gpu_tasks(env: Env) -> set[str]:
    return {tid for tid, name in task_names(env).items() if name == "gpu.step"}


def dispatch_times(env: Env) -> dict[str, list[int]]:
    """Task name -> the record times (ms) of every DispatchTask on task-results."""
    names = task_names(env)
    out: dict[str, list[int]] = {}
    for msg in read_to_end(env.topics.task_results, "read_committed", bootstrap=env.bootstrap):
        inp = decode_input(msg.value() or b"")
        if isinstance(inp, c.DispatchTask):
            out.setdefault(names[inp.task_id], []).append(msg.timestamp()[1])
    return out


def fork(name: str, *types: str) -> JSON:
    branches = [[{"name": t, "taskReferenceName": f"r{i}"}] for i, t in enumerate(types)]
    return {
        "name": name,
        "version": 1,
        "tasks": [
            {
                "name": "fork",
                "taskReferenceName": "fork",
                "type": "FORK_JOIN",
                "forkTasks": branches,
            },
            {
                "name": "join",
                "taskReferenceName": "join",
                "type": "JOIN",
                "joinOn": [f"r{i}" for i in range(len(types))],
            },
        ],
    }


def types_on_every_partition(partitions: int, stem: str) -> list[str]:
    """One task name per ready partition (so each dispatcher of the group owns one)."""
    found: dict[int, str] = {}
    for i in itertools.count():
        name = f"{stem}.{i}"
        found.setdefault(partition_for(name.encode(), partitions), name)
        if len(found) == partitions:
            return [found[p] for p in range(partitions)]
    raise AssertionError("unreachable")


def group_spread(env: Env, members: int) -> bool:
    """The dispatchers' group is stable with ``members`` members each owning ready partitions."""
    group = f"{env.prefix}-dispatcher"
    admin = AdminClient(kafka_connection(env.bootstrap).config())
    described = admin.describe_consumer_groups([group])[group].result(10)
    owning = [m for m in described.members if m.assignment.topic_partitions]
    return str(described.state).endswith("STABLE") and len(owning) == members


def completed(env: Env, ids: list[str]) -> bool:
    by_wf = read_events(env)
    return all(final_status(by_wf.get(wf, [])) == "COMPLETED" for wf in ids)


@contextmanager
def running(roles: list[Role]) -> Iterator[list[Role]]:
    try:
        for r in roles:
            r.wait_log("started", 90)
        yield roles
    finally:
        for r in roles:
            r.stop()


def dispatched_by(roles: list[Role]) -> list[int]:
    found = [re.findall(r"dispatcher stopped: (\d+) dispatched", r.text()) for r in roles]
    return [int(f[0]) if f else -1 for f in found]


def test_two_dispatcher_processes_together_never_exceed_a_tenant_limit() -> None:
    env = Env(partitions=2, extra=HEARTBEAT)
    env.create()
    a, b = types_on_every_partition(2, "ten")
    env.push(fork("tenant_pair", a, b), [{"name": t, "retryCount": 0} for t in (a, b)])
    env.cli("config", "set-rate", "--tenant", "acme", "2", "--burst", "2")  # 2 per second
    worker = [
        "worker",
        "--noop",
        "--types",
        f"{a},{b}",
        "--concurrency",
        "8",
        "--heartbeat-s",
        "0.5",
    ]
    dispatchers = [Role(env, "dispatcher"), second_dispatcher(env)]
    roles = [Role(env, "decider"), *dispatchers, Role(env, "worker", argv=worker)]
    with running(roles):
        wait_until(lambda: group_spread(env, 2), 90, "both dispatchers owning a ready partition")
        with env.client() as client:
            ids = [
                s.workflow_id for s in client.submit_many("tenant_pair", [{}] * 10, tenant="acme")
            ]
        wait_until(lambda: completed(env, ids), 180, "10 tenant workflows completed")
    times = dispatch_times(env)
    assert sorted(times) == [a, b]
    every = times[a] + times[b]
    worst = worst_window(every, 1000)
    print(
        f"tenant acme at 2 per s, 2 dispatchers: worst 1-s window {worst}, "
        f"{len(every)} dispatches over {(max(every) - min(every)) / 1000:.1f} s"
    )
    assert worst <= 2, f"{worst} dispatches of tenant acme within one second (limit 2)"
    assert all(n > 0 for n in dispatched_by(dispatchers)), dispatched_by(dispatchers)
    assert_log_invariants(env, set(ids))


def test_taskdef_concurrency_rate_and_a_shared_rate_limit_key_hold() -> None:
    env = Env(partitions=2, extra=HEARTBEAT)
    env.create()
    defs: list[JSON] = [
        {"name": "lim.conc", "retryCount": 0, "concurrentExecLimit": 2},
        {
            "name": "lim.rate",
            "retryCount": 0,
            "rateLimitPerFrequency": 2,
            "rateLimitFrequencyInSeconds": 1,
        },
        *(
            {
                "name": t,
                "retryCount": 0,
                "rateLimitPerFrequency": 3,
                "rateLimitFrequencyInSeconds": 2,
                "rateLimitKey": "shared-${workflow.input.region}",
            }
            for t in ("lim.ka", "lim.kb")
        ),
    ]
    env.push(fork("limited", *(d["name"] for d in defs)), defs)
    worker = Worker(worker_id="w-lim", concurrency=8, settings=env.settings, heartbeat_s=0.5)
    peak = Peak()

    @worker.task("lim.conc")
    def slow(_ctx: TaskContext, _input: JSON) -> JSON:
        with peak.held():
            time.sleep(0.3)
        return {}

    def instant(_ctx: TaskContext, _input: JSON) -> JSON:
        return {}

    for name in ("lim.rate", "lim.ka", "lim.kb"):
        worker.task(name)(instant)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    with running([Role(env, "decider"), Role(env, "dispatcher"), second_dispatcher(env)]):
        thread.start()
        wait_until(worker.ready.is_set, 30, "the worker")
        ids = [s.workflow_id for s in env.submit("limited", [{"region": "eu"}] * 6)]
        try:
            wait_until(lambda: completed(env, ids), 180, "6 limited workflows completed")
        finally:
            stop.set()
            thread.join(60)
    times = dispatch_times(env)
    keyed = times["lim.ka"] + times["lim.kb"]
    rate, key = worst_window(times["lim.rate"], 1000), worst_window(keyed, 2000)
    print(f"peak lim.conc {peak.max}; lim.rate worst 1-s window {rate}; key worst 2-s {key}")
    assert peak.max == 2, f"{peak.max} lim.conc ran at once (concurrentExecLimit 2)"
    assert rate <= 2, times["lim.rate"]
    assert key <= 3, keyed  # one bucket for both types
    assert_log_invariants(env, set(ids))


def test_a_worker_declaring_two_gpu_slots_holds_at_most_two_tasks_needing_one() -> None:
    env = Env(partitions=2, extra=HEARTBEAT)
    env.create()
    taskdef = {"name": "gpu.step", "retryCount": 0, "resources": {"custom": {"gpu_slot": 1}}}
    env.push(fork("gpu_pair", "gpu.step", "gpu.step"), [taskdef])
    worker = [
        "worker",
        "--noop",
        "--types",
        "gpu.step",
        "--concurrency",
        "8",
        "--custom",
        "gpu_slot=2",
        "--heartbeat-s",
        "0.5",
    ]
    roles = [Role(env, "decider"), Role(env, "dispatcher"), Role(env, "worker", argv=worker)]
    with running(roles):
        ids = [s.workflow_id for s in env.submit("gpu_pair", [{}] * 8)]
        wait_until(lambda: completed(env, ids), 120, "8 gpu workflows completed")
    # Held from the dispatch decision until the completion is on the log (the dispatcher
    # frees the units when it reads it): at most 2 such spans may overlap.
    edges: list[tuple[int, int]] = []
    mine = gpu_tasks(env)
    for msg in read_to_end(env.topics.events, "read_committed", bootstrap=env.bootstrap):
        event = decode_event(msg.value() or b"")
        task_id = getattr(event.payload, "task_id", None)
        if event.type == "task.completed" and task_id in mine:
            edges.append((msg.timestamp()[1], -1))
    edges += [(t, +1) for t in dispatch_times(env)["gpu.step"]]
    held = worst = 0
    for _, step in sorted(edges):  # at one instant, completions first
        held += step
        worst = max(worst, held)
    print(f"gpu.step held at once: {worst} (16 tasks, gpu_slot=2)")
    assert worst == 2, f"{worst} tasks needing gpu_slot=1 held at once by a 2-slot worker"
    assert_log_invariants(env, set(ids))
