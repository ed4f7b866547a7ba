"""Benchmark a large FORK_JOIN_DYNAMIC on the pure core (issue 13 item 3, ADR 19).

For 1,000, 5,000 and 10,000 branches: one workflow whose fork schedules N worker tasks, each
then dispatched and completed one input at a time, driven as the decider drives the core
(``decide_with_state``, the state it returns kept). Figures: the pure decide CPU time of the whole
run (the fork's input, and all 2N worker inputs), and the largest record of each topic the
decider writes for it (``outbox.outbound``, and the changelog snapshot records), against
librdkafka's 1,000,000-byte ``message.max.bytes``.

``--before PATH`` measures the code at PATH (a checkout of main) the same way, each size in a
subprocess, so one run prints before and after side by side. Main's walk is O(N) per input,
so its 5k and 10k rounds take minutes: ``--before-rounds`` (default 1) bounds them.

Prints the figures, writes bench/results/current/fanout.json.
Rerun: `.venv/bin/python bench/fanout.py [--rounds 3] [--before /path/to/main/checkout]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import track
from rich.table import Table

from es_sched.domain import commands as c
from es_sched.domain.decide import decide_with_state
from es_sched.domain.ids import counter_ids
from es_sched.kafka.topics import Topics
from es_sched.runtime.outbox import outbound
from es_sched.serialization import encode_input
from es_sched.serialization.snapshots import encode_state

try:  # this branch: a large snapshot is chunk records (ADR 19); main: one record
    from es_sched.serialization import chunks
except ImportError:  # main, measured with --before
    chunks = None  # type: ignore[assignment]

ROOT = Path(__file__).resolve().parents[1]
SIZES = (1_000, 5_000, 10_000)
LIMIT = 1_000_000  # librdkafka's default message.max.bytes (the broker's: 1,048,588)
FAN = {
    "name": "fan",
    "version": 1,
    "tasks": [
        {
            "name": "fork",
            "taskReferenceName": "fork",
            "type": "FORK_JOIN_DYNAMIC",
            "inputParameters": {"tasks": "${workflow.input.tasks}", "inputs": {}},
            "dynamicForkTasksParam": "tasks",
            "dynamicForkTasksInputParamName": "inputs",
        },
        {"name": "join", "taskReferenceName": "join", "type": "JOIN"},
    ],
}


def measure(n: int) -> dict[str, Any]:
    """One run of N branches with the es_sched on sys.path: seconds of decide, largest records."""

    def changelog(wf: str, raw: bytes) -> list[bytes]:
        return [value for _, value in chunks.split(wf, raw)] if chunks is not None else [raw]

    topics, ids, now = Topics("bench", 1), counter_ids("t"), datetime(2026, 1, 1, tzinfo=UTC)
    largest: dict[str, int] = {}

    def note(kind: str, size: int) -> None:
        largest[kind] = max(largest.get(kind, 0), size)

    tasks = [{"name": "fan.work", "taskReferenceName": f"b{i}"} for i in range(n)]
    start = c.StartWorkflow(
        "start",
        "wf",
        name="fan",
        input={"tasks": tasks},
        definition=FAN,
        taskdefs=[{"name": "fan.work", "retryCount": 0}],
    )
    note("commands (StartWorkflow)", len(encode_input(start)))
    decide_s, st, inputs = 0.0, None, 0
    snapshot_every = max(1, n // 20)  # the decider writes one per batch: sample 20 of them

    def run(inp: c.Input) -> None:
        nonlocal decide_s, st, inputs
        began = time.process_time()  # CPU time: the machine is shared
        events, st = decide_with_state(st, inp, now, ids)
        decide_s += time.process_time() - began
        inputs += 1
        assert st is not None
        for record in outbound(topics, st, events, lambda _n, _v: None):
            note(record.topic.removeprefix("bench."), len(record.value or b""))
        if inputs % snapshot_every == 0 or st.terminal:
            raw = encode_state(st)
            note("snapshot (whole state)", len(raw))
            note("changelog record", max(len(v) for v in changelog("wf", raw)))

    run(start)
    assert st is not None
    fork_s = decide_s
    branches = [t for t in st.tasks.values() if t.name == "fan.work"]
    assert len(branches) == n, f"{len(branches)} branches scheduled"
    for k, t in enumerate(branches):
        lease: dict[str, Any] = {
            "task_id": t.task_id,
            "attempt": 1,
            "worker_id": "w",
            "lease_epoch": 1,
            "lease_token": f"tok-{k}",
        }
        now += timedelta(milliseconds=1)
        run(c.DispatchTask(f"d{k}", "wf", **lease))
        run(c.ReportCompleted(f"r{k}", "wf", **lease, output={"k": k}))
    assert st.status == "COMPLETED", st.status
    return {
        "branches": n,
        "inputs": inputs,
        "decide_s": round(decide_s, 3),
        "fork_input_s": round(fork_s, 3),
        "largest_bytes": largest,
    }


def in_subprocess(code: Path, n: int) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(n)],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def series(code: Path, rounds: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    label = "main" if code != ROOT else "this branch"
    out: dict[str, Any] = {}
    for n in sizes:
        runs = [in_subprocess(code, n) for _ in track(range(rounds), f"{label}: {n:,} branches")]
        out[str(n)] = {
            "decide_s_median": statistics.median(r["decide_s"] for r in runs),
            "decide_s_runs": [r["decide_s"] for r in runs],
            "fork_input_s_median": statistics.median(r["fork_input_s"] for r in runs),
            "inputs": runs[0]["inputs"],
            "largest_bytes": runs[0]["largest_bytes"],
        }
    return out


def commit(code: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # one run, JSON out
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", type=Path, help="a checkout of main to compare with")
    parser.add_argument("--before-rounds", type=int, default=1)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    opts = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    if opts.measure:
        print(json.dumps(measure(opts.measure)))
        return
    sizes = tuple(int(s) for s in opts.sizes.split(","))
    after = series(ROOT, opts.rounds, sizes)
    before = series(opts.before.resolve(), opts.before_rounds, sizes) if opts.before else {}
    table = Table(title="FORK_JOIN_DYNAMIC, pure core (one core): before -> after")
    for col in (
        "branches",
        "inputs",
        "decide s (whole run)",
        "fork input s",
        "largest event B",
        "largest changelog record B",
        "whole snapshot B",
    ):
        table.add_column(col, justify="right")

    def pair(key: str, n: int, sub: str | None = None) -> str:
        def get(side: dict[str, Any]) -> str:
            if str(n) not in side:
                return "-"
            v = side[str(n)][key] if sub is None else side[str(n)][key].get(sub, 0)
            flag = (
                " (!)"
                if key == "largest_bytes" and sub != "snapshot (whole state)" and v > LIMIT
                else ""
            )
            return f"{v:,}{flag}" if isinstance(v, int) else f"{v:.2f}"

        return f"{get(before)} -> {get(after)}" if before else get(after)

    for n in sizes:
        table.add_row(
            f"{n:,}",
            f"{after[str(n)]['inputs']:,}",
            pair("decide_s_median", n),
            pair("fork_input_s_median", n),
            pair("largest_bytes", n, "events"),
            pair("largest_bytes", n, "changelog record"),
            pair("largest_bytes", n, "snapshot (whole state)"),
        )
    Console().print(table)
    Console().print("(!) over librdkafka's 1,000,000-byte message.max.bytes")
    result = {
        "benchmark": "fanout",
        "what": "one FORK_JOIN_DYNAMIC of N SIMPLE branches, each dispatched and completed "
        "one input at a time; decide_s: pure decide time of the whole run (median of rounds)",
        "machine": {"cores_used": 1, "python": platform.python_version()},
        "record_limit_bytes": LIMIT,
        "after": {"commit": commit(ROOT), "rounds": opts.rounds, "sizes": after},
        "before": {"commit": commit(opts.before), "rounds": opts.before_rounds, "sizes": before}
        if opts.before
        else None,
    }
    out = ROOT / "bench" / "results" / "current" / "fanout.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
