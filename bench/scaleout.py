"""Scale out on one machine: 1 vs 2 decider processes (``es-sched run --processes N``, ADR 33).

Two figures per variant, the variants interleaved (1, 2, 1, 2, ...; ``--runs`` of each),
medians and the 2/1 ratio reported:
- decider inputs/s: ``bench/decider.py``'s phase 1 (a backlog of StartWorkflow commands of a
  one-task workflow, throughput = inputs / span of the committed ``workflow.started`` broker
  timestamps), except that the deciders start first and the backlog is produced, pre-encoded,
  once the decider group is stable with N members owning partitions: a late joiner would
  otherwise find the backlog half eaten by the first;
- end to end workflows/s: ``bench/e2e.py``'s run (media workflows, dispatcher, two no-op
  workers), with the decider in its own ``run --processes N --role decider`` and the timers,
  retry relay and dispatcher in another process in both variants, so only the decider's
  process count differs.
Neither is pinned to a core: two processes on a 2-core machine shared with the broker, the
dispatcher and the workers. The machine is shared; absolute figures are noisy, the ratio
measured in one run is the figure.

Needs the stack up. Prints figures, writes bench/results/current/scaleout.json.
Rerun: `.venv/bin/python bench/scaleout.py [--runs 3 --inputs 10000 --workflows 300]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import e2e  # noqa: E402  (bench/ is the script's first path entry, as for its siblings)
from decider import BATCH_MS, BATCH_RECORDS, BOOT, ONE_TASK, tail_events  # noqa: E402

from es_sched.domain import commands as c  # noqa: E402
from es_sched.domain.ids import workflow_id_for_command  # noqa: E402
from es_sched.kafka.clients import producer  # noqa: E402
from es_sched.kafka.topics import Topics, ensure_topics  # noqa: E402
from es_sched.serialization import encode_input  # noqa: E402
from es_sched.serialization.definitions import encode_definition, key_of  # noqa: E402
from testkit.settings import kafka_connection  # noqa: E402
from testkit.wait import wait_until  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "current"


def owning_members(bootstrap: str, group: str) -> int:
    """Members of a stable ``group`` that own partitions (0 while it rebalances)."""
    admin = AdminClient(kafka_connection(bootstrap).config())  # kept alive until the answer
    described = admin.describe_consumer_groups([group])
    try:
        desc = described[group].result(30)
    except (KafkaException, TimeoutError):  # the coordinator is busy: ask again
        return 0
    if not str(desc.state).endswith("STABLE"):
        return 0
    return sum(bool(m.assignment.topic_partitions) for m in desc.members)


def deciders(n: int, extra_env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``es-sched run --processes n --role decider`` (``--processes 1``: the roles in-process)."""
    return subprocess.Popen(
        [sys.executable, "-m", "es_sched", "run", "--processes", str(n), "--role", "decider"],
        env={**os.environ, **extra_env},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=ROOT,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(90)
    except subprocess.TimeoutExpired:
        proc.kill()


def delete_topics(prefix: str) -> None:
    admin = AdminClient(kafka_connection(BOOT).config())
    mine = [t for t in admin.list_topics(timeout=30).topics if t.startswith(prefix + ".")]
    for future in admin.delete_topics(mine, operation_timeout=30).values():
        future.result()


def decider_run(n: int, inputs: int, partitions: int, progress: Progress) -> float:
    """inputs/s of ``n`` decider processes through a backlog of StartWorkflow commands."""
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    topics = Topics(prefix, partitions)
    ensure_topics(kafka_connection(BOOT), topics)
    p = producer(kafka_connection(BOOT))
    for kind, doc in [("workflow", ONE_TASK), ("taskdef", {"name": "unit", "retryCount": 0})]:
        p.produce(topics.definitions, key=key_of(kind, doc), value=encode_definition(doc))
    p.flush(30)
    backlog = []
    for i in range(inputs):
        cid = f"{prefix}-{i}"
        cmd = c.StartWorkflow(cid, workflow_id_for_command(cid), name="bench_one", input={"i": i})
        backlog.append((cmd.workflow_id.encode(), encode_input(cmd)))
    env = {
        "ES_SCHED_KAFKA_TOPIC_PREFIX": prefix,
        "ES_SCHED_KAFKA_PARTITIONS": str(partitions),
        "ES_SCHED_RUN_BATCH_MAX_RECORDS": str(BATCH_RECORDS),
        "ES_SCHED_RUN_BATCH_MAX_MS": str(BATCH_MS),
    }
    proc = deciders(n, env, RESULTS / f"scaleout-decider{n}.log")
    try:
        wait_until(
            lambda: owning_members(BOOT, f"{prefix}-decider") == n,
            120,
            f"{n} decider process(es) owning partitions",
        )
        for key, value in backlog:
            p.produce(topics.commands, key=key, value=value)
            p.poll(0)
        p.flush(120)
        seen = tail_events(
            topics, partitions, inputs, "workflow.started", progress, f"{n} decider process(es)"
        )
    finally:
        stop(proc)
        delete_topics(prefix)
    return inputs / max((seen["__last_ms"] - seen["__first_ms"]) / 1000, 1e-9)


def e2e_run(n: int, workflows: int, seconds: float, progress: Progress) -> dict[str, Any]:
    """``bench/e2e.py``'s run, its role process split: ``--processes n --role decider``
    beside ``--role timers --role retry --role dispatcher``."""
    extra: list[subprocess.Popen[bytes]] = []
    spawn = e2e.spawn

    def split(
        env: Any,
        args: list[str],
        log: Path,
        entry: tuple[str, ...] = ("-m", "es_sched"),
        code: Path = e2e.ROOT,
    ) -> subprocess.Popen[bytes]:
        if args[:1] != ["run"]:
            return spawn(env, args, log, entry, code)
        extra.append(deciders(n, env.vars, RESULTS / f"scaleout-e2e-decider{n}.log"))
        wait_until(
            lambda: owning_members(env.bootstrap, f"{env.prefix}-decider") == n,
            120,
            f"{n} decider process(es) owning partitions",
        )
        others = ["--role", "timers", "--role", "retry", "--role", "dispatcher"]
        return spawn(env, ["run", *others], log, entry, code)

    e2e.spawn = split
    try:
        opts = argparse.Namespace(workflows=workflows, seconds=seconds)
        return e2e.one_run(opts, progress)
    finally:
        e2e.spawn = spawn
        for proc in extra:
            stop(proc)


def summary(
    opts: argparse.Namespace,
    rates: dict[int, list[float]],
    e2e_rates: dict[int, list[float]],
    done: int,
) -> dict[str, Any]:
    def med(xs: list[float]) -> float:
        return float(round(statistics.median(xs), 1))

    def figures(data: dict[int, list[float]]) -> dict[str, Any]:
        return {
            "per_run": {str(n): v for n, v in data.items()},
            "median": {str(n): med(v) for n, v in data.items()},
            "ratio_2_over_1": round(med(data[2]) / med(data[1]), 2),
        }

    return {
        "benchmark": "scaleout",
        "machine": {
            "cores": os.cpu_count(),
            "broker": BOOT,
            "note": "shared machine: read the ratios",
        },
        "runs": done,
        "runs_asked": opts.runs,
        "order": "interleaved 1, 2 per run",
        "decider_inputs_per_second": {
            "inputs": opts.inputs,
            "partitions": opts.partitions,
            **figures(rates),
        },
        "e2e_workflows_per_second": {"workflows": opts.workflows, **figures(e2e_rates)},
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--workflows", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=5)
    opts = parser.parse_args()
    rates: dict[int, list[float]] = {1: [], 2: []}
    e2e_rates: dict[int, list[float]] = {1: [], 2: []}
    with Progress() as progress:
        for done in range(1, opts.runs + 1):
            for n in (1, 2):  # interleaved: 1, 2, 1, 2, ...
                rates[n].append(round(decider_run(n, opts.inputs, opts.partitions, progress)))
                run = e2e_run(n, opts.workflows, opts.seconds, progress)
                e2e_rates[n].append(run["workflows_per_second"])
            # after every pair: a run that dies later (a shared broker stalls) keeps these
            result = summary(opts, rates, e2e_rates, done)
            (RESULTS / "scaleout.json").write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"1 vs 2 decider processes, medians of {done} interleaved runs")
    for col in ("figure", "1 process", "2 processes", "2/1", "runs (1 | 2)"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    rows = [
        ("decider inputs/s", "decider_inputs_per_second", rates),
        ("e2e workflows/s", "e2e_workflows_per_second", e2e_rates),
    ]
    for label, key, data in rows:
        row = result[key]
        assert isinstance(row, dict)
        table.add_row(
            label,
            str(row["median"]["1"]),
            str(row["median"]["2"]),
            str(row["ratio_2_over_1"]),
            f"{data[1]} | {data[2]}",
        )
    Console().print(table)


if __name__ == "__main__":
    main()
