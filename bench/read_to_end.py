"""How long bounded reads take to end: the readers that read a topic to the end it had when
they began, and stop there.

- ``restore``: ``kafka.clients.read_partitions`` of 2 changelog partitions, what a decider
  reads when it is handed two partitions (and each ``replay --verify`` group reads);
- ``events``: ``read_partitions`` of every partition of the events topic (``es-sched replay``'s
  reader);
- ``tail``: ``kafka.tail.Tail.catch_up`` on the worker-status topic with nothing new, as
  ``GET /api/v1/workers`` calls it on every request (the median of 5 calls after the first).

Each figure is seconds (``tail``: milliseconds) of wall time, on a history of W media
workflows (``projections.make_history``, fresh topics) or the topics under ``--prefix``; the
worker-status topic gets 50 worker records first. ``--runs`` times each (default 3), medians
reported; with ``--before PATH`` (another checkout) each figure is measured in a child on that
code and on this one, interleaved, so both see the same machine.

Needs `es-sched stack up`. Prints figures, writes bench/results/current/read_to_end.json (or
``--out``).
Rerun: `.venv/bin/python bench/read_to_end.py [--workflows 1000 | --prefix P] [--before PATH]`
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from testkit.settings import kafka_connection

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_CODE", ROOT))  # --before: a child on another checkout
sys.path.insert(0, str(CODE))
KINDS = ("restore", "events", "tail")
TAIL_CALLS = 5


def measure(kind: str, prefix: str) -> dict[str, Any]:
    """One figure, with the es_sched on sys.path (this checkout's or --before's)."""
    from es_sched.kafka.clients import read_partitions  # noqa: PLC0415
    from es_sched.kafka.tail import Tail  # noqa: PLC0415
    from es_sched.kafka.topics import topics_for  # noqa: PLC0415
    from testkit.runtime import Env  # noqa: PLC0415

    settings = Env(prefix=prefix, partitions=12).settings
    topics, bootstrap = topics_for(settings), settings.kafka.bootstrap_servers
    if kind == "tail":
        tail = Tail(kafka_connection(bootstrap), topics.worker_status, 0)
        try:
            records = len(tail.catch_up())
            calls = []
            for _ in range(TAIL_CALLS):
                started = time.monotonic()
                assert tail.catch_up() == []  # nothing new: the figure is the wait alone
                calls.append(time.monotonic() - started)
        finally:
            tail.consumer.close()
        return {"kind": kind, "records": records, "ms": round(statistics.median(calls) * 1e3, 2)}
    topic, parts = (topics.changelog, [0, 1]) if kind == "restore" else (topics.events, range(12))
    started = time.monotonic()
    records = sum(1 for _ in read_partitions(kafka_connection(bootstrap), topic, parts))
    return {"kind": kind, "records": records, "seconds": round(time.monotonic() - started, 3)}


def status_records(prefix: str, count: int = 50) -> None:
    """``count`` worker records on the worker-status topic (keyed by worker, as workers do)."""
    from es_sched.kafka.clients import producer  # noqa: PLC0415
    from es_sched.kafka.topics import topics_for  # noqa: PLC0415
    from testkit.runtime import Env  # noqa: PLC0415

    settings = Env(prefix=prefix, partitions=12).settings
    p = producer(kafka_connection(settings.kafka.bootstrap_servers))
    for i in range(count):
        p.produce(topics_for(settings).worker_status, key=f"bench-worker-{i}", value=b"{}")
    p.flush(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--prefix", help="reuse the history under this topic prefix")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    out = ROOT / "bench" / "results" / "current" / "read_to_end.json"
    parser.add_argument("--out", type=Path, default=out)
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.measure, opts.prefix)))
        return
    from projections import commit, in_subprocess, make_history  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415

    console = Console()
    if opts.prefix:
        prefix = opts.prefix
    else:
        with console.status(f"making a history of {opts.workflows} workflows"):
            prefix = make_history(opts.workflows)[0].prefix
    status_records(prefix)
    codes = {"after": ROOT, **({"before": opts.before.resolve()} if opts.before else {})}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in KINDS} for c in codes}
    for n in range(opts.runs):
        for kind in KINDS:
            for label, code in sorted(codes.items(), reverse=n % 2 == 1):
                r = in_subprocess(__file__, code, ["--measure", kind, "--prefix", prefix])
                runs[label][kind].append(r)
                unit = f"{r['ms']} ms a call" if kind == "tail" else f"{r['seconds']} s"
                console.print(f"run {n + 1} {label:6} {kind:8} {unit} ({r['records']} records)")
    field = {"restore": "seconds", "events": "seconds", "tail": "ms"}
    medians = {
        c: {k: statistics.median(r[field[k]] for r in by[k]) for k in KINDS}
        for c, by in runs.items()
    }
    for kind in KINDS:
        line = f"{kind:8} after {medians['after'][kind]} {field[kind]}"
        if "before" in medians:
            line += f", before {medians['before'][kind]} (before/after "
            line += f"{medians['before'][kind] / max(medians['after'][kind], 1e-6):.1f}x)"
        console.print(line)
    result = {
        "benchmark": "read_to_end",
        "machine": {
            "cores": os.cpu_count(),
            "python": sys.version.split()[0],
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
        },
        "code": {label: commit(code) for label, code in codes.items()},
        "history": {"prefix": prefix},
        "units": field,
        "median": medians,
        "per_run": runs,
    }
    opts.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
