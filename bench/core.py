"""Benchmark the pure core on examples/media_pipeline.json, pinned to one core.

- fold: events per second folding recorded media-pipeline histories (1080p: 36 events each).
- decide: time of one ``decide(state, input, now, ids, scripts)`` call for every input of a
  1080p run (start, dispatches, worker reports), each repeated; median and p95 over inputs.

Prints the figures, writes bench/results/current/core.json.
Rerun: `.venv/bin/python bench/core.py [--rounds 5]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import track
from rich.table import Table

from es_sched.domain import commands as c
from es_sched.domain.decide import decide
from es_sched.domain.events import Event
from es_sched.domain.evolve import fold
from es_sched.domain.ids import counter_ids
from es_sched.domain.state import WorkflowState
from es_sched.scripting.quickjs import QuickJsEngine
from es_sched.simulate import Simulation

ROOT = Path(__file__).resolve().parents[1]
INPUT = {"source_uri": "file:///in.mp4", "asset_id": "a", "callback_url": "http://cb"}


class Recording(Simulation):
    """A simulation that keeps every (state, input, now) the decider was called with."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[WorkflowState | None, c.Input, Any]] = []

    def _apply(self, wf_id: str, inp: c.Input) -> None:
        self.calls.append((self.workflows[wf_id].state, inp, self.now))
        super()._apply(wf_id, inp)


def media_run() -> tuple[list[Event], Recording]:
    definition = json.loads((ROOT / "examples" / "media_pipeline.json").read_text())
    taskdefs = json.loads((ROOT / "examples" / "media_taskdefs.json").read_text())
    script = [{"ref": "probe", "output": {"height": 1080, "duration": 8.0}}]
    sim = Recording([definition], taskdefs, script, scripts=QuickJsEngine())
    sim.run(definition, INPUT)
    return sim.workflows["wf-1"].events, sim


def bench_fold(events: list[Event], rounds: int, histories: int) -> list[float]:
    rates = []
    for _ in track(range(rounds), description="fold"):
        started = time.perf_counter()
        for _ in range(histories):
            fold(events)
        rates.append(histories * len(events) / (time.perf_counter() - started))
    return rates


def bench_decide(sim: Recording, repeats: int) -> tuple[list[float], list[str]]:
    per_input, kinds = [], []
    scripts = QuickJsEngine()
    for state, inp, now in track(sim.calls, description="decide"):
        samples = []
        for _ in range(repeats):
            ids = counter_ids("b")
            started = time.perf_counter_ns()
            decide(state, inp, now, ids, scripts)
            samples.append((time.perf_counter_ns() - started) / 1000)
        per_input.append(statistics.median(samples))
        kinds.append(inp.TYPE)
    return per_input, kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--histories", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=200)
    opts = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    events, sim = media_run()
    rates = bench_fold(events, opts.rounds, opts.histories)
    per_input, kinds = bench_decide(sim, opts.repeats)
    ordered = sorted(per_input)
    by_kind: dict[str, list[float]] = {}
    for kind, us in zip(kinds, per_input, strict=True):
        by_kind.setdefault(kind, []).append(us)
    fold_figures = {
        "events_per_history": len(events),
        "events_per_second_median": round(statistics.median(rates)),
        "rounds": [round(r) for r in rates],
    }
    decide_figures = {
        "inputs": len(per_input),
        "median_us": round(statistics.median(per_input), 1),
        "p95_us": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
        "max_us": round(ordered[-1], 1),
    }
    kind_medians = {k: round(statistics.median(v), 1) for k, v in sorted(by_kind.items())}
    result = {
        "benchmark": "core",
        "definition": "examples/media_pipeline.json (1080p source)",
        "machine": {"cores_used": 1, "python": platform.python_version()},
        "fold": {
            "events_per_history": len(events),
            "events_per_second_median": round(statistics.median(rates)),
            "rounds": [round(r) for r in rates],
        },
        "decide": {
            "inputs": len(per_input),
            "median_us": round(statistics.median(per_input), 1),
            "p95_us": round(ordered[int(0.95 * (len(ordered) - 1))], 1),
            "max_us": round(ordered[-1], 1),
            "median_us_by_input_type": {
                k: round(statistics.median(v), 1) for k, v in sorted(by_kind.items())
            },
        },
        "targets": {"fold_events_per_second": 100_000, "decide_median_us": 50},
    }
    table = Table(title="es-sched core (one core)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_row(
        "fold, events/s (median of rounds)",
        f"{fold_figures['events_per_second_median']:,}",
        "100,000",
    )
    table.add_row("decide, median µs per input", f"{decide_figures['median_us']}", "50")
    table.add_row("decide, p95 µs per input", f"{decide_figures['p95_us']}", "")
    for kind, us in kind_medians.items():
        table.add_row(f"  decide {kind}", f"{us}", "")
    Console().print(table)
    out = ROOT / "bench" / "results" / "current" / "core.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
