"""End-to-end benchmark: media workflows through decider, dispatcher and two no-op workers.

Phase 1 (throughput): N workflows of examples/media_pipeline.json are submitted at once;
workflows/s and tasks/s = counts / (last completion - first start), from event timestamps.
Phase 2 (dispatch latency): workflows are submitted at half the phase-1 rate; for every task,
latency = time its assignment record is read from the assignments topic minus the time its
ready record became visible to a ``read_committed`` reader (that is, when the decider's
transaction committed it); both read by this process, on one clock. p50/p95/p99.
The no-op workers declare 128 cpus and concurrency 64 (``--cpu``): their tasks use nothing,
and the figure wanted is the scheduler's, not the placement of 2-cpu transcodes.
Each run uses fresh topics (deleted afterwards) and fresh processes;
the figures are the medians of ``--runs`` runs (default 3), each run's figures kept in the JSON.

``--compare TREE`` runs another source tree's processes (e.g. a worktree of main) and this
tree's interleaved (A, B, A, B, ...) and writes bench/results/current/e2e-compare.json with both
medians and their ratios; the tails are this tree's either way.

Needs `es-sched stack up`. Prints figures, writes bench/results/current/e2e.json.
Rerun: `.venv/bin/python bench/e2e.py [--runs 3 --workflows 1000 --seconds 20 --compare DIR]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from es_sched.domain import commands as c  # noqa: E402
from es_sched.domain.ids import workflow_id_for_command  # noqa: E402
from es_sched.kafka.clients import consumer, producer  # noqa: E402
from es_sched.serialization import encode_input  # noqa: E402
from es_sched.settings import KafkaSettings  # noqa: E402
from testkit.runtime import MEDIA, Env  # noqa: E402
from testkit.settings import (  # noqa: E402
    BOOTSTRAP,
    kafka_connection,
)
from testkit.wait import wait_for_log  # noqa: E402

# The product's default, so the end-to-end benches measure what `es-sched stack up` users run
# (ADR 53); benches that read a recorded history keep that history's count.
PARTITIONS: int = KafkaSettings.model_fields["partitions"].default

# More folders for the spawned processes' PYTHONPATH (bench/client_requests.py: a sitecustomize).
EXTRA_PATH: list[str] = []
TYPES = "media.probe,media.transcode,media.thumbnail,media.package,media.write_asset,media.callback"


def spawn(
    env: Env,
    args: list[str],
    log: Path,
    entry: tuple[str, ...] = ("-m", "es_sched"),
    code: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """``python ENTRY ARGS`` importing the es_sched of the tree ``code`` (this checkout, or
    another for a before/after) through cwd and PYTHONPATH, not whatever the venv installed."""
    return subprocess.Popen(
        [sys.executable, *entry, *args],
        env={**os.environ, **env.vars, "PYTHONPATH": os.pathsep.join([str(code), *EXTRA_PATH])},
        cwd=code,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def start_processes(
    env: Env,
    logs: Path,
    tag: str = "e2e",
    branch_1080: bool = False,
    code: Path = ROOT,
    dispatcher_apart: bool = False,
) -> list[subprocess.Popen[bytes]]:
    """The roles in one process and two no-op workers on ``env``'s topics, started and ready:
    ``[roles, worker, worker]``, or with ``dispatcher_apart`` ``[roles, dispatcher, worker,
    worker]`` (the dispatcher in a process of its own, the decider, timers and retry in the
    other). No-op tasks use nothing: the workers declare room for 64 at once, so what is
    measured is the scheduler, not the placement of 2-cpu transcodes on 2-cpu workers. The
    stock no-op probe makes media_pipeline take its default branch (6 worker tasks);
    ``branch_1080`` runs bench/noop_worker.py, whose probe reports 1080p (9 worker tasks)."""
    roles = ["--role", "decider", "--role", "timers", "--role", "retry"]
    if dispatcher_apart:
        procs = [
            spawn(env, ["run", *roles], logs / f"{tag}-run.log", code=code),
            spawn(env, ["run", "--role", "dispatcher"], logs / f"{tag}-dispatcher.log", code=code),
        ]
    else:
        procs = [
            spawn(env, ["run", *roles, "--role", "dispatcher"], logs / f"{tag}-run.log", code=code)
        ]
    worker = [
        "worker",
        "--noop",
        "--types",
        TYPES,
        "--concurrency",
        "64",
        "--heartbeat-s",
        "1",
        "--cpu",
        "128",
        "--memory-mb",
        "262144",
    ]
    entry = (str(code / "bench" / "noop_worker.py"),) if branch_1080 else ("-m", "es_sched")
    args = worker[1:] if branch_1080 else worker
    procs += [spawn(env, args, logs / f"{tag}-worker{i}.log", entry, code) for i in range(2)]
    first_worker = len(procs) - 2
    try:
        log = logs / (f"{tag}-dispatcher.log" if dispatcher_apart else f"{tag}-run.log")
        wait_for_log(log, "dispatcher started", 120, procs[first_worker - 1])
        for i in range(2):
            wait_for_log(logs / f"{tag}-worker{i}.log", "started", 120, procs[first_worker + i])
    except BaseException:
        stop_processes(env, procs)
        raise
    return procs


def stop_processes(env: Env, procs: list[subprocess.Popen[bytes]]) -> None:
    """Stop ``procs`` and delete ``env``'s topics."""
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(60)
    admin = AdminClient(kafka_connection(BOOTSTRAP).config())
    mine = [t for t in admin.list_topics(timeout=30).topics if t.startswith(env.prefix + ".")]
    for future in admin.delete_topics(mine, operation_timeout=30).values():
        future.result()


