"""Two dispatchers of one group share a worker (ADR 6): each owns the ready partition of one
task type, both place on the same 2-cpu worker, and the worker never runs more than 2 cpu of
tasks at once while every workflow completes."""

from __future__ import annotations

import itertools
import re
import threading
import time

import pytest

from es_sched.kafka.partitioner import partition_for
from es_sched.workers import TaskContext, Worker
from es_sched.workers.capacity import Capacity
from testkit.peak import Peak
from testkit.runtime import Env, Role, final_status, read_events, second_dispatcher
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
JSON = dict[str, object]


def _two_types_on_two_partitions(partitions: int) -> tuple[str, str]:
    """Two task names whose ready records land on different partitions (so on different
    dispatchers of the group)."""
    names = (f"enc.{i}" for i in itertools.count())
    first = next(names)
    home = partition_for(first.encode(), partitions)
    second = next(n for n in names if partition_for(n.encode(), partitions) != home)
    return first, second


def test_two_dispatchers_never_overcommit_a_shared_worker() -> None:
    env = Env(
        partitions=2,
        extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5", "ES_SCHED_DISPATCH_LEASE_K": "4"},
    )
    env.create()
    a, b = _two_types_on_two_partitions(env.partitions)
    pair = {
        "name": "pair",
        "version": 1,
        "tasks": [
            {
                "name": "fork",
                "taskReferenceName": "fork",
                "type": "FORK_JOIN",
                "forkTasks": [
                    [{"name": a, "taskReferenceName": "a"}],
                    [{"name": b, "taskReferenceName": "b"}],
                ],
            },
            {"name": "join", "taskReferenceName": "join", "type": "JOIN", "joinOn": ["a", "b"]},
        ],
    }
    env.push(pair, [{"name": n, "retryCount": 0, "resources": {"cpu": 1}} for n in (a, b)])
    worker = Worker(
        worker_id="shared",
        concurrency=8,
        settings=env.settings,
        heartbeat_s=0.5,
        capacity=Capacity(cpu=2.0, memory_mb=8000),
    )
    peak = Peak()

    def work(ctx: TaskContext, task_input: JSON) -> JSON:
        with peak.held():
            time.sleep(0.2)
        return {"by": ctx.task_id}

    worker.task(a)(work)
    worker.task(b)(work)
    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop,), daemon=True)
    roles = [Role(env, "decider"), Role(env, "dispatcher"), second_dispatcher(env)]
    try:
        for r in roles:
            r.wait_log("started", 90)
        thread.start()
        wait_until(worker.ready.is_set, 30, "the worker")
        starts = env.submit("pair", [{} for _ in range(20)])

        def all_completed() -> bool:
            by_wf = read_events(env)
            return all(final_status(by_wf.get(s.workflow_id, [])) == "COMPLETED" for s in starts)

        wait_until(all_completed, 120, "20 workflows completed")
    finally:
        stop.set()
        thread.join(60)
        for r in roles:
            r.stop()
    assert peak.max == 2  # both cpus used, never a third task at once
    counts = [
        re.findall(r"dispatcher stopped: (\d+) dispatched", r.log.read_text()) for r in roles[1:]
    ]
    assert all(c and int(c[0]) > 0 for c in counts), counts  # both dispatchers placed work
    dispatched = sum(e.type == "task.dispatched" for v in read_events(env).values() for e in v)
    assert sum(int(c[0]) for c in counts) >= dispatched >= 40
