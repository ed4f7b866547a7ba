"""Who asks the broker for what: every es-sched client's requests per media workflow, by API.

The broker's CPU is the largest share of a workflow's (bench/cpu_split.py) and it is spent per
request (ADR 48: a JFR profile), so the figure to drive down is requests per workflow, and the
question is which client sends them. es-sched as bench/side_by_side.py runs it
(es_system.EsSched: fresh topics of ``--partitions``, by default the product's, the roles in one
process, two no-op workers, the 1080p media DAG of nine worker tasks) takes ``--rate`` DAGs/s
for ``--seconds``, ``--runs`` windows one after the other (each process's CPU per workflow
measured as bench/cpu_split.py does, in the same windows). Every Kafka client of es-sched's
processes reports librdkafka's statistics (``brokers.*.req``: requests sent, by API) through
bench/client_stats/sitecustomize.py on their ``PYTHONPATH`` (es-sched's code is unchanged); the
counts read after a window minus those read before it, divided by the window's workflows, are
that client's requests per workflow. A client is named by its process (``roles``: decider,
timers, retry relay and dispatcher; ``worker``) and the es_sched source line that created it.
Requests the broker sends itself (KIP-890's AddPartitionsToTxn verifications, transaction
markers) are not the clients' and are not counted here (ADR 48 counted them on the broker).

Medians of the windows. Rerun (needs `es-sched stack up`, a broker that has run a minute or
two: its JIT makes the first minute dear): `PYTHONPATH=. .venv/bin/python
bench/client_requests.py [--rate 26 --seconds 20 --runs 3 --partitions 12 --code TREE]`
(``--code``: another checkout's es_sched, e.g. a `git worktree` of an earlier commit); writes
bench/results/current/client_requests.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH), str(BENCH.parent)]
import cpu_split  # noqa: E402
import e2e  # noqa: E402
import side_by_side as sbs  # noqa: E402
from es_system import PARTITIONS, EsSched, run_windows  # noqa: E402

Counts = dict[str, collections.Counter[str]]  # client -> API -> requests sent so far


def snapshot(folder: Path, roles_pid: int) -> Counts:
    """Every client's cumulative requests by API, as its last statistics say."""
    out: Counts = {}
    for path in folder.glob("*.json"):
        where = json.loads(path.with_suffix(".where").read_text())
        pid = int(path.stem.split("-")[0])
        process = "roles" if pid == roles_pid else "worker"
        name = f"{process} | {where['kind']} | {where['where']}"
        stats = json.loads(path.read_text())
        counts = out.setdefault(name, collections.Counter())
        for broker in stats.get("brokers", {}).values():
            counts.update({api: n for api, n in (broker.get("req") or {}).items() if n})
    return out


def window(system: EsSched, folder: Path, rate: float, seconds: float, tag: str) -> dict[str, Any]:
    interval = int(os.environ["ES_BENCH_CLIENT_STATS_MS"]) / 1000
    time.sleep(2 * interval)  # statistics written after everything before the window
    pids = cpu_split.processes(system)
    before, cpu_before = snapshot(folder, system.procs[0].pid), cpu_split.sample(pids)
    n = system.open_loop(rate, seconds, tag)
    cpu = {k: 1000 * (v - cpu_before[k]) / n for k, v in cpu_split.sample(pids).items()}
    time.sleep(2 * interval)
    after = snapshot(folder, system.procs[0].pid)
    clients: dict[str, dict[str, float]] = {}
    for name, counts in after.items():
        diff = counts - before.get(name, collections.Counter())
        if diff:
            clients[name] = {api: k / n for api, k in diff.most_common()}
    by_api: collections.Counter[str] = collections.Counter()
    for per in clients.values():
        by_api.update(per)
    return {
        "workflows": n,
        "completed": system.done_count(),
        "clients": clients,
        "cpu_ms_per_workflow": {k: round(v, 2) for k, v in cpu.items()},
        "by_api": dict(by_api.most_common()),
        "total": sum(by_api.values()),
    }


def medians(windows: list[dict[str, Any]]) -> dict[str, Any]:
    names = {c for w in windows for c in w["clients"]}
    clients = {}
    for name in names:
        apis = {a for w in windows for a in w["clients"].get(name, {})}
        per = {
            a: statistics.median(w["clients"].get(name, {}).get(a, 0.0) for w in windows)
            for a in apis
        }
        ranked = sorted(per.items(), key=lambda x: -x[1])
        clients[name] = {
            "total": round(sum(per.values()), 2),
            "by_api": {a: round(v, 2) for a, v in ranked},
        }
    apis = {a for w in windows for a in w["by_api"]}
    procs = windows[0]["cpu_ms_per_workflow"]
    return {
        "cpu_ms_per_workflow": {
            p: round(statistics.median(w["cpu_ms_per_workflow"][p] for w in windows), 2)
            for p in procs
        },
        "total": round(statistics.median(w["total"] for w in windows), 2),
        "by_api": {
            a: round(statistics.median(w["by_api"].get(a, 0.0) for w in windows), 2)
            for a in sorted(apis)
        },
        "clients": dict(sorted(clients.items(), key=lambda x: -x[1]["total"])),
    }


def show(result: dict[str, Any]) -> None:
    med = result["medians"]
    table = Table(
        title=f"client requests per workflow at {result['rate']:g} DAGs/s, "
        f"medians of {len(result['windows'])}"
    )
    for col in ("client (process | kind | created at)", "requests", "by API"):
        table.add_column(col, justify="right" if col == "requests" else "left")
    for name, row in med["clients"].items():
        if row["total"] >= 0.05:
            top = ", ".join(f"{a} {v:g}" for a, v in list(row["by_api"].items())[:4])
            table.add_row(name[:110], f"{row['total']:.1f}", top)
    table.add_row(
        "all clients",
        f"{med['total']:.1f}",
        ", ".join(f"{a} {v:g}" for a, v in sorted(med["by_api"].items(), key=lambda x: -x[1])[:6]),
    )
    Console(width=160).print(table)
    cpu = med["cpu_ms_per_workflow"]
    Console().print(
        "CPU ms per workflow (medians): " + ", ".join(f"{k} {v:g}" for k, v in cpu.items())
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=26.0, help="DAGs per second, open loop")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=PARTITIONS, help="per-workflow topics")
    ap.add_argument("--code", type=Path, default=BENCH.parent, help="the checkout to run")
    ap.add_argument(
        "--out", type=Path, default=BENCH / "results" / "current" / "client_requests.json"
    )
    opts = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="client-stats-"))
    os.environ["ES_BENCH_CLIENT_STATS"] = str(folder)
    os.environ.setdefault("ES_BENCH_CLIENT_STATS_MS", "1000")
    e2e.EXTRA_PATH.append(str(BENCH / "client_stats"))
    system = EsSched(
        Path(tempfile.mkdtemp(prefix="requests-")), code=opts.code, partitions=opts.partitions
    )
    windows = run_windows(
        system, opts.runs, lambda tag: window(system, folder, opts.rate, opts.seconds, tag)
    )
    result = {
        "benchmark": "client_requests",
        "command": "bench/client_requests.py " + " ".join(sys.argv[1:]),
        "machine": sbs.fingerprint(),
        "rate": opts.rate,
        "seconds": opts.seconds,
        "partitions": opts.partitions,
        "medians": medians(windows),
        "windows": windows,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=1) + "\n")
    show(result)
    print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
