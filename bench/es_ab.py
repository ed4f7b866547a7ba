"""es-sched against an earlier es-sched, in ONE run: the side-by-side measurement (a closed-loop
burst for the maximum, then open-loop offered load at 25-125% of it; ``side_by_side.measure``)
of two checkouts, alternating which goes first in each round, medians of ``--runs`` rounds.

What a change to the hot path did to throughput and latency, without the 35 minutes of the
peers: the side-by-side table itself still comes from ``make bench``.

Rerun (needs `es-sched stack up`): `git worktree add /tmp/before <rev>`, then
`PYTHONPATH=. .venv/bin/python bench/es_ab.py --before /tmp/before --label "what changed"`
[--runs 3 --burst 600 --seconds 20]. Writes bench/results/current/es_ab.json (or ``--out``).
``--before-partitions N`` / ``--after-partitions N`` give a side topics of N partitions, not
the default's (``es_system.PARTITIONS``): one checkout against itself (``--before .``) then
measures what the partition count does (ADR 53).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.progress import Progress

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import peer_stats as ps  # noqa: E402
import side_by_side as sbs  # noqa: E402
from es_system import PARTITIONS, EsSched  # noqa: E402

FIGURES = (
    "max DAGs/s",
    "sustained DAGs/s",
    "p95 ms @25%",
    "p95 ms @50%",
    "p95 ms @75%",
    "p95 ms @100%",
    "dispatch p95 ms @50%",
)


def figures(system: dict[str, Any]) -> dict[str, float | None]:
    """The README table's figures of one measured system or of ``ps.median_system``'s median
    (sustained: a load counts when most of the rounds sustained it)."""
    loads = {round(row["share"] * 100): row for row in system["loads"]}
    top = system["max_per_second"] if "max_per_second" in system else system["max"]["per_second"]

    def held(row: dict[str, Any]) -> bool:
        return (
            bool(row["sustained"])
            if "sustained" in row
            else row["sustained_runs"] * 2 > row["runs"]
        )

    out: dict[str, float | None] = {
        "max DAGs/s": top,
        "sustained DAGs/s": max(
            (r["steady_completion_rate"] for r in system["loads"] if held(r)), default=None
        ),
        "dispatch p95 ms @50%": loads[50]["dispatch_ms"]["p95"],
    }
    for pct in (25, 50, 75, 100):
        out[f"p95 ms @{pct}%"] = loads[pct]["latency_ms"]["p95"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, required=True, help="the earlier checkout")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burst", type=int, default=600)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--drain", type=float, default=20)
    parser.add_argument("--before-partitions", type=int, default=PARTITIONS)
    parser.add_argument("--after-partitions", type=int, default=PARTITIONS)
    parser.add_argument("--label", default="")
    parser.add_argument("--out", type=Path, default=sbs.RESULTS / "es_ab.json")
    opts = parser.parse_args()
    codes = {"before": opts.before.resolve(), "after": sbs.ROOT}
    parts = {"before": opts.before_partitions, "after": opts.after_partitions}
    result: dict[str, Any] = {
        "benchmark": "es_ab",
        "label": opts.label,
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": sbs.fingerprint(),
        "codes": {k: str(v) for k, v in codes.items()},
        "settings": {
            "burst": opts.burst,
            "seconds_per_load": opts.seconds,
            "drain_s": opts.drain,
            "loads": list(ps.LOADS),
            "partitions": parts,
        },
        "rounds": [],
    }
    with Progress(console=sbs.console) as progress:
        for r in range(opts.runs):
            order = list(codes) if r % 2 == 0 else list(reversed(codes))
            rnd = {
                name: sbs.measure(
                    name,
                    EsSched(sbs.RESULTS, codes[name], parts[name]),
                    opts,
                    progress,
                    f"ab{r}{name[0]}",
                )
                for name in order
            }
            result["rounds"].append(rnd)
            med = {n: ps.median_system([x[n] for x in result["rounds"]]) for n in codes}
            result["median"] = {n: figures(m) for n, m in med.items()}
            result["per_round"] = [{n: figures(x[n]) for n in codes} for x in result["rounds"]]
            opts.out.write_text(json.dumps(result, indent=1) + "\n")
    for key in FIGURES:
        b, a = result["median"]["before"][key], result["median"]["after"][key]
        runs = [(x["before"][key], x["after"][key]) for x in result["per_round"]]
        sbs.console.print(f"{key:>22}: before {b}  after {a}   per round {runs}")
    sbs.console.print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
