"""The dispatcher alone and the no-op worker alone: tasks/s per process and CPU per task.

- dispatcher: ``--tasks`` ready records are produced first, with one fake worker's status
  (room for all of them, heartbeats longer than the run so no lease expires); then
  ``es-sched run --role dispatcher`` starts and dispatches them. Rate = assignments / (last -
  first assignment record time); CPU = the process's user+system time over the same count.
- worker: ``es-sched worker --noop`` (concurrency 64, declared 128 cpu, as bench/e2e.py) starts
  with a fixed id; once it reads its partition, ``--tasks`` assignments addressed to it are
  produced; rate = its task-results reports (started + completed) / 2 / their time span.

Each run uses fresh topics (deleted afterwards). ``--compare TREE`` runs the processes of
another source tree (e.g. a worktree of main) interleaved with this one's (A, B, A, B, ...);
``--profile TAG`` attaches py-spy to each process of the first run and keeps the top
functions under bench/results/current/profiles/<role>-<TAG>.txt. Figures are medians of ``--runs``;
on a shared 2-core machine the absolute rates are noisy, the ratios of one interleaved run
less so.

Needs `es-sched stack up`. Writes bench/results/current/dispatch.json (``--only X``:
dispatch-X.json; or ``--out``). Rerun: `.venv/bin/python bench/dispatch.py [--runs 3 --tasks 5000
--compare /work/main]`
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from es_sched.kafka.clients import consumer, producer  # noqa: E402
from es_sched.kafka.partitioner import partition_for  # noqa: E402
from es_sched.kafka.topics import assignment_topic  # noqa: E402
from es_sched.serialization import sealed, wire  # noqa: E402
from es_sched.serialization.records import encode_ready  # noqa: E402
from testkit.runtime import Env  # noqa: E402
from testkit.settings import (  # noqa: E402
    BOOTSTRAP,
    kafka_connection,
)
from testkit.wait import wait_for_log  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "current"
TICKS = os.sysconf("SC_CLK_TCK")
ASSIGNMENT_PARTITIONS = 8


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def spawn(env: Env, args: list[str], log: Path, code: Path) -> Any:
    return subprocess.Popen(
        [sys.executable, "-m", "es_sched", *args],
        env={**os.environ, **env.vars, "PYTHONPATH": str(code)},
        cwd=code,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )


def records_of(topic: str, partitions: list[int], want: int, timeout_s: float) -> list[Any]:
    """Read ``topic``'s records until ``want`` arrived; (record time s, value) of each."""
    cons = consumer(kafka_connection(BOOTSTRAP), None)
    cons.assign([TopicPartition(topic, p, 0) for p in partitions])
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        for msg in cons.consume(1000, 0.2):
            if msg.error() is None:
                out.append((msg.timestamp()[1] / 1000, msg.value()))
    cons.close()
    return out


def drop_topics(env: Env) -> None:
    admin = AdminClient(kafka_connection(BOOTSTRAP).config())
    mine = [t for t in admin.list_topics(timeout=30).topics if t.startswith(env.prefix + ".")]
    for future in admin.delete_topics(mine, operation_timeout=30).values():
        future.result()


def new_env() -> Env:
    env = Env(
        partitions=12,
        extra={
            "ES_SCHED_DISPATCH_HEARTBEAT_S": "60",
            "ES_SCHED_DISPATCH_DEAD_AFTER_S": "600",
            "ES_SCHED_DISPATCH_SUSPECT_AFTER_S": "600",
            "ES_SCHED_DISPATCH_ASSIGNMENT_PARTITIONS": str(ASSIGNMENT_PARTITIONS),
        },
    )
    env.create()
    return env


def stop(proc: Any) -> None:
    proc.terminate()
    proc.wait(120)


class Profile:
    """py-spy attached to a running process (all its threads, on-CPU samples only), stopped
    with SIGINT; ``summary`` writes the top functions by own and by inclusive samples."""

    def __init__(self, pid: int, out: Path | None) -> None:
        self.out, self.proc = out, None
        if out is not None:
            self.raw = out.with_suffix(".raw")
            self.proc = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "--pid",
                    str(pid),
                    "-r",
                    "200",
                    "-f",
                    "raw",
                    "-o",
                    str(self.raw),
                    "--nonblocking",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    def stop(self, title: str) -> None:
        if self.proc is None or self.out is None:
            return
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)
        own: Counter[str] = Counter()
        total: Counter[str] = Counter()
        samples = 0
        for line in self.raw.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            count = int(n)
            frames = [
                f.split(" (")[0] + " " + f.rsplit("/", 1)[-1].rstrip(")")
                for f in stack.split(";")[1:]
            ]
            samples += count
            if frames:
                own[frames[-1]] += count
            for f in set(frames):
                total[f] += count
        lines = [title, f"{samples} on-CPU samples at 200 Hz (all threads)", "", "own:"]
        lines += [f"{100 * n / samples:5.1f}%  {f}" for f, n in own.most_common(25)]
        lines += ["", "inclusive:"]
        lines += [f"{100 * n / samples:5.1f}%  {f}" for f, n in total.most_common(40)]
        self.out.write_text("\n".join(lines) + "\n")
        self.raw.unlink()


