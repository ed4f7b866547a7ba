"""A decider's restore on the broker, as before ADR 52 and now, interleaved in one run.

``bench/decider_state.py``'s ``kept`` run leaves a changelog of 105,000 one-task workflows,
100,000 of them ended (its topics stay; its JSON names the prefix). This reads that changelog
the way the decider's restore does (one consumer for every partition, ``Changelog.feed``, the
cycle collector paused: ``runtime.decider._restore_read``) and keeps the states two ways, in
alternating order each round: ``decoded`` (every snapshot decoded: the decider before ADR 52)
and ``resting`` (the headers read, an ended workflow's snapshot kept undecoded: the decider
now), each also as ``..._1mib``: read with librdkafka's default fetch sizes (1 MiB a
partition) instead of ``kafka.clients.WHOLE_READ``'s 16 MiB (the reader before 2026-12-06's
change), so ``decoded_1mib`` is the decider's restore at the start of that day. Wall seconds
of the read and of the keeping, and process CPU; medians of ``--rounds``, the order rotated.

Needs `es-sched stack up` and a decider_state run's topics.
Rerun: `.venv/bin/python bench/restore_broker.py [--prefix bstateXXXXXXXX] [--rounds 3]`
(writes bench/results/current/restore_broker.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from es_sched.kafka import clients  # noqa: E402
from es_sched.kafka.topics import Topics  # noqa: E402
from es_sched.serialization.changelog import Changelog  # noqa: E402
from es_sched.tuning import collector_paused  # noqa: E402
from testkit.settings import kafka_connection  # noqa: E402

BOOT = "127.0.0.1:9092"
MODES = ("decoded_1mib", "decoded", "resting_1mib", "resting")


def restore(topic: str, partitions: int, mode: str) -> dict[str, float]:
    headers, whole_read = mode.startswith("resting"), clients.WHOLE_READ
    if mode.endswith("_1mib"):
        clients.WHOLE_READ = {}
    try:
        return _restore(topic, partitions, headers)
    finally:
        clients.WHOLE_READ = whole_read


def _restore(topic: str, partitions: int, headers: bool) -> dict[str, float]:
    with collector_paused():
        t0, c0 = time.monotonic(), time.process_time()
        found = {n: Changelog() for n in range(partitions)}
        for msg in clients.read_partitions(kafka_connection(BOOT), topic, set(range(partitions))):
            key, value = msg.key() or b"", msg.value()
            found[msg.partition() or 0].feed(
                key.decode(),
                value if isinstance(value, bytes) else None,
                msg.headers() if headers else None,
            )
        t1 = time.monotonic()
        kept = [st for f in found.values() for st in (f.kept() if headers else f.states())]
        t2, c2 = time.monotonic(), time.process_time()
    return {
        "states": len(kept),
        "records": sum(f.records for f in found.values()),
        "read_s": t1 - t0,
        "keep_s": t2 - t1,
        "seconds": t2 - t0,
        "cpu_s": c2 - c0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefix", help="default: decider_state.json's kept run")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    prefix = opts.prefix
    if prefix is None:
        state = json.loads((ROOT / "bench/results/current/decider_state.json").read_text())
        prefix = next(r["prefix"] for r in state["runs"] if r["mode"] == "kept")
    topic = Topics(prefix, opts.partitions).changelog
    console = Console()
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    with console.status("restoring") as status:
        for k in range(opts.rounds):
            for mode in MODES[k % 4 :] + MODES[: k % 4]:  # the order rotated each round
                status.update(f"round {k + 1} of {opts.rounds}: {mode}")
                runs[mode].append(restore(topic, opts.partitions, mode))
    medians = {
        mode: {f: statistics.median(r[f] for r in rs) for f in rs[0]} for mode, rs in runs.items()
    }
    timed = ("read_s", "keep_s", "seconds", "cpu_s")
    ratio = {
        f"resting / {m}": {f: round(medians["resting"][f] / medians[m][f], 3) for f in timed}
        for m in MODES[:3]
    }
    table = Table(title=f"restore of {topic} (median of {opts.rounds}, interleaved)")
    for col in ("figure", *MODES, *ratio):
        table.add_column(col, justify="right")
    for f in medians["resting"]:
        cells = [f"{medians[m][f]:,.2f}" for m in MODES]
        table.add_row(f, *cells, *(f"{r[f]:.3f}" if f in r else "" for r in ratio.values()))
    console.print(table)
    result: dict[str, Any] = {
        "benchmark": "restore_broker",
        "topic": topic,
        "rounds": opts.rounds,
        "medians": medians,
        "ratio": ratio,
        "runs": runs,
    }
    out = ROOT / "bench/results/current/restore_broker.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
