"""Benchmark `es-sched stack up`: first run, warm run, already running; and service memory.

Runs a private stack (own state folder, own ports) so it never touches the developer's stack:

- cold:    empty state folder and empty Maven repository (downloads every jar, initdb, format)
- warm:    jars and data present, services stopped
- running: everything already up (what a second `stack up` costs)

After each warm start it records the PSS of each service's process tree. Prints medians and
writes bench/results/current/stack_up.json.  Rerun: `.venv/bin/python bench/stack_up.py [--cold 3
--warm 5]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
PORTS = {
    "ES_SCHED_KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:19192",
    "ES_SCHED_STACK_KAFKA_CONTROLLER_PORT": "19193",
    "ES_SCHED_PG_URL": "postgresql+psycopg://es_sched:es_sched@127.0.0.1:25532/es_sched",
    "ES_SCHED_SEARCH_URL": "http://127.0.0.1:9280",
    "ES_SCHED_STACK_MODE": "local",
}


def cli(env: dict[str, str], *args: str) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "es_sched", *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    took = time.perf_counter() - started
    if done.returncode not in (0, 1) or (args[-1] == "up" and done.returncode):
        raise SystemExit(f"es-sched {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return took, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cold", type=int, default=3)
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--running", type=int, default=5)
    opts = parser.parse_args()
    console = Console()
    work = Path(tempfile.mkdtemp(prefix="es-sched-bench-"))
    times: dict[str, list[float]] = {"cold": [], "warm": [], "running": []}
    memory: dict[str, list[float]] = {"kafka": [], "postgres": [], "search": []}
    total = opts.cold + opts.warm + opts.running
    try:
        with Progress(console=console) as progress:
            task = progress.add_task("stack up runs", total=total)
            for i in range(opts.cold):
                env = {
                    **PORTS,
                    "ES_SCHED_STACK_STATE_DIR": str(work / f"cold{i}"),
                    "MAVEN_OPTS": f"-Dmaven.repo.local={work / f'm2-{i}'}",
                }
                took, _ = cli(env, "stack", "up")
                times["cold"].append(took)
                cli(env, "stack", "down")
                progress.advance(task)
            env = {**PORTS, "ES_SCHED_STACK_STATE_DIR": str(work / "cold0")}
            for _ in range(opts.warm):
                took, _ = cli(env, "stack", "up")
                times["warm"].append(took)
                _, status = cli(env, "stack", "status", "--json")
                doc = json.loads(status)
                for role, samples in memory.items():
                    samples.append(float(doc[role]["memory_mb"]))
                cli(env, "stack", "down")
                progress.advance(task)
            cli(env, "stack", "up")
            for _ in range(opts.running):
                took, _ = cli(env, "stack", "up")
                times["running"].append(took)
                progress.advance(task)
            cli(env, "stack", "down")
    finally:
        shutil.rmtree(work, ignore_errors=True)

    seconds = {
        k: {"median": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]}
        for k, v in times.items()
        if v
    }
    mem = {k: {"median": round(statistics.median(v), 1), "runs": v} for k, v in memory.items() if v}
    result = {
        "benchmark": "stack_up",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "seconds": seconds,
        "memory_mb_pss_after_start": mem,
    }
    table = Table(title="es-sched stack up")
    table.add_column("case")
    table.add_column("median s", justify="right")
    table.add_column("runs", justify="right")
    for case, figures in seconds.items():
        table.add_row(case, f"{figures['median']:.2f}", str(len(times[case])))
    for role, sample in mem.items():
        table.add_row(f"{role} memory (MiB PSS)", f"{sample['median']:.0f}", str(len(memory[role])))
    console.print(table)
    out = ROOT / "bench" / "results" / "current" / "stack_up.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