def dispatcher_run(n: int, code: Path, profile: Path | None) -> dict[str, Any]:
    env = new_env()
    out = producer(kafka_connection(BOOTSTRAP))
    log = RESULTS / "dispatch-bench-dispatcher.log"
    proc = spawn(env, ["run", "--role", "dispatcher"], log, code)
    try:
        wait_for_log(log, "dispatcher started", 120, proc)
        spy = Profile(proc.pid, profile)
        cpu0 = cpu_s(proc.pid)  # start-up (imports, catch-up) is not per-task cost
        status = wire.WorkerStatus(
            "bench-w",
            "default",
            "v1",
            ["noop"],
            1e9,
            1 << 40,
            concurrency=1 << 30,
            sent_at=datetime.now(UTC).isoformat(),
            lease_key=sealed.LeaseKey().public,  # every token sealed, as for a real worker
        )
        out.produce(env.topics.worker_status, key=b"bench-w", value=wire.encode(status))
        out.flush(60)
        started = datetime.now(UTC) - timedelta(seconds=1)
        for i in range(n):
            value = encode_ready(
                workflow_id=f"wf{i}",
                task_id=f"wf{i}.t",
                ref="t",
                name="noop",
                attempt=1,
                input={"i": i},
                priority=4,
                resources={"cpu": 1.0},
                rate_limit_key=None,
                tenant=None,
                callback=False,
                workflow_started_at=started,
            )
            out.produce(env.topics.ready, key=f"noop{i % 64}".encode(), value=value)
            out.poll(0)
        out.flush(60)
        topic = assignment_topic(env.prefix, "default")
        got = records_of(topic, list(range(ASSIGNMENT_PARTITIONS)), n, 300)
        cpu = cpu_s(proc.pid) - cpu0
        spy.stop(f"dispatcher alone, {n} tasks ({code})")
    finally:
        stop(proc)
        drop_topics(env)
    times = sorted(t for t, _ in got)
    span = max(times[-1] - times[0], 1e-3)
    return {
        "tasks": len(got),
        "tasks_per_second": round(len(got) / span, 1),
        "cpu_ms_per_task": round(cpu * 1000 / max(len(got), 1), 3),
    }


def stamp(topic: str, partitions: int, sink: dict[str, float], stop: threading.Event) -> None:
    """Each record's task id -> when ``poll`` handed it over (as bench/e2e.py's tails)."""
    cons = consumer(kafka_connection(BOOTSTRAP), None, **{"fetch.wait.max.ms": 5})
    cons.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while not stop.is_set():
        msg = cons.poll(0.1)
        if msg is None or msg.error() is not None:
            continue
        now = time.time()
        sink.setdefault(json.loads(msg.value() or b"{}").get("task_id", ""), now)
    cons.close()


def latency_run(rate: float, seconds: float, code: Path) -> dict[str, Any]:
    """The dispatcher alone under a steady offered load: ready records produced at ``rate``/s;
    latency = assignment read - ready record read (both here, one clock)."""
    env = new_env()
    out = producer(kafka_connection(BOOTSTRAP))
    log = RESULTS / "dispatch-bench-latency.log"
    proc = spawn(env, ["run", "--role", "dispatcher"], log, code)
    stop_tails = threading.Event()
    ready: dict[str, float] = {}
    assigned: dict[str, float] = {}
    topic = assignment_topic(env.prefix, "default")
    tails = [
        threading.Thread(target=stamp, args=(env.topics.ready, 12, ready, stop_tails)),
        threading.Thread(target=stamp, args=(topic, ASSIGNMENT_PARTITIONS, assigned, stop_tails)),
    ]
    try:
        wait_for_log(log, "dispatcher started", 120, proc)
        status = wire.WorkerStatus(
            "bench-w",
            "default",
            "v1",
            ["noop"],
            1e9,
            1 << 40,
            concurrency=1 << 30,
            sent_at=datetime.now(UTC).isoformat(),
            lease_key=sealed.LeaseKey().public,  # every token sealed, as for a real worker
        )
        out.produce(env.topics.worker_status, key=b"bench-w", value=wire.encode(status))
        for t in tails:
            t.start()

        def one(name: str) -> None:
            value = encode_ready(
                workflow_id=name,
                task_id=name,
                ref="t",
                name="noop",
                attempt=1,
                input={},
                priority=4,
                resources={"cpu": 1.0},
                rate_limit_key=None,
                tenant=None,
                callback=False,
                workflow_started_at=datetime.now(UTC),
            )
            out.produce(env.topics.ready, key=name.encode(), value=value)
            out.poll(0)

        one("warm-up")  # the group has assigned the partitions once this is dispatched
        deadline = time.monotonic() + 120
        while "warm-up" not in assigned and time.monotonic() < deadline:
            out.poll(0.05)
        cpu0, n, t0 = cpu_s(proc.pid), int(rate * seconds), time.time()
        for i in range(n):
            while time.time() < t0 + i / rate:
                out.poll(0.001)
            one(f"t{i}")
        out.flush(30)
        deadline = time.monotonic() + 60
        while sum(f"t{i}" in assigned for i in range(n)) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu = cpu_s(proc.pid) - cpu0
    finally:
        stop_tails.set()
        for t in tails:
            if t.is_alive():
                t.join(5)
        stop(proc)
        drop_topics(env)
    lat = sorted(
        (assigned[k] - ready[k]) * 1000 for k in assigned if k in ready and k[1:].isdigit()
    )

    def pct(q: float) -> float:
        return round(lat[int(q * (len(lat) - 1))], 1) if lat else float("nan")

    per_task = round(cpu * 1000 / max(len(lat), 1), 3)
    return {
        "rate": rate,
        "tasks": len(lat),
        "p50_ms": pct(0.5),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "cpu_ms_per_task": per_task,
    }


