"""HTTP workers through the gateway (ADR 24) against the native Kafka worker, on one DAG.

``http_vs_native(tasks, rounds, ...)`` runs, on one private stack (a decider and a dispatcher
as child processes, one ``es-sched api``), a workflow whose FORK runs ``tasks`` no-op tasks in
parallel, then a JOIN: once with the worker SDK's ``Worker`` (in this process, concurrency
``concurrency``) serving the fork's type, once with ``http_workers`` threads that batch-poll
(``count`` = ``batch``, long poll) and update through the API. Each round runs both, one after
the other; the figures are the medians over ``rounds``. tasks/s = tasks / (last
``task.completed`` - first ``task.scheduled``), from the events' own timestamps.

The bench helper calls it from bench/api.py; run alone: `.venv/bin/python bench/api_workers.py
[--tasks 200 --rounds 3]` (needs `es-sched stack up`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from es_sched.workers import Capacity, TaskContext, Worker  # noqa: E402
from tests.integration.api_harness import Api, api  # noqa: E402
from tests.integration.runtime_harness import Env, final_status, read_events, roles  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402

FAST = {"ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5", "ES_SCHED_DISPATCH_TICK_MS": "20"}
JSON = dict[str, Any]


def fork_dag(name: str, task_type: str, tasks: int) -> JSON:
    branches = [[{"name": task_type, "taskReferenceName": f"t{i}"}] for i in range(tasks)]
    return {
        "name": name, "version": 1,
        "tasks": [
            {"name": "fork", "taskReferenceName": "fork", "type": "FORK_JOIN",
             "forkTasks": branches},
            {"name": "join", "taskReferenceName": "join", "type": "JOIN",
             "joinOn": [f"t{i}" for i in range(tasks)]},
        ],
    }  # fmt: skip


def tasks_per_s(env: Env, wf: str, timeout_s: float) -> float:
    wait_until(lambda: final_status(read_events(env).get(wf, [])) != "RUNNING", timeout_s,
               f"workflow {wf} to end")  # fmt: skip
    events = read_events(env)[wf]
    if final_status(events) != "COMPLETED":
        why = [(e.type, e.payload) for e in events if e.type in ("task.failed", "workflow.ended")]
        raise AssertionError(f"{wf} ended {final_status(events)}: {why[:3]}")
    scheduled = [e.occurred_at for e in events if e.type == "task.scheduled"]
    done = [e.occurred_at for e in events if e.type == "task.completed"]
    span = (max(done) - min(scheduled)).total_seconds()
    return len(done) / span if span > 0 else float("inf")


@contextmanager
def native_worker(env: Env, task_type: str, concurrency: int) -> Iterator[Worker]:
    w = Worker(settings=env.settings, concurrency=concurrency,
               capacity=Capacity(cpu=128.0, memory_mb=1 << 20))  # fmt: skip

    @w.task(task_type)
    def noop(ctx: TaskContext, task_input: JSON) -> JSON:
        return {}

    stop = threading.Event()
    thread = threading.Thread(target=w.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert w.ready.wait(60), "the native worker did not start"
        yield w
    finally:
        stop.set()
        thread.join(60)


@contextmanager
def _http_pollers(server: Api, task_type: str, n: int, batch: int) -> Iterator[None]:
    """``n`` threads, each a Conductor-style worker: batch poll, complete each, repeat."""
    stop = threading.Event()

    def work(i: int) -> None:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            while not stop.is_set():
                try:
                    got = http.get(
                        f"/api/tasks/poll/batch/{task_type}",
                        params={"workerid": f"h{i}", "count": batch, "timeout": 500},
                    )
                    for t in got.json() if got.status_code == 200 else []:
                        http.post(
                            "/api/tasks",
                            json={
                                "workflowInstanceId": t["workflowInstanceId"],
                                "taskId": t["taskId"],
                                "status": "COMPLETED",
                                "workerId": f"h{i}",
                                "outputData": {},
                            },
                        )
                except httpx.HTTPError as exc:  # as a worker would: log, poll again
                    print(f"worker h{i}: {exc!r}", file=sys.stderr)  # fmt: skip

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(60)


def http_vs_native(
    tasks: int = 200,
    rounds: int = 3,
    http_workers: int = 4,
    batch: int = 8,
    concurrency: int = 32,
    timeout_s: float = 600,
) -> dict[str, Any]:
    """tasks/s of the same fork of ``tasks`` no-op tasks, native worker vs HTTP workers."""
    env = Env(extra={**FAST, "ES_SCHED_API_GATEWAY_CAPACITY": str(http_workers * batch * 2)})
    env.create()
    env.push(fork_dag("bench_native", "bench.native", tasks), [])
    env.push(fork_dag("bench_http", "bench.http", tasks), [])
    figures: dict[str, list[float]] = {"native": [], "http": []}
    with roles(env, "decider", "dispatcher"), api(env) as server:
        with native_worker(env, "bench.native", concurrency):
            for _ in range(rounds):
                [s] = env.submit("bench_native", [{}])
                figures["native"].append(tasks_per_s(env, s.workflow_id, timeout_s))
        with _http_pollers(server, "bench.http", http_workers, batch):
            for _ in range(rounds):
                [s] = env.submit("bench_http", [{}])
                figures["http"].append(tasks_per_s(env, s.workflow_id, timeout_s))
    return {
        "tasks": tasks, "rounds": rounds, "http_workers": http_workers, "batch": batch,
        "native_concurrency": concurrency,
        "native_tasks_per_s": statistics.median(figures["native"]),
        "http_tasks_per_s": statistics.median(figures["http"]),
        "runs": figures,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--http-workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    opts = parser.parse_args()
    got = http_vs_native(opts.tasks, opts.rounds, opts.http_workers, opts.batch)
    print(f"{got['tasks']} tasks, median of {got['rounds']}: "
          f"native {got['native_tasks_per_s']:.1f} tasks/s, "
          f"HTTP through the gateway {got['http_tasks_per_s']:.1f} tasks/s "
          f"({got['http_workers']} workers, batch {got['batch']}); runs {got['runs']}")  # fmt: skip


if __name__ == "__main__":
    main()
