"""Where a media workflow's CPU goes: every process's CPU per workflow, at a steady load.

es-sched as bench/side_by_side.py runs it (es_system.EsSched: fresh topics, the roles in one
process, two no-op workers, the 1080p media DAG of nine worker tasks) takes DAGs open-loop at
``--rate`` for ``--seconds`` and is waited for until every one completed; ``--runs`` windows
one after the other. Each process's CPU (``/proc``: utime + stime of it and its children,
bench/proc_cpu.py) is sampled before and after a window and divided by its workflows:

- ``roles``: the decider, timers, retry relay and dispatcher (``es-sched run``, one process);
- ``worker 0``, ``worker 1``: the no-op workers (bench/noop_worker.py, the SDK);
- ``broker``: the local Kafka node (the JVM named ``kafka.Kafka``);
- ``load``: this process alone (the feeder and the completion reader: the bench, not
  es-sched; es-sched's processes are its children, counted under their own names);
- ``postgres``, ``opensearch``: the stack's stores, which nothing here writes to (their idle).

Before the windows, ``--idle`` seconds with no load give each process's idle rate (polls,
heartbeats, the broker's housekeeping); ``marginal`` is the window's CPU minus that rate times
the window's length, per workflow: the cost a workflow adds, which is what the capacity model's
CPU ceiling needs (issue 15 put the whole at ~35 ms; docs/capacity.md).

Medians of the windows. Rerun (needs `es-sched stack up`): `PYTHONPATH=. .venv/bin/python
bench/cpu_split.py [--rate 26 --seconds 20 --runs 3 --idle 10]`; writes
bench/results/current/cpu_split.json. ``--before TREE`` (an earlier checkout: `git worktree add
/tmp/before REV`) measures both in one run, a fresh es-sched each, before then after in each
of ``--runs`` rounds (one window each, its own idle rates), and writes
bench/results/current/cpu_split_ab.json with the ratios. ``--dispatcher-apart``: the same, with
'after' running the dispatcher in its own process (``dispatcher`` in the table; 'before' is this
checkout unless ``--before`` says otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, TaskID
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import side_by_side as sbs  # noqa: E402
from es_system import EsSched  # noqa: E402
from proc_cpu import tree_cpu_s  # noqa: E402

STORES = {"broker": "kafka.Kafka", "postgres": "postgres -D", "opensearch": "OpenSearch"}


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def processes(system: EsSched) -> dict[str, int]:
    """The pids measured: es-sched's processes, the stack's (the first match of each, its
    children counted with it: postgres's backends) and this one."""
    run, *workers = system.procs
    found = {"roles": run.pid}
    if system.dispatcher_apart:
        found["dispatcher"] = workers.pop(0).pid
    found |= {f"worker {i}": p.pid for i, p in enumerate(workers)}
    cmdlines = {pid: _cmdline(pid) for pid in os.listdir("/proc") if pid.isdigit()}
    for name, needle in STORES.items():
        pids = sorted(int(pid) for pid, text in cmdlines.items() if needle in text)
        if pids:
            found[name] = pids[0]
    found["load"] = os.getpid()
    return found


def sample(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each process and its children; this process's own only (es-sched's
    processes are its children, counted under their own names)."""
    own = os.times()
    return {
        name: own.user + own.system if pid == os.getpid() else tree_cpu_s(pid)
        for name, pid in pids.items()
    }


def window(
    system: EsSched,
    pids: dict[str, int],
    rate: float,
    seconds: float,
    tag: str,
    idle_rate: dict[str, float],
) -> dict[str, Any]:
    system.done.clear()
    before, t0 = sample(pids), time.monotonic()
    n = system.open_loop(rate, seconds, tag, wait_s=180)
    took, after = time.monotonic() - t0, sample(pids)
    done = system.done_count()
    if done < n:
        raise RuntimeError(f"{tag}: {done} of {n} workflows completed in 180 s")
    spent = {name: after[name] - before[name] for name in pids}
    return {
        "workflows": n,
        "seconds": round(took, 2),
        "cpu_s": {k: round(v, 3) for k, v in spent.items()},
        "ms_per_workflow": {k: 1000 * v / n for k, v in spent.items()},
        "marginal_ms_per_workflow": {
            k: 1000 * max(0.0, v - idle_rate[k] * took) / n for k, v in spent.items()
        },
    }


def measure(
    code: Path,
    opts: argparse.Namespace,
    windows_n: int,
    progress: Progress,
    bar: TaskID,
    apart: bool = False,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One fresh es-sched from ``code``: its idle rates, then ``windows_n`` windows."""
    logs = Path(tempfile.mkdtemp(prefix="cpu-split-"))
    system = EsSched(logs, code=code, dispatcher_apart=apart)
    windows: list[dict[str, Any]] = []
    system.start()
    try:
        pids = processes(system)
        before, t0 = sample(pids), time.monotonic()
        time.sleep(opts.idle)
        idle_s, after = time.monotonic() - t0, sample(pids)
        idle_rate = {k: (after[k] - before[k]) / idle_s for k in pids}
        progress.advance(bar)
        for r in range(windows_n):
            windows.append(window(system, pids, opts.rate, opts.seconds, f"w{r}", idle_rate))
            progress.advance(bar)
    finally:
        system.stop()
    return idle_rate, windows


def summary(
    idle_rate: dict[str, float], windows: list[dict[str, Any]], title: str
) -> dict[str, Any]:
    """Medians of the windows, per process and in total, printed as a table."""
    names = list(idle_rate)
    medians = {
        kind: {k: round(statistics.median(w[kind][k] for w in windows), 2) for k in names}
        for kind in ("ms_per_workflow", "marginal_ms_per_workflow")
    }
    total = {kind: round(sum(v.values()), 2) for kind, v in medians.items()}
    table = Table(title=title)
    for col in ("process", "idle CPU %", "ms / workflow", "marginal ms / workflow", "share"):
        table.add_column(col, justify="left" if col == "process" else "right")
    for k in names:
        share = medians["marginal_ms_per_workflow"][k] / total["marginal_ms_per_workflow"]
        table.add_row(
            k,
            f"{100 * idle_rate[k]:.1f}",
            f"{medians['ms_per_workflow'][k]:.2f}",
            f"{medians['marginal_ms_per_workflow'][k]:.2f}",
            f"{share:.0%}",
        )
    table.add_row(
        "total",
        f"{100 * sum(idle_rate.values()):.1f}",
        f"{total['ms_per_workflow']:.2f}",
        f"{total['marginal_ms_per_workflow']:.2f}",
        "",
    )
    Console().print(table)
    return {
        "idle_cpu_per_s": {k: round(v, 4) for k, v in idle_rate.items()},
        "medians": medians,
        "total": total,
        "windows": windows,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=26.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle", type=float, default=10.0, help="seconds of idle measured first")
    ap.add_argument("--before", type=Path, help="an earlier checkout: A/B, a round each in turn")
    ap.add_argument(
        "--dispatcher-apart",
        action="store_true",
        help="A/B: 'after' runs the dispatcher in its own process (--before: this "
        "checkout unless given)",
    )
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    if opts.dispatcher_apart and opts.before is None:
        opts.before = BENCH.parent
    title = f"CPU ms per media workflow at {opts.rate:g} DAGs/s, medians of {opts.runs} windows"
    result: dict[str, Any] = {
        "benchmark": "cpu_split",
        "command": " ".join(sys.argv),
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
    }
    with Progress() as progress:
        if opts.before is None:
            bar = progress.add_task("idle, then windows", total=opts.runs + 1)
            result |= summary(*measure(BENCH.parent, opts, opts.runs, progress, bar), title)
        else:  # interleaved: each round starts before, then after, with one window each
            bar = progress.add_task("rounds (before, after)", total=4 * opts.runs)
            runs: dict[str, list[Any]] = {"before": [], "after": []}
            for _ in range(opts.runs):
                for label, code in (("before", opts.before), ("after", BENCH.parent)):
                    apart = opts.dispatcher_apart and label == "after"
                    runs[label].append(measure(code.resolve(), opts, 1, progress, bar, apart))
    if opts.before is not None:
        for label, got in runs.items():
            idle = {k: statistics.median(i[k] for i, _ in got) for k in got[0][0]}
            result[label] = summary(idle, [w for _, ws in got for w in ws], f"{label}: {title}")
        result["before_tree"] = str(opts.before)
        result["after_dispatcher_apart"] = opts.dispatcher_apart
        result["ratio_after_over_before"] = {
            kind: round(result["after"]["total"][kind] / result["before"]["total"][kind], 3)
            for kind in ("ms_per_workflow", "marginal_ms_per_workflow")
        }
        result["ratio_broker"] = round(
            result["after"]["medians"]["marginal_ms_per_workflow"]["broker"]
            / result["before"]["medians"]["marginal_ms_per_workflow"]["broker"],
            3,
        )
        print(
            "after / before:", result["ratio_after_over_before"], "broker:", result["ratio_broker"]
        )
    name = "cpu_split_ab.json" if opts.before is not None else "cpu_split.json"
    out = opts.out or BENCH / "results" / "current" / name
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
