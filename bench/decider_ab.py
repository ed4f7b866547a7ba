"""Before/after for the decider, interleaved in one run: bench/decider.py with the decider
importing a baseline checkout (``--before``, e.g. ``git archive main | tar -x -C /tmp/base``)
and then this checkout, A B A B A B; medians of the runs and after/before ratios.

Writes bench/results/current/decider.json: the after medians in bench/decider.py's shape, plus
``before``, ``ratio`` and every run. The machine is shared: the ratios are the figure, the
absolute rates a caveat. Needs the local broker.
Rerun: `.venv/bin/python bench/decider_ab.py --before /tmp/base [--repeat 3 --inputs 6000]`
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIGURES = {
    "start_workflow_backlog": ("inputs_per_second", "start_workflow_backlog"),
    "task_completed_backlog": ("inputs_per_second", "task_completed_backlog"),
    "start_per_cpu_s": ("inputs_per_cpu_second", "start_workflow_backlog"),
    "completed_per_cpu_s": ("inputs_per_cpu_second", "task_completed_backlog"),
    "latency_p50_ms": ("latency_ms", "p50"),
    "latency_p99_ms": ("latency_ms", "p99"),
}


def one(code: Path, out: Path, inputs: int, rate: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "decider.py"),
        "--code",
        str(code),
        "--json",
        str(out),
        "--inputs",
        str(inputs),
        "--rate",
        str(rate),
    ]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: statistics.median(r[a][b] for r in runs) for k, (a, b) in FIGURES.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--inputs", type=int, default=6000)
    parser.add_argument("--rate", type=int, default=1000)
    opts = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {"before": [], "after": []}
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(opts.repeat):
            for side, code in (("before", opts.before), ("after", ROOT)):
                runs[side].append(one(code, Path(tmp) / f"{side}{k}.json", opts.inputs, opts.rate))
                print(side, k, medians(runs[side][-1:]), flush=True)
    before, after = medians(runs["before"]), medians(runs["after"])
    result = runs["after"][-1] | {
        "inputs_per_second": {k: round(after[k]) for k in list(FIGURES)[:2]},
        "inputs_per_cpu_second": {
            "start_workflow_backlog": round(after["start_per_cpu_s"]),
            "task_completed_backlog": round(after["completed_per_cpu_s"]),
        },
        "latency_ms": {"p50": after["latency_p50_ms"], "p99": after["latency_p99_ms"]},
        "before": before,
        "after": after,
        "ratio": {k: round(after[k] / before[k], 2) for k in FIGURES if before[k]},
        "median_of": opts.repeat,
        "interleaved": "before, after, before, after, ... in one run on a shared 2-core machine",
        "runs": runs,
    }
    (ROOT / "bench" / "results" / "current" / "decider.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )
    for name in FIGURES:
        b, a = before[name], after[name]
        print(f"{name:24s} before {b:10,.1f}  after {a:10,.1f}  x{a / b if b else math.nan:.2f}")


if __name__ == "__main__":
    main()