def worker_run(n: int, code: Path, profile: Path | None) -> dict[str, Any]:
    env = new_env()
    log = RESULTS / "dispatch-bench-worker.log"
    args = [
        "worker",
        "--noop",
        "--types",
        "noop",
        "--concurrency",
        "64",
        "--heartbeat-s",
        "1",
        "--cpu",
        "128",
        "--memory-mb",
        "262144",
        "--worker-id",
        "bench-w",
    ]
    topic = assignment_topic(env.prefix, "default")
    proc = spawn(env, args, log, code)
    try:
        wait_for_log(log, "started", 120, proc)
        spy = Profile(proc.pid, profile)
        cpu0 = cpu_s(proc.pid)
        # "started" is logged once its partition is open (it reads from the end): produce
        # every assignment at once; its reports arrive while we produce.
        part = partition_for(b"bench-w", ASSIGNMENT_PARTITIONS)
        out = producer(kafka_connection(BOOTSTRAP))
        expires = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
        for i in range(n):
            a = wire.Assignment(
                "bench-w", f"wf{i}", f"wf{i}.t", "noop", 1, 1, f"tok{i}", expires, {"i": i}
            )
            out.produce(topic, key=b"bench-w", value=wire.encode(a), partition=part)
            out.poll(0)
        out.flush(60)
        got = records_of(env.topics.task_results, list(range(12)), 2 * n, 300)
        cpu = cpu_s(proc.pid) - cpu0
        spy.stop(f"no-op worker alone, {n} tasks ({code})")
    finally:
        stop(proc)
        drop_topics(env)
    times = sorted(t for t, _ in got)
    span = max(times[-1] - times[0], 1e-3)
    tasks = len(got) // 2
    return {
        "tasks": tasks,
        "tasks_per_second": round(tasks / span, 1),
        "cpu_ms_per_task": round(cpu * 1000 / max(tasks, 1), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=5000)
    parser.add_argument("--compare", type=Path, default=None)
    parser.add_argument("--profile", default=None, help="a tag: profiles/<role>-<tag>.txt")
    parser.add_argument("--only", choices=["dispatcher", "worker", "latency"], default=None)
    parser.add_argument("--rate", type=float, default=250, help="latency: ready records/s")
    parser.add_argument("--seconds", type=float, default=10, help="latency: how long")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default bench/results/current/dispatch[-<only>].json",
    )
    opts = parser.parse_args()
    trees = {"this": ROOT} if opts.compare is None else {"before": opts.compare, "after": ROOT}
    roles: dict[str, Any] = {
        "dispatcher": dispatcher_run,
        "worker": worker_run,
        "latency": lambda _n, code, _p: latency_run(opts.rate, opts.seconds, code),
    }
    if opts.only:
        roles = {opts.only: roles[opts.only]}
    by: dict[str, dict[str, list[dict[str, Any]]]] = {r: {t: [] for t in trees} for r in roles}
    for run in range(opts.runs):
        for role, fn in roles.items():
            for tree, code in trees.items():
                profile = None
                if opts.profile and run == 0:
                    (RESULTS / "profiles").mkdir(exist_ok=True)
                    tag = opts.profile if len(trees) == 1 else f"{opts.profile}-{tree}"
                    profile = RESULTS / "profiles" / f"{role}-{tag}.txt"
                result = fn(opts.tasks, code.resolve(), profile)
                by[role][tree].append(result)
                print(run, role, tree, result, flush=True)
    median: dict[str, Any] = {}
    for role, trees_runs in by.items():
        median[role] = {
            tree: {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            for tree, runs in trees_runs.items()
        }
        if opts.compare is not None:
            m = median[role]
            median[role]["ratio_after_over_before"] = {
                k: round(m["after"][k] / max(m["before"][k], 1e-9), 2)
                for k in m["after"]
                if k not in ("tasks", "rate")
            }
    print(json.dumps(median, indent=2))
    result = {
        "benchmark": "dispatch",
        "cores": os.cpu_count(),
        "runs": opts.runs,
        "tasks_per_run": opts.tasks,
        "trees": {k: str(v) for k, v in trees.items()},
        "median": median,
        "per_run": by,
    }
    name = "dispatch.json" if opts.only is None else f"dispatch-{opts.only}.json"
    out = opts.out or RESULTS / name
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
