"""SLA tiers on saturated workers (ADR 67): do urgent workflows meet their deadlines behind a
bulk backlog, and what does that cost the bulk?

The load: workflows of two sleeping steps of one task type (``sla.step``, ``--task-s`` each)
submitted at ``--rate`` per second for ``--seconds``, every tenth a P0 with a deadline of
``--deadline-s`` from its submission, the rest P3 bulk; the workers (``--workers`` processes of
``--concurrency`` slots) finish about half of that rate, so a backlog grows the whole time.
The same load runs twice per round, once with tiers (P0 / P3 given) and once without (no tier,
the same deadlines recorded), the order alternating by round; each run drains completely before
the next. Figures per run: the P0 deadline hit rate (workflow.completed no later than its
deadline, from the events' times), the P0 completion times, the P3 throughput (P3 workflows
completed per second from the first submission to the last P3 completion) and the
``workflow.sla_breached`` events written. Medians of ``--runs`` rounds.

The issue's load has 30 s deadlines; on this scale (short tasks, a backlog a couple of minutes
deep at most) the deadline and the escalation window are scaled down with the task time:
``--deadline-s`` (default 10) and ``ES_SCHED_SLA_ESCALATE_S`` (5). The dispatcher's estimate of
a run time is ``ES_SCHED_SLA_TYPICAL_TASK_S`` (``--task-s``): this bench publishes no learned
statistics.

Needs `es-sched stack up`. Writes bench/results/current/sla.json and sla.png.
Rerun: `PYTHONPATH=. .venv/bin/python bench/sla.py --runs 3`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from e2e import spawn, stop_processes  # noqa: E402
from plot_png import Series, line_charts  # noqa: E402

from es_sched.cli import worker as cli  # noqa: E402
from es_sched.domain.events import Event  # noqa: E402
from es_sched.workers import TaskContext, Worker  # noqa: E402
from testkit.runtime import Env, histories  # noqa: E402
from testkit.wait import wait_for_log, wait_until  # noqa: E402

TYPE = "sla.step"
OUT = ROOT / "bench" / "results" / "current"
DEFINITION = {
    "name": "sla_job",
    "version": 1,
    "tasks": [
        {
            "name": TYPE,
            "taskReferenceName": ref,
            "type": "SIMPLE",
            "inputParameters": {"sleep_s": "${workflow.input.sleep_s}"},
        }
        for ref in ("first", "second")
    ],
}
TASKDEFS = [{"name": TYPE, "retryCount": 0, "timeoutSeconds": 600, "responseTimeoutSeconds": 600}]


def sleeper(worker: Worker, types: list[str], hold_s: float = 0.0) -> Worker:
    """``es-sched worker --noop`` whose tasks sleep their input's ``sleep_s`` (``hold_s``,
    the CLI's --noop-s, is not used: the input says how long)."""

    def sleep(_ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
        time.sleep(float(task_input.get("sleep_s") or 0))
        return {}

    for task_type in types:
        worker.task(task_type)(sleep)
    return worker


def start(env: Env, opts: argparse.Namespace, logs: Path) -> list[Any]:
    roles = ["run", "--role", "decider", "--role", "timers", "--role", "retry"]
    procs = [
        spawn(env, roles, logs / "sla-run.log"),
        spawn(env, ["run", "--role", "dispatcher"], logs / "sla-dispatcher.log"),
    ]
    worker = ["--noop", "--types", TYPE, "--concurrency", str(opts.concurrency)]
    worker += ["--heartbeat-s", "1", "--cpu", "64", "--memory-mb", "65536"]
    entry = (str(ROOT / "bench" / "sla.py"), "worker")
    procs += [spawn(env, worker, logs / f"sla-worker{i}.log", entry) for i in range(opts.workers)]
    try:
        wait_for_log(logs / "sla-dispatcher.log", "dispatcher started", 120, procs[1])
        for i in range(opts.workers):
            wait_for_log(logs / f"sla-worker{i}.log", "started", 120, procs[2 + i])
    except BaseException:
        stop_processes(env, procs)
        raise
    return procs


def submit(env: Env, opts: argparse.Namespace, tiers: bool, tag: str) -> dict[str, str]:
    """The load, paced; the workflow ids by kind ("p0" / "p3")."""
    kinds: dict[str, str] = {}
    n = int(opts.rate * opts.seconds)
    began = time.monotonic()
    with env.client() as client:
        for i in range(n):
            delay = began + i / opts.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            urgent = i % 10 == 5
            deadline = datetime.now(UTC) + timedelta(seconds=opts.deadline_s)
            done = client.submit(
                "sla_job",
                {"sleep_s": opts.task_s},
                command_id=f"{tag}-{i}",
                sla_tier=("P0" if urgent else "P3") if tiers else None,
                deadline=deadline if urgent else None,
            )
            kinds[done.workflow_id] = "p0" if urgent else "p3"
    return kinds


def measure(kinds: dict[str, str], found: dict[str, list[Event]]) -> dict[str, Any]:
    started: dict[str, datetime] = {}
    ended: dict[str, datetime] = {}
    deadlines: dict[str, datetime] = {}
    breached = 0
    for wf, events in found.items():
        if wf not in kinds:
            continue
        for e in events:
            if e.type == "workflow.started":
                started[wf] = e.occurred_at
                deadline = e.payload.deadline  # type: ignore[attr-defined]
                if deadline is not None:
                    deadlines[wf] = deadline
            elif e.type == "workflow.completed":
                ended[wf] = e.occurred_at
            elif e.type == "workflow.sla_breached":
                breached += 1
    p0 = [wf for wf, k in kinds.items() if k == "p0"]
    p3 = [wf for wf, k in kinds.items() if k == "p3"]
    hits = sum(ended[wf] <= deadlines[wf] for wf in p0)
    first = min(started.values())
    p3_span = (max(ended[wf] for wf in p3) - first).total_seconds()
    p0_times = sorted((ended[wf] - started[wf]).total_seconds() for wf in p0)
    p0_by_start = [
        ((started[wf] - first).total_seconds(), (ended[wf] - started[wf]).total_seconds())
        for wf in sorted(p0, key=lambda w: started[w])
    ]
    return {
        "p0": len(p0),
        "p0_hit": hits,
        "p0_hit_rate": hits / len(p0),
        "p0_p50_s": statistics.median(p0_times),
        "p0_max_s": p0_times[-1],
        "p0_by_start": p0_by_start,
        "p3": len(p3),
        "p3_per_s": len(p3) / p3_span,
        "p3_span_s": p3_span,
        "breached_events": breached,
    }


def one(env: Env, opts: argparse.Namespace, tiers: bool, tag: str) -> dict[str, Any]:
    kinds = submit(env, opts, tiers, tag)

    found: dict[str, list[Event]] = {}

    def done() -> bool:
        found.clear()
        found.update(histories(env))
        ended = sum(
            1 for wf in kinds if any(e.type == "workflow.completed" for e in found.get(wf, []))
        )
        return ended == len(kinds)

    wait_until(done, opts.seconds * 20 + 120, f"{tag}: every workflow completed", every_s=3.0)
    result = measure(kinds, found)
    print(
        f"{'tiers' if tiers else 'no tiers'}: P0 hit {result['p0_hit']}/{result['p0']}, "
        f"P0 p50 {result['p0_p50_s']:.1f} s max {result['p0_max_s']:.1f} s, "
        f"P3 {result['p3_per_s']:.2f} wf/s, breached {result['breached_events']}",
        flush=True,
    )
    return result


def plot(runs: list[dict[str, Any]], path: Path, deadline_s: float) -> None:
    last = runs[-1]
    on = [(x, y) for x, y in last["tiers"]["p0_by_start"]]
    off = [(x, y) for x, y in last["no_tiers"]["p0_by_start"]]
    xs = [x for x, _ in on + off]
    line = [(min(xs), deadline_s), (max(xs), deadline_s)]
    rates = [
        Series(
            "tiers", (0, 110, 200), [(i + 1, r["tiers"]["p0_hit_rate"]) for i, r in enumerate(runs)]
        ),
        Series(
            "no tiers",
            (220, 80, 40),
            [(i + 1, r["no_tiers"]["p0_hit_rate"]) for i, r in enumerate(runs)],
        ),
    ]
    line_charts(
        path,
        [
            (
                "P0 start to end s, by start s",
                [
                    Series("tiers", (0, 110, 200), on),
                    Series("no tiers", (220, 80, 40), off),
                    Series("deadline", (120, 120, 120), line),
                ],
            ),
            ("P0 deadline hit rate, by round", rates),
        ],
        "s since the first start / round",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rate", type=float, default=8.0, help="workflows submitted per second")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--task-s", type=float, default=1.0, help="each step's sleep")
    ap.add_argument("--deadline-s", type=float, default=10.0)
    ap.add_argument("--escalate-s", type=float, default=5.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT / "sla.json")
    opts = ap.parse_args()
    extra = {
        "ES_SCHED_DISPATCH_HEARTBEAT_S": "1",
        "ES_SCHED_SLA_ESCALATE_S": str(opts.escalate_s),
        "ES_SCHED_SLA_TYPICAL_TASK_S": str(opts.task_s),
    }
    env = Env(extra=extra)
    env.create()
    env.push(DEFINITION, TASKDEFS)
    logs = Path(tempfile.gettempdir()) / f"sla-bench-{env.prefix}"
    logs.mkdir(parents=True, exist_ok=True)
    began = datetime.now(UTC)
    procs = start(env, opts, logs)
    runs: list[dict[str, Any]] = []
    try:
        for r in range(opts.runs):
            order = [True, False] if r % 2 == 0 else [False, True]
            run: dict[str, Any] = {}
            for tiers in order:
                run["tiers" if tiers else "no_tiers"] = one(
                    env, opts, tiers, f"r{r}-{'on' if tiers else 'off'}"
                )
            runs.append(run)
    finally:
        stop_processes(env, procs)

    def median(mode: str, key: str) -> float:
        return statistics.median(float(r[mode][key]) for r in runs)

    summary = {
        mode: {
            key: median(mode, key)
            for key in ("p0_hit_rate", "p0_p50_s", "p0_max_s", "p3_per_s", "breached_events")
        }
        for mode in ("tiers", "no_tiers")
    }
    doc = {
        "bench": "sla",
        "started": began.isoformat(),
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "settings": {**vars(opts), "out": str(opts.out), **extra, "reserve_p0": 0.2},
        "capacity_wf_per_s": opts.workers * opts.concurrency / (2 * opts.task_s),
        "median": summary,
        "runs": runs,
    }
    opts.out.write_text(json.dumps(doc, indent=2) + "\n")
    plot(runs, opts.out.with_suffix(".png"), opts.deadline_s)
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        del sys.argv[1]
        cli.noop_worker = sleeper
        cli.worker(prog_name="sla_worker")
    else:
        main()
