"""HTTP workers through the gateway (ADR 24) against the native Kafka worker, on one DAG.

``http_vs_native(tasks, rounds, ...)`` runs, on one private stack (a decider, a dispatcher and a
projector-pg as child processes, one ``es-sched api`` with ``api_workers`` processes), a
workflow whose FORK runs ``tasks`` no-op tasks in parallel, then a JOIN: once with the worker
SDK's ``Worker`` (in this process, concurrency ``concurrency``) serving the fork's type, once
with ``http_workers`` threads that batch-poll (``count`` = ``batch``, long poll) and update
through the API, once with conductor-python's own ``TaskHandler`` (bench/sdk_noop_worker.py, 32
threads, the SDK's defaults otherwise: update-v2, 100 ms poll interval). Each round runs the
three, one after the other, each kind's workers started for its workflow and stopped after it
(``--together``: all serving throughout, as before stop 22); the figures are the medians over
``rounds``, the ratios the medians of each round's ratio; ``api_cpu_ms``, the API processes'
CPU per task while each kind ran, ``client_cpu_ms`` this process's and its children's (the
workers, and this process's own waiting on the events topic, alike for every kind).
tasks/s = tasks / (last ``task.completed`` - first ``task.scheduled``), from the events' own
timestamps.

The bench helper calls it from bench/api.py; run alone: `.venv/bin/python bench/api_workers.py
[--tasks 200 --rounds 3 --api-workers 1 2 --routes lean fastapi]` (needs `es-sched stack up`):
prints the figures and writes bench/results/current/api_workers.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx
import orjson
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from proc_cpu import tree_cpu_s  # noqa: E402
from sdk_noop_worker import THREADS as SDK_THREADS  # noqa: E402

from es_sched.domain.events import Event  # noqa: E402
from es_sched.kafka.clients import consumer  # noqa: E402
from es_sched.serialization.codec import decode_event  # noqa: E402
from es_sched.workers import Capacity, TaskContext, Worker  # noqa: E402
from testkit.api import Api, api  # noqa: E402
from testkit.kafka import partitions_of  # noqa: E402
from testkit.runtime import Env, final_status, roles  # noqa: E402
from testkit.settings import kafka_connection  # noqa: E402

FAST = {"ES_SCHED_DISPATCH_HEARTBEAT_S": "0.5", "ES_SCHED_DISPATCH_TICK_MS": "20"}
JSON = dict[str, Any]


def fork_dag(name: str, task_type: str, tasks: int) -> JSON:
    branches = [[{"name": task_type, "taskReferenceName": f"t{i}"}] for i in range(tasks)]
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
                "joinOn": [f"t{i}" for i in range(tasks)],
            },
        ],
    }


def task_def(task_type: str) -> JSON:
    """A response timeout of 20 s (Conductor's default: an hour), so a task whose update a
    worker lost runs again within the round instead of holding it: conductor-python 2.x, when
    a read on its shared httpx client fails (``[Errno 9] Bad file descriptor``), closes and
    rebuilds that client under every other thread's request, and some of those updates were
    never sent again (9 of a 600-task round, once in a dozen runs)."""
    return {"name": task_type, "retryCount": 3, "responseTimeoutSeconds": 20, "timeoutSeconds": 0}


class EventTail:
    """The events topic read as it grows, each record decoded once. The wait for a workflow's
    end used to re-read the whole topic (``read_events``) in a polling check: up to half a
    core of this 2-core machine, growing round by round, taken from the kind being measured."""

    def __init__(self, env: Env) -> None:
        topic = env.topics.events
        self.reader = consumer(
            kafka_connection(env.bootstrap), None, **{"isolation.level": "read_committed"}
        )
        parts = partitions_of(self.reader, topic)
        self.reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        self.by_wf: dict[str, list[Event]] = defaultdict(list)

    def ended(self, wf: str, timeout_s: float) -> list[Event]:
        deadline = time.monotonic() + timeout_s
        while final_status(self.by_wf[wf]) == "RUNNING":
            assert time.monotonic() < deadline, f"workflow {wf} did not end in {timeout_s} s"
            for msg in self.reader.consume(1000, 0.2):
                if msg.error() is None:
                    event = decode_event(msg.value() or b"")
                    self.by_wf[event.workflow_id].append(event)
        return self.by_wf[wf]

    def close(self) -> None:
        self.reader.close()


def tasks_per_s(tail: EventTail, wf: str, timeout_s: float) -> float:
    events = tail.ended(wf, timeout_s)
    if final_status(events) != "COMPLETED":
        why = [(e.type, e.payload) for e in events if e.type in ("task.failed", "workflow.ended")]
        raise AssertionError(f"{wf} ended {final_status(events)}: {why[:3]}")
    scheduled = [e.occurred_at for e in events if e.type == "task.scheduled"]
    done = [e.occurred_at for e in events if e.type == "task.completed"]
    span = (max(done) - min(scheduled)).total_seconds()
    return len(done) / span if span > 0 else float("inf")


@contextmanager
def native_worker(env: Env, task_type: str, concurrency: int) -> Iterator[Worker]:
    w = Worker(
        settings=env.settings,
        concurrency=concurrency,
        capacity=Capacity(cpu=128.0, memory_mb=1 << 20),
    )

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
def sdk_workers(server: Api) -> Iterator[None]:
    """conductor-python's own ``TaskHandler`` running ``bench/sdk_noop_worker.py`` (one
    process, 32 threads) against the API: what a team with Conductor workers would run."""
    from conductor.client.automator.task_handler import TaskHandler  # noqa: PLC0415
    from conductor.client.configuration.configuration import Configuration  # noqa: PLC0415

    handler = TaskHandler(
        workers=[],
        configuration=Configuration(server_api_url=f"{server.url}/api"),
        scan_for_annotated_workers=True,
        import_modules=["sdk_noop_worker"],
    )
    handler.start_processes()
    try:
        yield
    finally:
        handler.stop_processes()


@contextmanager
def _http_pollers(
    server: Api, task_type: str, n: int, batch: int, update_s: list[float]
) -> Iterator[None]:
    """``n`` threads, each a Conductor-style worker: batch poll, complete each, repeat; each
    update's round trip is appended to ``update_s`` (the pollers' throughput is about
    ``n`` x ``batch`` / (a poll + ``batch`` updates): the updates are sequential per thread)."""
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
                        began = time.perf_counter()
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
                        update_s.append(time.perf_counter() - began)
                except httpx.HTTPError as exc:  # as a worker would: log, poll again
                    print(f"worker h{i}: {exc!r}", file=sys.stderr)

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
    api_workers: int = 1,
    only: tuple[str, ...] = ("native", "http", "sdk"),
    lean: bool = True,
    together: bool = False,
) -> dict[str, Any]:
    """tasks/s of the same fork of ``tasks`` no-op tasks: the native worker, HTTP pollers and
    the conductor-python SDK (each its own task type), rounds interleaved; a projector-pg runs,
    as in a deployment (a poll reads the workflows' names from it). Each kind's workers serve
    only while its workflow runs, so the others' idle polls do not load the API meanwhile;
    ``together``: all serve through every round (the figures before this stop).
    ``lean``: the API serves the worker routes outside FastAPI (ADR 36). ``api_cpu_ms`` is the
    API processes' CPU per task while each kind's workflow ran (idle polls of the others
    included, alike for every kind)."""
    env = Env(extra={**FAST, "ES_SCHED_API_GATEWAY_CAPACITY": str(http_workers * batch * 2)})
    env.create()
    kinds = {"native": "bench.native", "http": "bench.http", "sdk": "bench.sdk"}
    kinds = {k: t for k, t in kinds.items() if k in only or k == "native"}
    for kind, task_type in kinds.items():
        env.push(fork_dag(f"bench_{kind}", task_type, tasks), [task_def(task_type)])
    figures: dict[str, list[float]] = {k: [] for k in kinds}
    server_env = {
        "ES_SCHED_API_WORKERS": str(api_workers),
        "ES_SCHED_API_LEAN_WORKER_ROUTES": str(lean).lower(),
    }
    update_s: list[float] = []
    cpu_ms: dict[str, list[float]] = {k: [] for k in kinds}
    client_ms: dict[str, list[float]] = {k: [] for k in kinds}

    def serving(kind: str) -> AbstractContextManager[Any]:
        if kind == "native":
            return native_worker(env, "bench.native", concurrency)
        if kind == "http":
            return _http_pollers(server, "bench.http", http_workers, batch, update_s)
        return sdk_workers(server)

    with (
        roles(env, "decider", "dispatcher", "projector-pg"),
        api(env, **server_env) as server,
        ExitStack() as everyone,
    ):
        tail = EventTail(env)
        everyone.callback(tail.close)
        for kind in kinds if together else ():  # together: every kind serves every round
            everyone.enter_context(serving(kind))
        for _ in range(rounds):
            for kind in kinds:
                with nullcontext() if together else serving(kind):
                    before, mine = tree_cpu_s(server.role.proc.pid), tree_cpu_s(os.getpid())
                    [s] = env.submit(f"bench_{kind}", [{}])
                    figures[kind].append(tasks_per_s(tail, s.workflow_id, timeout_s))
                    cpu_ms[kind].append((tree_cpu_s(server.role.proc.pid) - before) * 1e3 / tasks)
                    client_ms[kind].append((tree_cpu_s(os.getpid()) - mine) * 1e3 / tasks)
    ratios = {
        k: [h / n for h, n in zip(figures[k], figures["native"], strict=True)]
        for k in kinds
        if k != "native"
    }
    got: dict[str, Any] = {
        "tasks": tasks,
        "rounds": rounds,
        "http_workers": http_workers,
        "batch": batch,
        "native_concurrency": concurrency,
        "api_workers": api_workers,
        "sdk_threads": SDK_THREADS,
        "lean_worker_routes": lean,
        "together": together,
        "runs": figures,
        "api_cpu_ms": {k: statistics.median(v) for k, v in cpu_ms.items()},
        "client_cpu_ms": {k: statistics.median(v) for k, v in client_ms.items()},
    }
    if update_s:  # every round's, the first's included
        cuts = statistics.quantiles(update_s, n=100)
        got["http_update_ms"] = {"n": len(update_s), "p50": cuts[49] * 1e3, "p99": cuts[98] * 1e3}
    for kind in kinds:
        got[f"{kind}_tasks_per_s"] = statistics.median(figures[kind])
        if kind != "native":
            got[f"{kind}_over_native"] = statistics.median(ratios[kind])
    return got


def _summary(got: dict[str, Any]) -> str:
    parts = [f"native {got['native_tasks_per_s']:.1f} tasks/s"]
    if "http_tasks_per_s" in got:
        upd = got["http_update_ms"]
        parts.append(
            f"HTTP pollers {got['http_tasks_per_s']:.1f} ({got['http_workers']} x "
            f"batch {got['batch']}; {got['http_over_native']:.2f} of native; update "
            f"p50 {upd['p50']:.1f} / p99 {upd['p99']:.1f} ms)"
        )
    if "sdk_tasks_per_s" in got:
        parts.append(
            f"conductor-python SDK {got['sdk_tasks_per_s']:.1f} ({got['sdk_threads']} "
            f"threads; {got['sdk_over_native']:.2f} of native)"
        )
    cpu = ", ".join(f"{k} {v:.2f}" for k, v in got["api_cpu_ms"].items())
    parts.append(f"API CPU ms/task: {cpu}")
    mine = ", ".join(f"{k} {v:.2f}" for k, v in got["client_cpu_ms"].items())
    parts.append(f"this process's and its children's (the workers') CPU ms/task: {mine}")
    routes = "lean" if got["lean_worker_routes"] else "FastAPI"
    serving = "all kinds serving together" if got["together"] else "each kind alone"
    return (
        f"{got['tasks']} tasks, {got['api_workers']} API worker(s), {routes} worker routes, "
        f"{serving}, "
        f"medians of "
        f"{got['rounds']} rounds: {'; '.join(parts)}; runs {got['runs']}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--http-workers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--api-workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("http", "sdk"),
        default=["http", "sdk"],
        help="the HTTP workers to run beside the native one",
    )
    parser.add_argument(
        "--routes",
        nargs="+",
        choices=("lean", "fastapi"),
        default=["lean"],
        help="how the API serves the worker routes (both: an A/B in one run)",
    )
    parser.add_argument(
        "--together",
        action="store_true",
        help="every kind's workers serve through every round (idle polls too)",
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "current" / "api_workers.json"
    )
    opts = parser.parse_args()
    results = []
    for n in opts.api_workers:
        for routes in opts.routes:
            got = http_vs_native(
                opts.tasks,
                opts.rounds,
                opts.http_workers,
                opts.batch,
                api_workers=n,
                only=tuple(opts.only),
                lean=routes == "lean",
                together=opts.together,
            )
            results.append(got)
            print(_summary(got))
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_bytes(orjson.dumps({"results": results}, option=orjson.OPT_INDENT_2))
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
