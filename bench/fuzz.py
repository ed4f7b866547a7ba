"""The decider's throughput with and without the hostile input campaign (issue 52 item 4,
ADR 75): does refusing bad input slow the legitimate load, and by how much per hostile record?

Each round, on fresh topics, a backlog is produced before a decider starts: ``--workflows``
StartWorkflow commands of a one-task workflow alone ("clean"), or the same starts with one
input of ``testkit.hostile``'s campaign after every K of them ("campaign 1:K", for each K of
``--every``; mutations, oversize records and forged ids as the integration test draws them).
The decider then works through it. Throughput = legitimate workflows started / (broker time of
the last ``workflow.started`` - that of the first), as ``bench/decider.py`` times a backlog;
``records_per_s`` counts every record decided (inputs and dead letters), so a variant whose
legitimate rate falls only by the share of its records that are hostile spends no more on a
hostile record than on a legitimate one.

The variants take turns, the order rotated each round; the JSON keeps every round, the
medians and each campaign's ratio of medians to clean. The performance page also gives the
median of each campaign's ratios to the clean round of its own turn (``bench/report.py``,
``paired_ratios``), what the target of at least 0.8 is judged by: the machine drifts between
turns by more than a campaign of 1:10 costs.

Needs `es-sched stack up`. Writes bench/results/current/fuzz.json.
Rerun: `PYTHONPATH=. .venv/bin/python bench/fuzz.py --rounds 3 --workflows 10000 --every 1,10`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.kafka.clients import consumer, producer
from es_sched.serialization import encode_input
from es_sched.settings import load_settings
from testkit.hostile import COMMANDS, Hostile, campaign
from testkit.runtime import Env, roles

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "current" / "fuzz.json"
NAME = "fuzz_bench_one"
ONE_TASK = {
    "name": NAME,
    "version": 1,
    "tasks": [{"name": "fuzz_unit", "taskReferenceName": "unit", "type": "SIMPLE"}],
}
TASKDEFS = [{"name": "fuzz_unit", "retryCount": 0, "timeoutSeconds": 3600}]


def legit_starts(n: int, tag: str) -> list[tuple[str, bytes]]:
    out = []
    for i in range(n):
        cid = f"bench-{tag}-{i}"
        wf = workflow_id_for_command(cid)
        start = c.StartWorkflow(cid, wf, name=NAME, version=None, input={})
        out.append((start.workflow_id, encode_input(start)))
    return out


def backlog(env: Env, legit: list[tuple[str, bytes]], hostile: list[Hostile], every: int) -> None:
    """The legitimate starts, a hostile record after every ``every``-th while they last."""
    p = producer(env.kafka, None, **{"message.max.bytes": 4 * 1024 * 1024})
    mixed = iter(hostile)
    for i, (key, value) in enumerate(legit, 1):
        p.produce(env.topics.commands, key=key.encode(), value=value)
        h = next(mixed, None) if i % every == 0 else None
        if h is not None:
            topic = env.topics.commands if h.topic == COMMANDS else env.topics.task_results
            p.produce(topic, key=h.key.encode(), value=h.value)
        p.poll(0)
    assert p.flush(300) == 0


def started_times(env: Env, want: set[str], timeout_s: float = 900) -> list[int]:
    """Broker timestamps (ms) of each wanted workflow's ``workflow.started``."""
    cons = consumer(env.kafka, None)
    cons.assign([TopicPartition(env.topics.events, p, 0) for p in range(env.partitions)])
    stamps: dict[str, int] = {}
    deadline = time.monotonic() + timeout_s
    try:
        while len(stamps) < len(want) and time.monotonic() < deadline:
            for msg in cons.consume(1000, 0.2):
                if msg.error() is not None:
                    if msg.error().code() != KafkaError._PARTITION_EOF:  # type: ignore[union-attr]
                        raise SystemExit(str(msg.error()))
                    continue
                doc = json.loads(msg.value() or b"{}")
                wf = doc.get("workflow_id")
                if doc.get("type") == "workflow.started" and wf in want and wf not in stamps:
                    stamps[wf] = msg.timestamp()[1]
    finally:
        cons.close()
    if len(stamps) < len(want):
        raise SystemExit(f"only {len(stamps)} of {len(want)} workflows started")
    return sorted(stamps.values())


def one_round(every: int, n: int, hostile: list[Hostile], tag: str) -> dict[str, Any]:
    """``every`` 0: the clean backlog; else one hostile record after every ``every`` starts."""
    env = Env()
    env.create()
    env.push(ONE_TASK, TASKDEFS)
    legit = legit_starts(n, tag)
    mixed = hostile[: n // every] if every else []
    backlog(env, legit, mixed, every or n + 1)
    with roles(env, "decider") as [decider]:
        stamps = started_times(env, {wf for wf, _ in legit})
        stopped = decider
    stats = _final_stats(stopped.text())
    seconds = (stamps[-1] - stamps[0]) / 1000
    decided = stats.get("inputs", 0) + stats.get("dead_letters", 0)
    return {
        "variant": variant_name(every),
        "workflows": n,
        "hostile": len(mixed),
        "hostile_mb": round(sum(len(h.value) for h in mixed) / 1e6, 1),
        "seconds": round(seconds, 3),
        "workflows_per_s": round((n - 1) / seconds, 1) if seconds > 0 else None,
        "records_per_s": round(decided / seconds, 1) if seconds > 0 else None,
        "decider": stats,
    }


def variant_name(every: int) -> str:
    return f"campaign 1:{every}" if every else "clean"


def _final_stats(log: str) -> dict[str, Any]:
    """The decider's own counts from its last line (``stopped: {...}``)."""
    for line in reversed(log.splitlines()):
        if " stopped: {" in line:
            return dict(json.loads(line.split(" stopped: ", 1)[1].replace("'", '"')))
    return {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workflows", type=int, default=10_000)
    parser.add_argument(
        "--every",
        type=lambda text: [int(x) for x in text.split(",")],
        default=[1, 10],
        help="campaign intensities: one hostile record after every K legitimate starts",
    )
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    cap = load_settings().runtime.command_max_bytes  # the decider's cap, as it reads it
    began = datetime.now(UTC)
    t0 = time.monotonic()
    hostile = campaign(args.workflows // min(args.every) - 1, [], cap, NAME)
    drawn_s = time.monotonic() - t0
    rounds: list[dict[str, Any]] = []
    variants = [0, *args.every]
    for r in range(args.rounds):
        turn = r % len(variants)  # the order rotates each round: each variant goes first once
        for every in variants[turn:] + variants[:turn]:
            got = one_round(every, args.workflows, hostile, f"{r}-{every}")
            print(json.dumps(got))
            rounds.append(got)
    median = {
        variant_name(e): statistics.median(
            x["workflows_per_s"] for x in rounds if x["variant"] == variant_name(e)
        )
        for e in variants
    }
    clean = median["clean"]
    result = {
        "question": "the decider's legitimate workflows/s with the hostile campaign interleaved",
        "began": began.isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor() or None},
        "core": os.environ.get("ES_SCHED_CORE", "auto"),
        "workflows": args.workflows,
        "hostile_drawn": len(hostile),
        "hostile_by_mutation": dict(sorted(Counter(h.mutation for h in hostile).items())),
        "drawn_s": round(drawn_s, 1),
        "rounds": rounds,
        "median_workflows_per_s": median,
        "ratio_to_clean": {v: round(m / clean, 3) for v, m in median.items() if v != "clean"},
        "target_ratio": 0.8,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("median_workflows_per_s", "ratio_to_clean")}))


if __name__ == "__main__":
    main()
