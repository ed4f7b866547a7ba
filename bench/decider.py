"""Benchmark the decider on the local broker: input throughput on one core, and latency.

Phase 1 (throughput): N StartWorkflow commands of a one-task workflow are produced before the
decider starts; the decider (a subprocess pinned to one core with taskset) then works through
them. Throughput = inputs / (last - first committed event's broker timestamp).
Phase 2 (latency): with the decider running, task completions are produced at a steady rate;
latency = time the resulting workflow.completed event is visible to a read_committed
consumer minus the produce time. p50/p99 over all of them. A completion carries
``started=True``, as the SDK's workers send it (ADR 44; see bench/decider_cpu.py for what the
benches measured before they did).

Needs `es-sched stack up`. Prints figures, writes bench/results/current/decider.json.
Rerun: `.venv/bin/python bench/decider.py [--inputs 20000 --rate 2000]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, TopicPartition
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.kafka.topics import Topics, ensure_topics
from es_sched.serialization import encode_input
from es_sched.serialization.definitions import encode_definition, key_of
from testkit.settings import kafka_connection

ROOT = Path(__file__).resolve().parents[1]
BOOT = os.environ.get("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
ONE_TASK = {
    "name": "bench_one",
    "version": 1,
    "tasks": [{"name": "unit", "taskReferenceName": "unit"}],
}
BATCH_RECORDS, BATCH_MS = 500, 50


def _lease(task_id: str) -> dict[str, Any]:
    """The lease fields a bench worker echoes: one worker, epoch 1, a token per task."""
    return {
        "task_id": task_id,
        "attempt": 1,
        "worker_id": "bench",
        "lease_epoch": 1,
        "lease_token": f"tok-{task_id}",
    }


def start_decider(
    prefix: str, partitions: int, log: Path, profile: Path | None = None, code: Path | None = None
) -> subprocess.Popen[bytes]:
    """The decider subprocess; under py-spy (collapsed stacks at ``profile``) when asked, and
    importing es_sched from ``code`` (another checkout, for before/after runs) when given."""
    env = {
        **os.environ,
        **({"PYTHONPATH": str(code)} if code is not None else {}),
        "ES_SCHED_KAFKA_TOPIC_PREFIX": prefix,
        "ES_SCHED_KAFKA_PARTITIONS": str(partitions),
        "ES_SCHED_RUN_BATCH_MAX_RECORDS": str(BATCH_RECORDS),
        "ES_SCHED_RUN_BATCH_MAX_MS": str(BATCH_MS),
    }
    cmd = [sys.executable, "-m", "es_sched", "run", "--role", "decider"]
    if profile is not None:
        spy = str(Path(sys.executable).with_name("py-spy"))
        cmd = [
            spy,
            "record",
            "--idle",
            "--format",
            "raw",
            "-r",
            "200",
            "-o",
            str(profile),
            "--",
            *cmd,
        ]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "1", *cmd]
    # Its working directory too: ``python -m`` puts the working directory on sys.path ahead of
    # PYTHONPATH, so without it every "before" ran this checkout (found 2026-12-04: a py-spy
    # profile of a --code run showed functions the older checkout does not have).
    return subprocess.Popen(
        cmd, env=env, cwd=code or ROOT, stdout=log.open("w"), stderr=subprocess.STDOUT
    )


class DeciderCpu:
    """The decider process's CPU seconds so far (``/proc``; under py-spy, its child's)."""

    def __init__(self, decider: subprocess.Popen[bytes], log: Path) -> None:
        self.decider, self.log = decider, log
        self.tick = os.sysconf("SC_CLK_TCK")

    def _pid(self) -> int:
        kids = Path(f"/proc/{self.decider.pid}/task/{self.decider.pid}/children")
        spied = b"py-spy" in Path(f"/proc/{self.decider.pid}/cmdline").read_bytes()
        return int(kids.read_text().split()[0]) if spied else self.decider.pid

    def seconds(self, wait_assigned: bool = False) -> float:
        """``wait_assigned``: first wait (bounded) for the decider to own its partitions, so
        start-up (imports, joining the group) is not counted as work."""
        deadline = time.monotonic() + 60
        while wait_assigned and time.monotonic() < deadline:
            if self.log.exists() and "assigned partitions" in self.log.read_text():
                break
            time.sleep(0.05)
        fields = Path(f"/proc/{self._pid()}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick


def stop_decider(decider: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the decider itself: under py-spy, to its child, so py-spy sees it end and
    writes the profile."""
    children = Path(f"/proc/{decider.pid}/task/{decider.pid}/children")
    kids = children.read_text().split() if children.exists() else []
    spied = Path(f"/proc/{decider.pid}/cmdline").read_bytes().find(b"py-spy") >= 0
    for pid in kids if spied else []:
        os.kill(int(pid), signal.SIGTERM)
    if not spied:
        decider.terminate()
    decider.wait(60)