def tail(
    env: Env, topic: str, partitions: int, sink: dict[str, Any], stop: threading.Event
) -> None:
    """Record per task id (ready/assignments) or workflow id (events) what arrives, and when.

    A record's read time is taken when ``poll`` hands it over, one record at a time.
    ``consume(1000, 0.1)`` (what this did before) blocks until 1,000 records or the whole
    0.1 s, then hands the batch over at once: at half load every record of a batch got the
    batch's return time, up to 100 ms after it arrived, in each of the two tails; the
    difference of two such stamps was noise of +-100 ms (a per-run p50 of -14.7 ms).
    ``fetch.wait.max.ms`` is low so no fetch long-poll sits between visibility and reading.
    """
    cons = consumer(kafka_connection(BOOTSTRAP), None, **{"fetch.wait.max.ms": 5})
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    events = topic.endswith(".events")
    while not stop.is_set():
        msg = cons.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        now = time.time()
        if events:
            doc = json.loads(msg.value() or b"{}")
            sink.setdefault(doc["type"], []).append((doc["workflow_id"], msg.timestamp()[1] / 1000))
            continue
        doc = json.loads(msg.value() or b"{}")
        # ready: read_committed, so visible once the decider's transaction committed
        sink.setdefault(doc.get("task_id", ""), now)
    cons.close()


