"""The local broker's settings against its CPU per workflow: which broker knobs are worth it.

The broker spends the largest share of a media workflow's CPU (bench/cpu_split.py) and pays per
request (ADR 48). This restarts the local stack once per variant and round with
``ES_SCHED_STACK_KAFKA_PROPERTIES`` set to the variant's server.properties (the stack's
defaults otherwise), then runs bench/cpu_split.py (``--runs`` windows at ``--rate``, a fresh
es-sched) and keeps each window's broker and whole-machine CPU per workflow. Variants:

- ``stock``: the stack's defaults (Kafka's: 8 I/O threads, 3 network threads);
- ``threads = cores``: ``num.io.threads`` and ``num.network.threads`` set to the 2 cores;
- ``no verification``: ``transaction.partition.verification.enable=false``: KIP-890's check
  that a transactional produce belongs to an ongoing transaction, one AddPartitionsToTxn
  round trip from the partition leader to the coordinator per partition a transaction
  touches. Measured to know what it costs, not to turn it off: it guards read_committed
  readers against a hanging transaction (ADR 49).

Rounds go variant after variant, ``--rounds`` times; medians over a variant's steady windows
(a round's first window, the broker's first minute after its restart, is JIT warm-up: kept in
the JSON, left out of the medians), and each variant's ratio to ``stock``. The stack is
restarted with its defaults at the end.
Rerun (stops and starts the local stack): `PYTHONPATH=. .venv/bin/python
bench/broker_settings.py [--rate 26 --seconds 20 --runs 3 --rounds 2]`; writes
bench/results/current/broker_settings.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
import side_by_side as sbs  # noqa: E402

VARIANTS: dict[str, dict[str, str]] = {
    "stock": {},
    "threads = cores": {"num.io.threads": "2", "num.network.threads": "2"},
    "no verification": {"transaction.partition.verification.enable": "false"},
}
CLI = [sys.executable, "-m", "es_sched", "stack"]


def restart(properties: dict[str, str]) -> None:
    env = {**os.environ, "ES_SCHED_STACK_KAFKA_PROPERTIES": json.dumps(properties)}
    subprocess.run([*CLI, "down"], cwd=ROOT, env=env, check=True, capture_output=True)
    subprocess.run([*CLI, "up"], cwd=ROOT, env=env, check=True, capture_output=True)


def windows(opts: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cpu.json"
        args = ["--rate", opts.rate, "--seconds", opts.seconds, "--runs", opts.runs, "--out", out]
        cmd = [sys.executable, str(BENCH / "cpu_split.py"), *map(str, args)]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True)
        found: list[dict[str, Any]] = json.loads(out.read_text())["windows"]
        return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=26.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3, help="cpu_split windows per round")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=BENCH / "results" / "current" / "broker_settings.json"
    )
    opts = ap.parse_args()
    per: dict[str, list[dict[str, Any]]] = {name: [] for name in VARIANTS}
    try:
        with Progress() as progress:
            bar = progress.add_task("variants", total=opts.rounds * len(VARIANTS))
            for _ in range(opts.rounds):
                for name, properties in VARIANTS.items():
                    restart(properties)
                    per[name] += windows(opts)
                    progress.advance(bar)
    finally:
        restart({})
    result = summarise(
        per, opts.runs, opts.rate, "bench/broker_settings.py " + " ".join(sys.argv[1:])
    )
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    show(result)
    print(f"wrote {opts.out}")


def summarise(
    per: dict[str, list[dict[str, Any]]], runs: int, rate: float, command: str
) -> dict[str, Any]:
    """Medians of each variant's steady windows: a round's first window is the broker's first
    minute after its restart, when its JIT compiler still takes 8-18 % of its CPU (ADR 49), so
    it is kept in ``windows`` but left out of the medians (``runs`` windows per round)."""
    steady = {name: [w for i, w in enumerate(found) if i % runs] for name, found in per.items()}
    medians: dict[str, dict[str, float]] = {}
    for name, found in steady.items():
        broker = [w["ms_per_workflow"]["broker"] for w in found]
        whole = [sum(w["ms_per_workflow"].values()) for w in found]
        medians[name] = {
            "broker_ms": round(statistics.median(broker), 2),
            "whole_ms": round(statistics.median(whole), 2),
        }
    for row in medians.values():
        for key in ("broker_ms", "whole_ms"):
            row[f"{key}_ratio"] = round(row[key] / medians["stock"][key], 3)
    return {
        "benchmark": "broker_settings",
        "command": command,
        "machine": sbs.fingerprint(),
        "rate": rate,
        "runs_per_round": runs,
        "variants": VARIANTS,
        "medians": medians,
        "broker_ms_per_window": {
            name: [round(w["ms_per_workflow"]["broker"], 2) for w in found]
            for name, found in per.items()
        },
        "windows": per,
    }


def show(result: dict[str, Any]) -> None:
    title = f"broker settings at {result['rate']:g} DAGs/s (medians of the steady windows)"
    table = Table(title=title)
    for col in ("variant", "broker ms/wf", "ratio", "whole ms/wf", "ratio", "broker per window"):
        table.add_column(col, justify="left" if col == "variant" else "right")
    for name, row in result["medians"].items():
        spread = " ".join(f"{v:.1f}" for v in result["broker_ms_per_window"][name])
        table.add_row(
            name,
            f"{row['broker_ms']:.1f}",
            f"{row['broker_ms_ratio']:.3f}",
            f"{row['whole_ms']:.1f}",
            f"{row['whole_ms_ratio']:.3f}",
            spread,
        )
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
