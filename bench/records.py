"""What a media workflow writes to Kafka: records and transaction markers per workflow, by topic.

The broker's cost is per request and per partition a transaction touches more than per byte
(ADR 48: a JFR profile of the broker), so the count of records and of commit markers each
workflow leaves is the figure to drive down. es-sched as bench/side_by_side.py runs it
(es_system.EsSched: fresh topics of the default partition count, the roles in one process, two no-op
workers, the 1080p media DAG) takes ``--rate`` DAGs/s for ``--seconds``; once all completed,
every topic of the run is read back (``read_committed``): ``records`` are the committed records,
``markers`` the offsets between them (a transaction's commit marker on each partition it
touched, and the few aborted records), ``partitions`` the partitions written. The timers
topic is also counted by kind (tombstones apart). Per workflow, the warm-up one included.

Rerun (needs `es-sched stack up`): `PYTHONPATH=. .venv/bin/python bench/records.py [--rate 10
--seconds 10 --runs 3] [--before TREE]`; with ``--before`` (an earlier checkout: `git worktree
add /tmp/before REV`) each round runs before then after, and the medians of both are written
with their ratio. Writes bench/results/current/records.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import side_by_side as sbs  # noqa: E402
from es_system import EsSched  # noqa: E402

from es_sched.kafka.clients import consumer  # noqa: E402
from testkit.settings import (  # noqa: E402
    BOOTSTRAP,
    kafka_connection,
)


def _read_topic(topic: str, parts: list[int]) -> tuple[int, int, int, collections.Counter[str]]:
    """(offsets, committed records, partitions written, timers by kind) of one topic."""
    cons = consumer(kafka_connection(BOOTSTRAP), None)
    tps = [TopicPartition(topic, p, 0) for p in parts]
    ends = {tp.partition: cons.get_watermark_offsets(tp, timeout=10) for tp in tps}
    offsets = sum(hi - lo for lo, hi in ends.values())
    written = sum(hi > lo for lo, hi in ends.values())
    kinds: collections.Counter[str] = collections.Counter()
    records, quiet = 0, 0
    todo = {p for p, (lo, hi) in ends.items() if hi > lo}
    cons.assign([tp for tp in tps if tp.partition in todo])
    while todo and quiet < 2:  # to the ends seen first; a quiet topic may end in a marker
        msgs = cons.consume(1000, 1.0)
        quiet = 0 if msgs else quiet + 1
        for msg in msgs:
            p, at = msg.partition() or 0, msg.offset() or 0
            if msg.error() is not None or p not in todo or at >= ends[p][1]:
                continue  # a record written after the ends were taken (worker heartbeats)
            records += 1
            if at >= ends[p][1] - 1:
                todo.discard(p)
            if topic.endswith(".timers"):
                value = msg.value()
                kinds["tombstone" if value is None else json.loads(value)["kind"]] += 1
    cons.close()
    return offsets, records, written, kinds


def count(code: Path, rate: float, seconds: float) -> dict[str, Any]:
    system = EsSched(Path(tempfile.mkdtemp(prefix="records-")), code=code)
    system.start()
    try:
        n = system.open_loop(rate, seconds, "r", wait_s=180) + 1  # and the warm-up
        if system.done_count() + 1 < n:
            raise RuntimeError(f"{system.done_count() + 1} of {n} workflows completed")
        cons = consumer(kafka_connection(BOOTSTRAP), None)
        meta = cons.list_topics(timeout=10).topics
        cons.close()
        prefix = system.env.prefix + "."
        topics: dict[str, Any] = {}
        for topic in sorted(t for t in meta if t.startswith(prefix)):
            offsets, records, written, kinds = _read_topic(topic, list(meta[topic].partitions))
            if offsets:
                topics[topic.removeprefix(prefix)] = {
                    "records": records / n,
                    "markers": (offsets - records) / n,
                    "partitions": written,
                    **({"kinds": {k: v / n for k, v in kinds.items()}} if kinds else {}),
                }
    finally:
        system.stop()
    return {"workflows": n, "topics": topics}


def medians(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    names = sorted({t for r in rounds for t in r["topics"]})
    out: dict[str, Any] = {}
    for t in names:
        got = [r["topics"].get(t, {"records": 0.0, "markers": 0.0}) for r in rounds]
        out[t] = {k: round(statistics.median(g[k] for g in got), 2) for k in ("records", "markers")}
    out["all topics"] = {
        k: round(statistics.median(sum(v[k] for v in r["topics"].values()) for r in rounds), 2)
        for k in ("records", "markers")
    }
    return out


def table(title: str, got: dict[str, dict[str, Any]]) -> None:
    t = Table(title=title)
    t.add_column("topic")
    for label in got:
        t.add_column(f"{label} records / wf", justify="right")
        t.add_column(f"{label} markers / wf", justify="right")
    for name in next(iter(got.values())):
        row = [name]
        for med in got.values():
            m = med.get(name, {"records": 0.0, "markers": 0.0})
            row += [f"{m['records']:.2f}", f"{m['markers']:.2f}"]
        t.add_row(*row)
    Console().print(t)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=10.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--before", type=Path, help="an earlier checkout: both, in turn, each round")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "current" / "records.json")
    opts = ap.parse_args()
    trees = (
        {"after": BENCH.parent}
        if opts.before is None
        else {"before": opts.before.resolve(), "after": BENCH.parent}
    )
    rounds: dict[str, list[dict[str, Any]]] = {label: [] for label in trees}
    with Progress() as progress:
        bar = progress.add_task("rounds", total=opts.runs * len(trees))
        for _ in range(opts.runs):
            for label, code in trees.items():
                rounds[label].append(count(code, opts.rate, opts.seconds))
                progress.advance(bar)
    got = {label: medians(r) for label, r in rounds.items()}
    table(
        f"Kafka records and markers per media workflow at {opts.rate:g} DAGs/s, "
        f"medians of {opts.runs}",
        got,
    )
    result: dict[str, Any] = {
        "benchmark": "records",
        "command": " ".join(sys.argv),
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
        "medians": got,
        "rounds": rounds,
    }
    if opts.before is not None:
        result["before_tree"] = str(opts.before)
        b, a = got["before"]["all topics"], got["after"]["all topics"]
        result["ratio_after_over_before"] = {
            k: round(a[k] / b[k], 3) if b[k] else None for k in ("records", "markers")
        }
        print("after / before:", result["ratio_after_over_before"])
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
