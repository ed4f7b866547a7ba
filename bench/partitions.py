"""What the partition count of the per-workflow topics does to latency, in ONE run (ADR 53).

A decider transaction writes to every partition it touches (events, decider-state, timers of
the workflows it decided, the ready partitions of their tasks); librdkafka sends one
ProduceRequest per partition (confluentinc/librdkafka#1700), the broker verifies each partition
added to a transaction (KIP-890) and writes a commit marker on each. So the more partitions
the decided workflows are spread over, the more requests and markers each commit waits for.

For each ``--partitions`` count, es-sched as bench/side_by_side.py runs it (es_system.EsSched:
fresh topics of that count, the roles in one process, two no-op workers, the 1080p media DAG
of nine worker tasks) takes ``--rate`` DAGs/s open loop for ``--seconds`` after a warm-up, and
each worker task's hops are timed as bench/timeline.py does (from the records' CreateTimes).
The counts take turns: each round runs every count once, the order rotated a step each round,
so drift of the machine or the broker falls on all of them; medians of the rounds.

Rerun (needs `es-sched stack up`): `PYTHONPATH=. .venv/bin/python bench/partitions.py
[--partitions 2,4,6,12 --rate 45 --seconds 15 --rounds 3]`; writes
bench/results/current/partitions.json and bench/results/current/partitions.png (the workflow's
p50 and p95, and each hop's p95, against the partition count; ``--plot-only`` redraws it from
the JSON).
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
import timeline  # noqa: E402
from es_system import EsSched, run_windows  # noqa: E402
from plot_png import Series, line_charts  # noqa: E402

SHOWN = (
    "ready -> dispatched",
    "dispatched -> assigned",
    "assigned -> first report",
    "outcome -> event",
    "workflow",
)
COLOURS = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14))


def one(partitions: int, opts: argparse.Namespace, code: Path) -> dict[str, Any]:
    """One window of ``opts.seconds`` at ``opts.rate`` on fresh topics of ``partitions``."""
    system = EsSched(Path(tempfile.mkdtemp(prefix="partitions-")), code=code, partitions=partitions)

    def take(tag: str) -> dict[str, Any]:
        system.open_loop(opts.rate, opts.warmup, "warm")
        system.done.clear()
        return timeline.window(system, opts.rate, opts.seconds, tag)

    return run_windows(system, 1, take)[0]


def plot(result: dict[str, Any], png: Path) -> None:
    """The workflow's p50 and p95, and each hop's p95, against the partition count."""
    counts, medians = result["counts"], result["medians"]

    def series(hops: tuple[str, ...], qs: tuple[str, ...]) -> list[Series]:
        return [
            Series(
                f"{hop.upper().replace('->', 'TO')} {q.upper()}",
                COLOURS[i],
                [(p, medians[str(p)][hop][q]) for p in counts],
            )
            for i, (hop, q) in enumerate((h, q) for h in hops for q in qs)
        ]

    rate = f"{result['rate']:g} DAGS/S"
    line_charts(
        png,
        [
            (f"WORKFLOW MS AT {rate}", series(("workflow",), ("p50", "p95"))),
            (f"HOP P95 MS AT {rate}", series(SHOWN[:-1], ("p95",))),
        ],
        "PARTITIONS",
    )
    print(f"wrote {png}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", default="2,4,6,12", help="comma-separated counts")
    ap.add_argument("--rate", type=float, default=45.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--warmup", type=float, default=5.0, help="seconds at --rate, unmeasured")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--code", type=Path, default=BENCH.parent, help="the checkout to run")
    ap.add_argument("--out", type=Path, default=BENCH / "results" / "current" / "partitions.json")
    ap.add_argument("--plot-only", action="store_true", help="the PNG from --out's JSON")
    opts = ap.parse_args()
    if opts.plot_only:
        plot(json.loads(opts.out.read_text()), opts.out.with_suffix(".png"))
        return
    counts = [int(p) for p in opts.partitions.split(",")]
    runs: dict[int, list[dict[str, Any]]] = {p: [] for p in counts}
    for r in range(opts.rounds):
        for p in counts[r % len(counts) :] + counts[: r % len(counts)]:
            runs[p].append(one(p, opts, opts.code))
    medians = {
        p: {
            hop: {
                q: statistics.median(w["hops"][hop][q] or 0.0 for w in windows)
                for q in ("p50", "p95", "p99")
            }
            for hop in timeline.HOPS
        }
        for p, windows in runs.items()
    }
    table = Table(
        title=f"hops at {opts.rate:g} DAGs/s by partition count, "
        f"p50 / p95 ms, medians of {opts.rounds}"
    )
    table.add_column("hop")
    for p in counts:
        table.add_column(f"{p} partitions", justify="right")
    for hop in SHOWN:
        table.add_row(
            hop, *(f"{medians[p][hop]['p50']:.0f} / {medians[p][hop]['p95']:.0f}" for p in counts)
        )
    Console().print(table)
    png = opts.out.with_suffix(".png")
    result = {
        "benchmark": "partitions",
        "command": " ".join(sys.argv),
        "code": str(opts.code),
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
        "warmup_s": opts.warmup,
        "rounds": opts.rounds,
        "counts": counts,
        "medians": {str(p): m for p, m in medians.items()},
        "windows": {str(p): w for p, w in runs.items()},
        "plot": png.name,
    }
    ps.write_result(opts.out, result)
    plot(result, png)


if __name__ == "__main__":
    main()
