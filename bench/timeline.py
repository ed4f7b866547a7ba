"""Where a workflow's time goes: every hop of a worker task, from the records' CreateTimes.

es-sched as bench/side_by_side.py runs it (es_system.EsSched: fresh topics, the roles in one
process, two no-op workers, the 1080p media DAG of nine worker tasks) takes DAGs open-loop at
``--rate`` for ``--seconds``, ``--runs`` windows one after the other; after each, every record
of commands, ready, task-results, assignments and events is read back and each worker task's
hops are timed on one clock (one machine) from the CreateTime its producer stamped:

- ``decider -> ready``: the task's ``task.scheduled`` event to its ready record (same decision);
- ``ready -> dispatched``: the ready record to the dispatcher's ``DispatchTask`` (the rest of
  the decider's transaction and its commit, the dispatcher's read and the lease journal's
  delivery);
- ``dispatched -> assigned``: the ``DispatchTask``'s delivery, then the assignment;
- ``assigned -> first report``: the worker's read and, when its start travels with its outcome
  (ADR 44), the no-op handler;
- ``outcome -> event``: the worker's outcome to the decider's ``task.completed`` (the read,
  a transaction in progress waited for, the decision);
- ``workflow``: the command to ``workflow.completed``.

Before the first window the system takes DAGs at the same rate for ``--warmup`` seconds, not
measured: right after the roles start, the first one or two seconds of a window ran at several
times the steady latency (at 22 DAGs/s, workflows submitted in its first 2 s took 0.8-1.1 s at
p50 against 0.17-0.2 s after), which a single window's p95 reported as the system's.

Medians of the windows' percentiles. Rerun (needs `es-sched stack up`):
`PYTHONPATH=. .venv/bin/python bench/timeline.py [--rate 8 --seconds 15 --runs 3]`; writes
bench/results/current/timeline.json (or ``--out``); ``--code TREE`` runs another checkout's
es_sched.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import peer_stats as ps  # noqa: E402
import side_by_side as sbs  # noqa: E402
from es_system import EsSched, run_windows  # noqa: E402

from es_sched.kafka.topics import assignment_topic  # noqa: E402

HOPS = (
    "decider -> ready",
    "ready -> dispatched",
    "dispatched -> assigned",
    "assigned -> first report",
    "outcome -> event",
    "workflow",
)
REPORTS = ("worker.task_started", "worker.task_completed", "worker.task_failed")
OUTCOMES = ("worker.task_completed", "worker.task_failed")


def _first(times: dict[str, float], key: str, ts: float) -> None:
    if key not in times or ts < times[key]:
        times[key] = ts


def hops(records: dict[str, list[tuple[bytes, float]]]) -> dict[str, list[float]]:
    """Each hop's durations (ms) over the tasks and workflows the records show whole."""
    at: dict[str, dict[str, float]] = {
        k: {}
        for k in (
            "scheduled",
            "ready",
            "dispatched",
            "assigned",
            "report",
            "outcome",
            "event",
            "submitted",
            "completed",
        )
    }
    for value, ts in records["commands"]:
        _first(at["submitted"], json.loads(value)["workflow_id"], ts)
    for value, ts in records["ready"]:
        _first(at["ready"], json.loads(value)["task_id"], ts)
    for value, ts in records["assignments"]:
        doc = json.loads(value)
        if doc.get("kind", "assignment") == "assignment" and "lease_token" in doc:
            _first(at["assigned"], doc["task_id"], ts)
    for value, ts in records["task_results"]:
        doc = json.loads(value)
        kind, task = doc.get("type"), doc.get("task_id", "")
        if kind == "dispatcher.task_dispatched":
            _first(at["dispatched"], task, ts)
        if kind in REPORTS:
            _first(at["report"], task, ts)
        if kind in OUTCOMES:
            _first(at["outcome"], task, ts)
    for value, ts in records["events"]:
        doc = json.loads(value)
        kind, payload = doc["type"], doc.get("payload", {})
        if kind == "task.scheduled":
            _first(at["scheduled"], payload["task_id"], ts)
        elif kind in ("task.completed", "task.failed"):
            _first(at["event"], payload["task_id"], ts)
        elif kind == "workflow.completed":
            _first(at["completed"], doc["workflow_id"], ts)
    pairs = {
        "decider -> ready": ("scheduled", "ready"),
        "ready -> dispatched": ("ready", "dispatched"),
        "dispatched -> assigned": ("dispatched", "assigned"),
        "assigned -> first report": ("assigned", "report"),
        "outcome -> event": ("outcome", "event"),
        "workflow": ("submitted", "completed"),
    }
    out: dict[str, list[float]] = {}
    for hop, (a, b) in pairs.items():
        start, end = at[a], at[b]
        out[hop] = [(end[k] - start[k]) * 1000 for k in start if k in end]
    return out


def window(system: EsSched, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    topics = system.env.topics
    names = {
        "commands": topics.commands,
        "ready": topics.ready,
        "task_results": topics.task_results,
        "events": topics.events,
        "assignments": assignment_topic(system.env.prefix, "default"),
    }
    for topic in names.values():  # start after what earlier windows (and the warm-up) wrote
        system._read_new(topic)
    n = system.open_loop(rate, seconds, tag)
    records = {k: system._read_new(t) for k, t in names.items()}
    found = hops(records)
    return {
        "workflows": n,
        "completed": system.done_count(),
        "hops": {h: ps.latency_summary(found.get(h, [])) for h in HOPS},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=8.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds at --rate, unmeasured")
    ap.add_argument("--code", type=Path, default=BENCH.parent, help="the checkout to run")
    ap.add_argument(
        "--dispatcher-apart",
        action="store_true",
        help="the dispatcher in its own process, not a thread of the roles'",
    )
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "current" / "timeline.json")
    opts = ap.parse_args()
    logs = Path(tempfile.mkdtemp(prefix="timeline-"))
    system = EsSched(logs, code=opts.code, dispatcher_apart=opts.dispatcher_apart)

    def take(tag: str) -> dict[str, Any]:
        if tag == "w0" and opts.warmup > 0:
            system.open_loop(opts.rate, opts.warmup, "warm")  # the window reads after it
            system.done.clear()
        return window(system, opts.rate, opts.seconds, tag)

    windows = run_windows(system, opts.runs, take)
    medians = {
        hop: {
            q: statistics.median(w["hops"][hop][q] or 0.0 for w in windows)
            for q in ("p50", "p95", "p99")
        }
        for hop in HOPS
    }
    table = Table(title=f"hops of a worker task at {opts.rate:g} DAGs/s, medians of {opts.runs}")
    for col in ("hop", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(col, justify="left" if col == "hop" else "right")
    for hop in HOPS:
        table.add_row(hop, *(f"{medians[hop][q]:.1f}" for q in ("p50", "p95", "p99")))
    Console().print(table)
    result = {
        "benchmark": "timeline",
        "command": " ".join(sys.argv),
        "code": str(opts.code),
        "dispatcher_apart": opts.dispatcher_apart,
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
        "warmup_s": opts.warmup,
        "medians": medians,
        "windows": windows,
    }
    ps.write_result(opts.out, result)


if __name__ == "__main__":
    main()
