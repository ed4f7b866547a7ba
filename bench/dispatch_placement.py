"""Benchmark one dispatch decision in-process: 1,000 workers, 100,000 queued tasks.

A decision = pick the best ready task of a type (priority, aging, oldest workflow), check its
limits, place it (binpack over the pool index, GPU fit), reserve and lease. Tasks finish at
random so the fleet stays partly free. Pinned to one core. Target: p99 <= 100 microseconds.
Prints figures, writes bench/results/current/dispatch_placement.json.
Rerun: `.venv/bin/python bench/dispatch_placement.py [--decisions 20000]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.placement import Gpu, WorkerView
from es_sched.dispatch.core.queues import ReadyTask

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = [f"type{i}" for i in range(10)]


def build(rng: random.Random, workers: int, tasks: int) -> DispatchCore:
    core = DispatchCore()
    for i in range(workers):
        gpus = (
            [Gpu(d, 16384, rng.choice([4000, 8000, 16000])) for d in range(rng.choice([1, 2]))]
            if i % 3 == 0
            else []
        )
        core.fleet.upsert(
            WorkerView(
                f"w{i}",
                "default",
                "1.0",
                frozenset(rng.sample(TYPES, 6)),
                rng.choice([4, 8, 16, 32, 64]),
                rng.choice([16_000, 64_000, 256_000]),
                gpus,
                last_seen=T0,
            )
        )
    for i in range(tasks):
        needs = {"cpu": rng.choice([0.5, 1, 2, 4]), "memory_mb": rng.choice([256, 1024, 4096])}
        if rng.random() < 0.1:
            needs["gpu_memory_mb"] = rng.choice([2048, 4096])
        core.enqueue(
            ReadyTask(
                f"t{i}",
                f"wf{i // 5}",
                rng.choice(TYPES),
                rng.randint(0, 8),
                T0,
                T0 + timedelta(milliseconds=i // 5),
                resources=needs,
            )
        )
    return core


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=20_000)
    opts = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rng = random.Random(7)  # noqa: S311 - a reproducible synthetic fleet, not security
    core = build(rng, opts.workers, opts.tasks)
    running: list[str] = []
    samples: list[float] = []
    tokens = iter(range(10**9))
    now = T0
    for _ in track(range(opts.decisions), description="decisions"):
        task_type = rng.choice(TYPES)
        started = time.perf_counter_ns()
        decision = core._one(task_type, now, lambda: f"tok{next(tokens)}")
        samples.append((time.perf_counter_ns() - started) / 1000)
        for d in decision or []:
            if isinstance(d, Assignment):
                running.append(d.task.task_id)
        if len(running) > 2000 or (running and rng.random() < 0.5):
            core.finished(running.pop(rng.randrange(len(running))))
    ordered = sorted(samples)
    result = {
        "benchmark": "dispatch_placement",
        "machine": {"cores_used": 1, "python": platform.python_version()},
        "workers": opts.workers,
        "queued_tasks": opts.tasks,
        "decisions": len(samples),
        "placed": opts.tasks - sum(q.size for q in core.queues.by_type.values()),
        "decision_us": {
            "p50": round(statistics.median(samples), 1),
            "p95": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "p99": round(ordered[int(0.99 * (len(ordered) - 1))], 1),
            "max": round(ordered[-1], 1),
        },
        "target_p99_us": 100,
    }
    table = Table(title="dispatch decision, 1,000 workers, 100,000 queued (one core)")
    table.add_column("figure")
    table.add_column("µs", justify="right")
    for k, v in result["decision_us"].items():
        table.add_row(k, str(v))
    Console().print(table)
    (ROOT / "bench" / "results" / "current" / "dispatch_placement.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
