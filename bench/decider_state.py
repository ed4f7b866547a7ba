"""Benchmark bounded decider state (ADR 18): RSS and changelog size against finished workflows.

A real decider (``es-sched run --role decider``, a subprocess pinned to one core) on the local
broker runs tiny workflows (one SIMPLE task; a worker thread here leases and completes each
ready task, as the dispatcher and a worker would), fed in windows of ``WINDOW`` workflows so the
backlog, and with it the Kafka client's fetch buffers, stays the same size (50k commands at once
grow librdkafka's prefetch queue by tens of MiB, which is not decider state). At each
checkpoint (10k, 50k, 100k finished
workflows) it reads the decider's RSS (``/proc/PID/status``) and the changelog (records and
bytes as written, and the bytes compaction keeps: the latest record per key, tombstones and
superseded snapshots gone). Two modes: ``kept`` (retention far away: today's behaviour, every
finished state held) and ``retired`` (``ES_SCHED_RUN_RETAIN_FINISHED_S=2``; a checkpoint waits
until the decider's ``es_sched_decider_workflows`` gauge shows every finished state retired).

Then ``--live`` waiting workflows (a WAIT task) are started and the decider is restarted
``--restarts`` times: restore time per live workflow is the sum of its restore log lines over
the live states restored; the median is reported.

Needs `es-sched stack up`. Prints figures, writes bench/results/current/decider_state.json and
the plot bench/results/current/decider_state.png (``bench/plot_png.py``: no matplotlib in the venv).
Rerun: `.venv/bin/python bench/decider_state.py [--checkpoints 10000,50000,100000 --live 5000]`
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import TopicPartition
from rich.console import Console
from rich.table import Table

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.kafka.topics import Topics, ensure_topics
from es_sched.serialization import encode_input
from es_sched.serialization.definitions import encode_definition, key_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot_png import Series, line_charts

from testkit.settings import kafka_connection

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "current"
BOOT = os.environ.get("ES_SCHED_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
TINY = {
    "name": "bench_tiny",
    "version": 1,
    "tasks": [{"name": "tiny", "taskReferenceName": "tiny", "type": "SIMPLE"}],
}
HOLD = {
    "name": "bench_hold",
    "version": 1,
    "tasks": [{"name": "hold", "taskReferenceName": "hold", "type": "WAIT"}],
}
RESTORED = re.compile(
    r"restored partition \d+: (\d+) records, (\d+) live states \(\d+ resting\), (\d+) ended "
    r"markers in ([\d.]+)s"
)
COMPLETED = b'"type":"workflow.completed"'
WINDOW = 2000  # workflows in flight at most while feeding (about a second of decider work)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Decider:
    def __init__(self, prefix: str, partitions: int, retain_s: float, log: Path) -> None:
        self.port, self.log = free_port(), log
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "ES_SCHED_KAFKA_TOPIC_PREFIX": prefix,
            "ES_SCHED_KAFKA_PARTITIONS": str(partitions),
            "ES_SCHED_RUN_RETAIN_FINISHED_S": str(retain_s),
            "ES_SCHED_RUN_METRICS_PORT": str(self.port),
        }
        cmd = [sys.executable, "-m", "es_sched", "run", "--role", "decider"]
        if shutil.which("taskset"):
            cmd = ["taskset", "-c", "1", *cmd]
        self.proc = subprocess.Popen(cmd, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)

    def gauge(self, name: str) -> float | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise SystemExit("no VmRSS")

    def restored(self, partitions: int) -> list[tuple[int, int, int, float]] | None:
        found = RESTORED.findall(self.log.read_text(errors="replace"))
        if len(found) < partitions:
            return None
        return [(int(a), int(b), int(c_), float(d)) for a, b, c_, d in found[-partitions:]]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(120)


def wait_for(check: Any, timeout_s: float, what: str, every_s: float = 0.1) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every_s)


class Worker(threading.Thread):
    """Leases and completes every ready task (a DispatchTask then a ReportCompleted)."""

    def __init__(self, topics: Topics) -> None:
        super().__init__(daemon=True)
        self.topics, self.halt = topics, threading.Event()

    def run(self) -> None:
        cons = consumer(
            kafka_connection(BOOT),
            f"{self.topics.prefix}-bench-worker",
            **{"enable.auto.commit": True},
        )
        cons.subscribe([self.topics.ready])
        prod = producer(kafka_connection(BOOT))
        while not self.halt.is_set():
            for msg in cons.consume(1000, 0.2):
                if msg.error() is not None:
                    continue
                doc = orjson.loads(msg.value() or b"{}")
                base = dict(
                    workflow_id=doc["workflow_id"],
                    task_id=doc["task_id"],
                    attempt=doc["attempt"],
                    worker_id="bench",
                    lease_epoch=1,
                    lease_token=f"tok-{doc['task_id']}",
                )
                done = c.ReportCompleted(f"r-{doc['task_id']}", **base, started=True)  # as SDKs
                for inp in (c.DispatchTask(f"d-{doc['task_id']}", **base), done):
                    prod.produce(
                        self.topics.task_results,
                        key=inp.workflow_id.encode(),
                        value=encode_input(inp),
                    )
                    prod.poll(0)
        prod.flush(30)
        cons.close()


class Completions(threading.Thread):
    """Counts workflow.completed events (read_committed)."""

    def __init__(self, topics: Topics) -> None:
        super().__init__(daemon=True)
        self.topics, self.halt, self.count = topics, threading.Event(), 0

    def run(self) -> None:
        cons = consumer(kafka_connection(BOOT), None, **{"isolation.level": "read_committed"})
        cons.assign(
            [TopicPartition(self.topics.events, p, 0) for p in range(self.topics.partitions)]
        )
        while not self.halt.is_set():
            for msg in cons.consume(5000, 0.2):
                if msg.error() is None and COMPLETED in (msg.value() or b""):
                    self.count += 1
        cons.close()


def changelog_size(topics: Topics) -> dict[str, int]:
    cons = consumer(
        kafka_connection(BOOT),
        None,
        **{"isolation.level": "read_committed", "enable.partition.eof": True},
    )
    cons.assign([TopicPartition(topics.changelog, p, 0) for p in range(topics.partitions)])
    latest: dict[bytes, int] = {}
    records = written = 0
    done: set[int] = set()
    while len(done) < topics.partitions:
        for msg in cons.consume(10_000, 1.0):
            if msg.error() is not None:
                done.add(msg.partition() or 0)
                continue
            key, value = msg.key() or b"", msg.value()
            size = len(key) + (len(value) if value else 0)
            records, written = records + 1, written + size
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = size
    cons.close()
    return {
        "records": records,
        "bytes_written": written,
        "bytes_compacted": sum(latest.values()),
        "keys_compacted": len(latest),
    }


def start(topics: Topics, name: str, first: int, count: int) -> None:
    p = producer(kafka_connection(BOOT))
    for i in range(first, first + count):
        cid = f"{topics.prefix}-{name}-{i}"
        inp = c.StartWorkflow(cid, workflow_id_for_command(cid), name=name, input={"i": i})
        p.produce(topics.commands, key=inp.workflow_id.encode(), value=encode_input(inp))
        p.poll(0)
    p.flush(120)


def run_mode(
    mode: str, checkpoints: list[int], live: int, restarts: int, partitions: int, console: Console
) -> dict[str, Any]:
    retain = 2.0 if mode == "retired" else 10**9
    prefix = f"bstate{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix, partitions)
    ensure_topics(kafka_connection(BOOT), topics)
    p = producer(kafka_connection(BOOT))
    docs: list[tuple[str, dict[str, Any]]] = [
        ("workflow", TINY),
        ("workflow", HOLD),
        ("taskdef", {"name": "tiny"}),
    ]
    for kind, doc in docs:
        p.produce(topics.definitions, key=key_of(kind, doc), value=encode_definition(doc))
    p.flush(30)
    log = RESULTS / f"decider_state-{mode}.log"
    decider = Decider(prefix, partitions, retain, log)
    worker, done = Worker(topics), Completions(topics)
    worker.start()
    done.start()
    # the prefix: its topics stay, for bench/restore_broker.py
    out: dict[str, Any] = {
        "mode": mode,
        "retain_finished_s": retain,
        "points": [],
        "prefix": prefix,
    }
    wait_for(lambda: decider.gauge("es_sched_decider_workflows") is not None, 60, "metrics")
    out["rss_mib_at_0"] = round(decider.rss_mib(), 1)
    sent, t0 = 0, time.monotonic()
    for target in checkpoints:
        while sent < target:  # a bounded backlog: the consumer's buffers stay the same size
            chunk = min(WINDOW, target - sent)
            start(topics, "bench_tiny", sent, chunk)
            sent += chunk
            wait_for(lambda: done.count >= sent - WINDOW, 600, "the previous window")  # noqa: B023
        wait_for(lambda: done.count >= target, 1800, f"{target} completions")  # noqa: B023
        if mode == "retired":
            wait_for(lambda: decider.gauge("es_sched_decider_workflows") == 0, 300, "retirement")
        point = {
            "finished": target,
            "rss_mib": round(decider.rss_mib(), 1),
            "states_held": decider.gauge("es_sched_decider_workflows"),
            "ended_markers": decider.gauge("es_sched_decider_ended_markers"),
            "elapsed_s": round(time.monotonic() - t0, 1),
        }
        point.update(changelog_size(topics))
        out["points"].append(point)
        console.print(f"{mode}: {point}", markup=False)
    worker.halt.set()
    held = decider.gauge("es_sched_decider_workflows") or 0
    start(topics, "bench_hold", 0, live)
    wait_for(
        lambda: (decider.gauge("es_sched_decider_workflows") or 0) >= held + live,
        600,
        "the live workflows",
    )
    decider.stop()
    restores = []
    for n in range(restarts):
        again = Decider(prefix, partitions, retain, RESULTS / f"decider_state-{mode}-r{n}.log")
        wait_for(lambda: again.restored(partitions) is not None, 600, "restore")  # noqa: B023
        lines = again.restored(partitions) or []
        again.stop()
        took = sum(line[3] for line in lines)
        restores.append(
            {
                "records": sum(line[0] for line in lines),
                "live": sum(line[1] for line in lines),
                "ended_markers": sum(line[2] for line in lines),
                "seconds": took,
            }
        )
    done.halt.set()
    live_restored = restores[0]["live"]
    out["restore"] = {
        "runs": restores,
        "median_seconds": round(statistics.median(r["seconds"] for r in restores), 3),
        "median_ms_per_live_workflow": round(
            statistics.median(r["seconds"] for r in restores) * 1000 / max(live, 1), 4
        ),
        "live_restored": live_restored,
        "median_ms_per_state_restored": round(
            statistics.median(r["seconds"] * 1000 / max(r["live"], 1) for r in restores), 4
        ),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoints", default="10000,50000,100000")
    parser.add_argument("--live", type=int, default=5000)
    parser.add_argument("--restarts", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--modes", default="kept,retired")
    opts = parser.parse_args()
    checkpoints = [int(n) for n in opts.checkpoints.split(",")]
    console = Console()
    RESULTS.mkdir(exist_ok=True)
    runs = [
        run_mode(m, checkpoints, opts.live, opts.restarts, opts.partitions, console)
        for m in opts.modes.split(",")
    ]
    table = Table(title="decider state after N finished workflows (one decider, one core)")
    for col in (
        "mode",
        "finished",
        "RSS MiB",
        "states held",
        "markers",
        "changelog records",
        "written MiB",
        "compacted MiB",
    ):
        table.add_column(col, justify="right")
    for run in runs:
        for pt in run["points"]:
            table.add_row(
                run["mode"],
                f"{pt['finished']:,}",
                f"{pt['rss_mib']:.1f}",
                f"{pt['states_held'] or 0:,.0f}",
                f"{pt['ended_markers'] or 0:,.0f}",
                f"{pt['records']:,}",
                f"{pt['bytes_written'] / 2**20:.1f}",
                f"{pt['bytes_compacted'] / 2**20:.2f}",
            )
    console.print(table)
    for run in runs:
        r = run["restore"]
        # per state restored: in ``kept`` the finished states are restored too, not only the
        # ``--live`` ones that median_ms_per_live_workflow divides by
        console.print(
            f"{run['mode']}: restore of {r['live_restored']:,} states (read and "
            f"kept): median {r['median_seconds']:.2f}s, "
            f"{r['median_ms_per_state_restored']:.4f} ms per state",
            markup=False,
        )
    result = {
        "benchmark": "decider_state",
        "machine": {"cores": os.cpu_count(), "decider_cores": 1, "broker": "local single node"},
        "partitions": opts.partitions,
        "live": opts.live,
        "runs": runs,
    }
    (RESULTS / "decider_state.json").write_text(json.dumps(result, indent=2) + "\n")
    colours = {"kept": (200, 40, 40), "retired": (30, 90, 200)}
    line_charts(
        RESULTS / "decider_state.png",
        [
            (
                "RSS MiB",
                [
                    Series(
                        r["mode"],
                        colours[r["mode"]],
                        [(0, r["rss_mib_at_0"])]
                        + [(p["finished"], p["rss_mib"]) for p in r["points"]],
                    )
                    for r in runs
                ],
            ),
            (
                "COMPACTED CHANGELOG MIB",
                [
                    Series(
                        r["mode"],
                        colours[r["mode"]],
                        [(0, 0.0)]
                        + [(p["finished"], p["bytes_compacted"] / 2**20) for p in r["points"]],
                    )
                    for r in runs
                ],
            ),
        ],
        "FINISHED WORKFLOWS",
    )
    console.print(f"wrote {RESULTS / 'decider_state.json'} and decider_state.png")


if __name__ == "__main__":
    main()