def tail_events(
    topics: Topics, partitions: int, want: int, kind: str, progress: Progress, label: str
) -> dict[str, float]:
    """wf id -> local arrival time of its first event of type ``kind``; also broker timestamps."""
    cons = consumer(kafka_connection(BOOT), None)
    cons.assign([TopicPartition(topics.events, p, 0) for p in range(partitions)])
    seen: dict[str, float] = {}
    stamps: list[int] = []
    task = progress.add_task(label, total=want)
    deadline = time.monotonic() + 600
    while len(seen) < want and time.monotonic() < deadline:
        for msg in cons.consume(1000, 0.2):
            if msg.error() is not None:
                if msg.error().code() != KafkaError._PARTITION_EOF:  # type: ignore[union-attr]
                    raise SystemExit(str(msg.error()))
                continue
            doc = json.loads(msg.value() or b"{}")
            if doc["type"] == kind and doc["workflow_id"] not in seen:
                seen[doc["workflow_id"]] = time.time()
                stamps.append(msg.timestamp()[1])
                progress.advance(task)
    cons.close()
    seen["__first_ms"], seen["__last_ms"] = float(min(stamps)), float(max(stamps))
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=20_000)
    parser.add_argument("--rate", type=int, default=2_000, help="completions per second in phase 2")
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--profile", type=Path, help="run the decider under py-spy")
    parser.add_argument("--code", type=Path, help="the es_sched checkout the decider runs")
    parser.add_argument(
        "--json", type=Path, default=ROOT / "bench" / "results" / "current" / "decider.json"
    )
    opts = parser.parse_args()
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix, opts.partitions)
    ensure_topics(kafka_connection(BOOT), topics)
    p = producer(kafka_connection(BOOT))
    for kind, doc in [("workflow", ONE_TASK), ("taskdef", {"name": "unit", "retryCount": 0})]:
        p.produce(topics.definitions, key=key_of(kind, doc), value=encode_definition(doc))
    starts = []
    for i in range(opts.inputs):
        cid = f"{prefix}-{i}"
        starts.append(
            c.StartWorkflow(cid, workflow_id_for_command(cid), name="bench_one", input={"i": i})
        )
        p.produce(
            topics.commands, key=starts[-1].workflow_id.encode(), value=encode_input(starts[-1])
        )
        p.poll(0)
    p.flush(120)
    console = Console()
    log = opts.json.with_name(f"{opts.json.stem}-run.log")
    decider = start_decider(prefix, opts.partitions, log, opts.profile, opts.code)
    cpu = DeciderCpu(decider, log)
    try:
        with Progress(console=console) as progress:
            cpu_start = cpu.seconds(wait_assigned=True)
            started = tail_events(
                topics,
                opts.partitions,
                opts.inputs,
                "workflow.started",
                progress,
                "phase 1: starts",
            )
            start_cpu = cpu.seconds() - cpu_start
            print(f"decider CPU: {cpu_start:.2f}s at assignment, {start_cpu:.2f}s for phase 1")
            start_rate = opts.inputs / max(
                (started["__last_ms"] - started["__first_ms"]) / 1000, 1e-9
            )
            tasks = list(read_ready(topics, opts.partitions, opts.inputs).items())
            # Lease every task first, as the dispatcher would: the decider accepts a report
            # only from the live lease. Not timed: the phases below measure completions.
            for wf, task_id in tasks:
                lease = c.DispatchTask(f"dispatch-{task_id}", wf, **_lease(task_id))
                p.produce(topics.task_results, key=wf.encode(), value=encode_input(lease))
                p.poll(0)
            p.flush(60)
            tail_events(topics, opts.partitions, len(tasks), "task.dispatched", progress, "leases")
            burst, steady = tasks[: len(tasks) // 2], tasks[len(tasks) // 2 :]
            # phase 2: half of the completions as a backlog burst -> completion throughput
            cpu_burst = cpu.seconds()
            for wf, task_id in burst:
                report = c.ReportCompleted(f"done-{task_id}", wf, started=True, **_lease(task_id))
                p.produce(topics.task_results, key=wf.encode(), value=encode_input(report))
                p.poll(0)
            p.flush(60)
            finished = tail_events(
                topics,
                opts.partitions,
                len(burst),
                "workflow.completed",
                progress,
                "phase 2: burst",
            )
            burst_cpu = cpu.seconds() - cpu_burst
            completion_rate = len(burst) / max(
                (finished["__last_ms"] - finished["__first_ms"]) / 1000, 1e-9
            )
            # phase 3: the other half at a steady rate, tailed concurrently -> latency
            arrivals: dict[str, float] = {}
            tail = threading.Thread(
                target=lambda: arrivals.update(
                    tail_events(
                        topics,
                        opts.partitions,
                        len(tasks),
                        "workflow.completed",
                        progress,
                        "phase 3: steady",
                    )
                )
            )
            tail.start()
            sent: dict[str, float] = {}
            interval = 1.0 / opts.rate
            t0 = time.time()
            for n, (wf, task_id) in enumerate(steady):
                while time.time() < t0 + n * interval:
                    time.sleep(interval / 4)
                report = c.ReportCompleted(f"done-{task_id}", wf, started=True, **_lease(task_id))
                p.produce(topics.task_results, key=wf.encode(), value=encode_input(report))
                sent[wf] = time.time()
                p.poll(0)
            p.flush(60)
            tail.join()
            done = arrivals
    finally:
        stop_decider(decider)
    latencies = sorted((done[wf] - sent[wf]) * 1000 for wf in sent if wf in done)
    stats = (
        log.read_text().rsplit("stopped: ", 1)[-1].splitlines()[0]
        if "stopped: " in log.read_text()
        else "{}"
    )
    batches = json.loads(stats.replace("'", '"')).get("batches", 0) if stats.startswith("{") else 0
    result: dict[str, Any] = {
        "benchmark": "decider",
        "machine": {
            "decider_cores": 1,
            "broker": "local single node",
            "python": platform.python_version(),
        },
        "settings": {
            "batch_max_records": BATCH_RECORDS,
            "batch_max_ms": BATCH_MS,
            "partitions": opts.partitions,
        },
        "workflows": opts.inputs,
        "inputs_per_second": {
            "start_workflow_backlog": round(start_rate),
            "task_completed_backlog": round(completion_rate),
        },
        # the decider's own CPU (utime + stime) per phase: steadier than wall time when other
        # processes share the cores, and what a capacity model needs
        "inputs_per_cpu_second": {
            "start_workflow_backlog": round(opts.inputs / max(start_cpu, 1e-9)),
            "task_completed_backlog": round(len(burst) / max(burst_cpu, 1e-9)),
        },
        "phase2_completions": len(latencies),
        "phase2_rate_per_second": opts.rate,
        "latency_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p99": round(latencies[int(0.99 * (len(latencies) - 1))], 1),
            "max": round(latencies[-1], 1),
        },
        "transactions": batches,
        "mean_inputs_per_transaction": round((opts.inputs + len(latencies)) / batches, 1)
        if batches
        else None,
        "target_inputs_per_second": 10_000,
    }
    table = Table(title="es-sched decider (one core, local broker)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("inputs/s, StartWorkflow backlog", f"{round(start_rate):,}")
    table.add_row("inputs/s, task completed backlog", f"{round(completion_rate):,}")
    for phase, n in result["inputs_per_cpu_second"].items():
        table.add_row(f"inputs per decider CPU-second, {phase}", f"{n:,}")
    table.add_row(
        "latency p50 ms (completion -> committed event)", str(result["latency_ms"]["p50"])
    )
    table.add_row("latency p99 ms", str(result["latency_ms"]["p99"]))
    table.add_row("transactions", str(batches))
    table.add_row("batch bound (records / ms)", f"{BATCH_RECORDS} / {BATCH_MS}")
    console.print(table)
    opts.json.write_text(json.dumps(result, indent=2) + "\n")


def read_ready(topics: Topics, partitions: int, want: int) -> dict[str, str]:
    cons = consumer(kafka_connection(BOOT), None)
    cons.assign([TopicPartition(topics.ready, p, 0) for p in range(partitions)])
    out: dict[str, str] = {}
    deadline = time.monotonic() + 300
    while len(out) < want and time.monotonic() < deadline:
        for msg in cons.consume(1000, 0.2):
            if msg.error() is None:
                doc = json.loads(msg.value() or b"{}")
                out[doc["workflow_id"]] = doc["task_id"]
    cons.close()
    return out


if __name__ == "__main__":
    main()