def one_run(opts: argparse.Namespace, progress: Progress, code: Path = ROOT) -> dict[str, Any]:
    env = Env(partitions=PARTITIONS, extra={"ES_SCHED_DISPATCH_HEARTBEAT_S": "1"})
    env.create()
    env.push_files(*MEDIA)
    logs = ROOT / "bench" / "results" / "current"
    procs = start_processes(env, logs, code=code)
    stop = threading.Event()
    events: dict[str, Any] = {}
    ready: dict[str, Any] = {}
    assigned: dict[str, Any] = {}
    tails = [
        threading.Thread(target=tail, args=(env, env.topics.events, 12, events, stop), daemon=True),
        threading.Thread(target=tail, args=(env, env.topics.ready, 12, ready, stop), daemon=True),
        threading.Thread(
            target=tail, args=(env, env.topics.assignments, 64, assigned, stop), daemon=True
        ),
    ]
    try:
        for t in tails:
            t.start()
        inputs = [
            {"source_uri": f"file:///{i}.mp4", "asset_id": f"a{i}", "callback_url": "http://cb"}
            for i in range(opts.workflows)
        ]
        env.submit("media_pipeline", inputs)
        deadline = time.monotonic() + 900
        bar = progress.add_task("phase 1: workflows completed", total=opts.workflows)
        while (
            len(events.get("workflow.completed", [])) < opts.workflows
            and time.monotonic() < deadline
        ):
            progress.update(bar, completed=len(events.get("workflow.completed", [])))
            time.sleep(0.5)
        progress.update(bar, completed=len(events.get("workflow.completed", [])))
        starts = [ts for _, ts in events["workflow.started"]]
        ends = [ts for _, ts in events["workflow.completed"]]
        span = max(ends) - min(starts)
        wf_rate = len(ends) / span
        tasks_done = len(events.get("task.completed", []))
        task_rate = tasks_done / span
        # phase 2: half the rate, latency of dispatch
        phase1_tasks = set(assigned)
        rate = max(1.0, wf_rate / 2)
        second = [
            {"source_uri": f"file:///p2-{i}.mp4", "asset_id": f"b{i}", "callback_url": "http://cb"}
            for i in range(int(rate * opts.seconds))
        ]
        ids = [f"p2-{env.prefix}-{i}" for i in range(len(second))]
        commands = [
            c.StartWorkflow(cid, workflow_id_for_command(cid), name="media_pipeline", input=inp)
            for cid, inp in zip(ids, second, strict=True)
        ]
        out = producer(kafka_connection(BOOTSTRAP))
        bar = progress.add_task(f"phase 2: {rate:.0f} workflows/s", total=len(commands))
        t0 = time.time()
        for n, cmd in enumerate(commands):
            while time.time() < t0 + n / rate:
                time.sleep(0.002)
            out.produce(env.topics.commands, key=cmd.workflow_id.encode(), value=encode_input(cmd))
            out.poll(0)
            progress.update(bar, completed=n + 1)
        out.flush(30)
        time.sleep(5)
        lat: list[float] = sorted(
            (assigned[t] - ready[t]) * 1000
            for t in assigned
            if t in ready and t not in phase1_tasks
        )
    finally:
        stop.set()
        stop_processes(env, procs)

    def pct(q: float) -> float:
        return float(round(lat[int(q * (len(lat) - 1))], 1))

    return {
        "workflows": len(ends),
        "workflows_per_second": round(wf_rate, 1),
        "tasks_per_second": round(task_rate, 1),
        "phase2_rate_workflows_per_second": round(rate, 1),
        "dispatch_latency_ms": {"n": len(lat), "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99)},
    }


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def median(get: Any) -> float:
        return float(round(statistics.median(get(r) for r in runs), 1))

    return {
        "workflows_per_second": median(lambda r: r["workflows_per_second"]),
        "tasks_per_second": median(lambda r: r["tasks_per_second"]),
        "dispatch_latency_ms": {
            k: median(lambda r, k=k: r["dispatch_latency_ms"][k]) for k in ("p50", "p95", "p99")
        },
    }


def print_table(title: str, med: dict[str, Any], runs: list[dict[str, Any]]) -> None:
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("median", justify="right")
    table.add_column("runs", justify="right")
    table.add_row(
        "workflows/s",
        str(med["workflows_per_second"]),
        ", ".join(str(r["workflows_per_second"]) for r in runs),
    )
    table.add_row(
        "tasks/s", str(med["tasks_per_second"]), ", ".join(str(r["tasks_per_second"]) for r in runs)
    )
    for k in ("p50", "p95", "p99"):
        table.add_row(
            f"dispatch latency {k} ms",
            str(med["dispatch_latency_ms"][k]),
            ", ".join(str(r["dispatch_latency_ms"][k]) for r in runs),
        )
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument(
        "--compare",
        type=Path,
        default=None,
        help="another source tree (e.g. a worktree of main): its processes and this tree's run "
        "interleaved (A, B, A, B, ...); writes bench/results/current/e2e-compare.json",
    )
    opts = parser.parse_args()
    machine = {
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "workers": "2 x noop, concurrency 64, declared 128 cpu",
    }
    if opts.compare is not None:
        variants = {"before": opts.compare.resolve(), "after": ROOT}
        by: dict[str, list[dict[str, Any]]] = {name: [] for name in variants}
        with Progress() as progress:
            for _ in range(opts.runs):
                for name, code in variants.items():
                    by[name].append(one_run(opts, progress, code))
        meds = {name: summary(runs) for name, runs in by.items()}
        b, a = meds["before"], meds["after"]
        ratios = {
            "workflows_per_second": round(a["workflows_per_second"] / b["workflows_per_second"], 2),
            **{
                f"dispatch_{k}": round(
                    a["dispatch_latency_ms"][k] / max(b["dispatch_latency_ms"][k], 0.1), 2
                )
                for k in ("p50", "p95", "p99")
            },
        }
        for name, code in variants.items():
            print_table(f"{name} ({code}), median of {opts.runs}", meds[name], by[name])
        print("after/before:", ratios)
        out = {
            "benchmark": "e2e-compare",
            "machine": machine,
            "runs": opts.runs,
            "workflows_per_run": opts.workflows,
            "trees": {k: str(v) for k, v in variants.items()},
            "median": meds,
            "ratio_after_over_before": ratios,
            "per_run": by,
        }
        compare = ROOT / "bench" / "results" / "current" / "e2e-compare.json"
        compare.write_text(json.dumps(out, indent=2) + "\n")
        return
    runs = []
    with Progress() as progress:
        for _ in range(opts.runs):
            runs.append(one_run(opts, progress))
    result = {
        "benchmark": "e2e",
        "machine": machine,
        "runs": len(runs),
        "workflows_per_run": opts.workflows,
        "median": summary(runs),
        "per_run": runs,
        "targets": {"workflows_per_second": 500, "dispatch_p95_ms": 25},
    }
    print_table(
        f"es-sched end to end, median of {len(runs)} runs (2 noop workers)", result["median"], runs
    )
    (ROOT / "bench" / "results" / "current" / "e2e.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
