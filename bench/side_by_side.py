"""Side by side in ONE run on one machine and broker: es-sched against Celery 5 on Redis, with the
same DAG (examples/media_pipeline.json, 1080p branch: probe, four transcodes, thumbnail,
package, write_asset, callback) and no-op workers, beside the limit of a Python transactional
Kafka loop (bench/kafka_limit.py). Method and fairness: docs/adr/0029-peer-benchmark.md.

Each round measures the limit, then es-sched, Celery default settings, Celery with
``task_acks_late=True`` and ``worker_prefetch_multiplier=1``, one after the other, each fresh
(new topics and processes; a new Celery worker on an emptied Redis). Per system: the maximum
(a closed-loop burst of ``--burst`` DAGs, DAGs/s = count / (last completion - first submit)),
then open-loop offered load at 25/50/75/100/125% of that maximum for ``--seconds`` each, DAGs
submitted on a schedule (latency counted from the scheduled time), then drained: sustained
throughput (completion rate in the steady window >= 95% of offered, and >= 95% completed),
p50/p95/p99 submit-to-completion and dispatch latency (bench/peer_stats.py has the rules).
Figures are the medians of ``--runs`` rounds; every round's figures are in the JSON.

Writes bench/results/current/side_by_side.json (machine fingerprint, versions, settings, load
average before each phase, per-run and median figures, ratios), side_by_side.md (the table, also put
between the ``side_by_side`` markers of README.md when they are there), side_by_side.png
(throughput and p95 vs offered load) and side_by_side_cdf.png (latency CDFs at 50% and 100%).

Rerun (needs `es-sched stack up`; Debian's redis-server, installed with apt-get when missing
and running as root): `make bench` (full: 3 rounds, about 35 min on 2 cores), or
`PYTHONPATH=. .venv/bin/python bench/side_by_side.py [--quick] [--runs 3 --burst 600
--seconds 20 --label "quiet machine"]`; `--table-only` rebuilds the table from the JSON.
Run it on a quiet machine: every other process shares the two cores with the systems measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, Protocol

from rich.console import Console
from rich.progress import Progress

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
import celery_peer  # noqa: E402
import kafka_limit  # noqa: E402
import peer_stats as ps  # noqa: E402
from es_system import PARTITIONS, EsSched  # noqa: E402
from plot_png import Series, line_charts  # noqa: E402

RESULTS = BENCH / "results" / "current"
OURS, PEER = "es-sched", "celery default"
COLOURS = {OURS: (31, 119, 180), PEER: (214, 39, 40), "celery acks_late": (255, 127, 14)}
CDF_POINTS = [i / 20 for i in range(21)]
console = Console()


class System(Protocol):
    def start(self) -> None: ...
    def submit(self, dag_id: str) -> None: ...
    def flush(self) -> None: ...
    def done_count(self) -> int: ...
    def completions(self) -> dict[str, float]: ...
    def take_dispatch_ms(self) -> list[float]: ...
    def stop(self) -> None: ...


class Celery(celery_peer.CeleryPeer):
    def flush(self) -> None:
        """apply_async has sent each DAG by the time it returns."""


def fingerprint() -> dict[str, Any]:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    mem = next(
        int(ln.split()[1])
        for ln in Path("/proc/meminfo").read_text().splitlines()
        if ln.startswith("MemTotal")
    )
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "ram_gb": round(mem / 1024**2, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
    }


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def wait_done(system: System, target: int, timeout_s: float, progress: Progress, what: str) -> None:
    bar = progress.add_task(what, total=target)
    deadline = time.monotonic() + timeout_s
    while system.done_count() < target and time.monotonic() < deadline:
        progress.update(bar, completed=system.done_count())
        time.sleep(0.05)
    progress.update(bar, completed=system.done_count())
    progress.remove_task(bar)


def cdf(values: list[float]) -> list[float | None]:
    return [ps.percentile(values, max(q, 0.001)) for q in CDF_POINTS]


def measure(
    name: str, system: System, opts: argparse.Namespace, progress: Progress, tag: str
) -> dict[str, Any]:
    """The maximum, then every offered load, of one fresh ``system``."""
    out: dict[str, Any] = {"loadavg_before_start": loadavg()}
    system.start()
    try:
        out["loadavg_before_max"] = loadavg()
        base = system.done_count()
        ids = [f"{tag}-max-{i}" for i in range(opts.burst)]
        t0 = time.time()
        for dag in ids:
            system.submit(dag)
        system.flush()
        wait_done(system, base + len(ids), opts.burst * 2.0 + 60, progress, f"{name}: burst")
        comps = system.completions()
        top = ps.closed_loop_rate(t0, [comps[d] for d in ids if d in comps])
        out["max"] = {
            "per_second": top,
            "completed": sum(d in comps for d in ids),
            "dispatch_ms": ps.latency_summary(system.take_dispatch_ms()),
        }
        out["loads"] = []
        for share in ps.LOADS:
            rate = max(0.5, share * top)
            row: dict[str, Any] = {"share": share, "loadavg_before": loadavg()}
            base = system.done_count()
            n = max(1, int(rate * opts.seconds))
            bar = progress.add_task(f"{name}: {share:.0%} = {rate:.1f} DAGs/s", total=n)
            submits: dict[str, float] = {}
            start = time.time() + 0.05
            for i in range(n):
                due = start + i / rate
                time.sleep(max(0.0, due - time.time()))
                dag = f"{tag}-{int(share * 100)}-{i}"
                system.submit(dag)
                submits[dag] = due
                progress.update(bar, completed=i + 1)
            system.flush()
            row["submitter_lag_s"] = round(time.time() - (start + (n - 1) / rate), 3)
            progress.remove_task(bar)
            wait_done(system, base + n, max(opts.drain, opts.seconds), progress, f"{name}: drain")
            comps = system.completions()
            row |= ps.open_loop_figures(rate, opts.seconds, submits, comps, start)
            row["dispatch_ms"] = ps.latency_summary(system.take_dispatch_ms())
            row["latency_cdf_ms"] = cdf(
                [(comps[d] - s) * 1000 for d, s in submits.items() if d in comps]
            )
            out["loads"].append(row)
            console.print(
                f"  {name} {share:.0%}: offered {rate:.1f}/s, completed "
                f"{row['steady_completion_rate']}/s, sustained {row['sustained']}, "
                f"p95 {row['latency_ms']['p95']} ms, dispatch p95 "
                f"{row['dispatch_ms']['p95']} ms"
            )
    finally:
        system.stop()
    return out


def systems(opts: argparse.Namespace, redis: celery_peer.RedisServer) -> dict[str, System]:
    return {
        OURS: EsSched(RESULTS),
        PEER: Celery("default", redis, RESULTS, opts.celery_concurrency),
        "celery acks_late": Celery("acks_late", redis, RESULTS, opts.celery_concurrency),
    }


def summarise(result: dict[str, Any]) -> None:
    rounds = result["rounds"]
    names = list(rounds[0]["systems"])
    med = {n: ps.median_system([r["systems"][n] for r in rounds]) for n in names}
    for n in names:  # the CDF of the median at each quantile, per load
        for i, row in enumerate(med[n]["loads"]):
            cdfs = [r["systems"][n]["loads"][i]["latency_cdf_ms"] for r in rounds]
            row["latency_cdf_ms"] = [
                ps.median_of(c[k] for c in cdfs) for k in range(len(CDF_POINTS))
            ]
    variants = [
        k for k, v in rounds[0]["kafka_limit"].items() if isinstance(v, dict) and "median" in v
    ]
    limit = {k: ps.median_of(r["kafka_limit"][k]["median"] for r in rounds) for k in variants}
    result["median"] = {"systems": med, "ratios": ps.ratios(med, OURS, PEER), "kafka_limit": limit}


def plots(result: dict[str, Any]) -> None:
    med = result["median"]["systems"]

    def series(get: Any) -> list[Series]:
        return [
            Series(
                n.upper().replace("_", " "),
                COLOURS.get(n, (0, 0, 0)),
                [p for p in (get(x) for x in s["loads"]) if p is not None],
            )
            for n, s in med.items()
        ]

    def point(x: dict[str, Any], y: float | None) -> tuple[float, float] | None:
        return (
            None if x["offered_per_second"] is None or y is None else (x["offered_per_second"], y)
        )

    line_charts(
        RESULTS / "side_by_side.png",
        [
            ("DAGS/S COMPLETED", series(lambda x: point(x, x["steady_completion_rate"]))),
            ("P95 MS SUBMIT TO DONE", series(lambda x: point(x, x["latency_ms"]["p95"]))),
        ],
        "OFFERED DAGS/S",
        x_ticks=5,
    )
    panels = []
    for share in (0.5, 1.0):
        i = ps.LOADS.index(share)
        panels.append(
            (
                f"LATENCY CDF AT {int(share * 100)} PCT",
                [
                    Series(
                        n.upper().replace("_", " "),
                        COLOURS.get(n, (0, 0, 0)),
                        [
                            (v, q)
                            for v, q in zip(
                                s["loads"][i]["latency_cdf_ms"], CDF_POINTS, strict=True
                            )
                            if v is not None
                        ],
                    )
                    for n, s in med.items()
                ],
            )
        )
    line_charts(RESULTS / "side_by_side_cdf.png", panels, "MS SUBMIT TO COMPLETION", x_ticks=5)


def write_tables(result: dict[str, Any], readme: Path) -> None:
    table = ps.markdown_table(result)
    (RESULTS / "side_by_side.md").write_text(table)
    if readme.exists() and ps.write_table(readme, table):
        console.print(f"table written between the side_by_side markers of {readme}")
    console.print(table, soft_wrap=True, markup=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--burst", type=int, default=600, help="DAGs of the closed-loop burst")
    parser.add_argument("--seconds", type=float, default=20, help="per offered load")
    parser.add_argument("--drain", type=float, default=20, help="max s to drain after a load")
    parser.add_argument("--limit-records", type=int, default=100_000)
    parser.add_argument(
        "--celery-concurrency",
        type=int,
        default=None,
        help="prefork processes (default: Celery's, one per core)",
    )
    parser.add_argument("--quick", action="store_true", help="1 run, small counts: a smoke run")
    parser.add_argument("--label", default="", help="say where it ran, e.g. 'quiet machine'")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    parser.add_argument("--table-only", action="store_true", help="table from the JSON only")
    opts = parser.parse_args()
    out = RESULTS / "side_by_side.json"
    if opts.table_only:
        write_tables(json.loads(out.read_text()), opts.readme)
        return
    if opts.quick:
        opts.runs, opts.burst, opts.seconds, opts.drain = 1, 150, 6, 15
        opts.limit_records = 10_000
        opts.label = opts.label or "quick smoke run"
    console.print(
        "Celery runs twice: [b]default settings[/b] (acks on receipt, prefetch 4 per "
        "process), and [b]task_acks_late=True + worker_prefetch_multiplier=1[/b] "
        "(the durable-ish setting). Redis runs with persistence OFF (--save '' "
        "--appendonly no): Celery keeps nothing durable; es-sched commits every change "
        "to Kafka in transactions."
    )
    redis = celery_peer.RedisServer(RESULTS)
    result: dict[str, Any] = {
        "benchmark": "side_by_side",
        "label": opts.label or "full run",
        "command": " ".join(sys.argv),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": fingerprint(),
        "runs": opts.runs,
        "settings": {
            "burst": opts.burst,
            "seconds_per_load": opts.seconds,
            "drain_s": opts.drain,
            "loads": list(ps.LOADS),
            "sustained_rule": "steady completion rate >= 95% of offered (window: after the "
            "first 20% to the end of offering, shifted by the median latency) and >= 95% of the "
            "DAGs completed after the drain",
            "es_sched": "roles decider+timers+retry+dispatcher in one process, 2 no-op workers "
            f"(concurrency 64), {PARTITIONS} partitions, every change in Kafka transactions",
            "celery": {
                "pool": "prefork",
                "concurrency": opts.celery_concurrency or os.cpu_count(),
                "modes": {k: v or "Celery defaults" for k, v in celery_peer.MODES.items()},
                "redis": "own port, temp dir, persistence off (--save '' --appendonly no)",
                "canvas": "chain(probe, chord(group(4 transcodes), thumbnail), package, "
                "write_asset, callback)",
            },
            "limit_records": opts.limit_records,
        },
        "versions": {
            **redis.versions(),
            **EsSched.versions(),
            "kafka_broker": kafka_broker_version(),
        },
        "rounds": [],
    }
    try:
        with Progress(console=console) as progress:
            for r in range(opts.runs):
                rnd: dict[str, Any] = {"round": r + 1, "loadavg_before_limit": loadavg()}
                rnd["kafka_limit"] = kafka_limit.measure(opts.limit_records, 1, console.print)
                rnd["systems"] = {}
                for name, system in systems(opts, redis).items():
                    rnd["systems"][name] = measure(name, system, opts, progress, f"r{r}")
                result["rounds"].append(rnd)
                summarise(result)
                out.write_text(json.dumps(result, indent=1) + "\n")  # kept after every round
    finally:
        redis.stop()
    plots(result)
    write_tables(result, opts.readme)
    console.print(f"wrote {out}, side_by_side.md, side_by_side.png, side_by_side_cdf.png")


def kafka_broker_version() -> str:
    """The broker's version from the jar the stack runs (``.state/cache/kafka/lib``)."""
    for state in (ROOT / ".state", Path(os.environ.get("BENCH_KAFKA_STATE", "/nonexistent"))):
        for jar in sorted((state / "cache" / "kafka" / "lib").glob("kafka-server-[0-9]*.jar")):
            return jar.stem.removeprefix("kafka-server-")
    return "unknown (no .state/cache/kafka/lib here)"


if __name__ == "__main__":
    main()
