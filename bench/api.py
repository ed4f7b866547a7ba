"""HTTP API speed with 100,000 workflows in the read models: requests/s, p50 and p99.

1. Seed: ``--workflows`` workflows (default 100,000) run through the pure core and folded
   into a private schema by the projectors' fold and ``PgStore.write`` (``bench/api_seed.py``;
   the rate is printed). A schema whose marker matches (same count, seed and generator) is
   reused, so a rerun starts measuring at once.
2. Serve: ``es-sched api`` as a child process on that schema and private topics, auth off on
   loopback (``testkit/api.py``).
3. Load: for each endpoint in turn, ``--clients`` concurrent clients (default 50) in a
   separate process (``bench/api_load.py``) for ``--seconds`` after a warm-up; ``--runs``
   rounds (default 3), the endpoints interleaved in each round; the medians are reported.
   Endpoints: ``detail`` ``GET /api/workflow/{id}?includeTasks=true`` over 2,000 seeded ids,
   ``search`` ``GET /api/workflow/search?query=...`` over five Conductor queries, ``list``
   the console's ``GET /ui/?status=...`` over the statuses, ``poll``
   ``GET /api/tasks/poll/batch/{type}?count=10&timeout=100`` over the seeded task types (no
   task is queued: each poll waits its 100 ms and answers ``[]``). An endpoint whose probe
   answers 404 is reported ``absent`` and not measured.
4. Workers: ``bench/api_workers.py: http_vs_native()`` (HTTP workers' task throughput against
   native Kafka workers on one DAG) if it is importable, else ``absent``.
5. Profile: when a p99 target is missed, the server is restarted under cProfile on every
   thread (``bench/api_profiled.py``), the endpoint loaded once more, and the top frames (by
   own time without idle waits, by cumulative time, and es_sched's own frames) are printed and
   kept in the JSON. ``baseline`` (the console's stylesheet, no database) is measured alongside: the
   floor the framework and the load generator set on this machine.

Targets (issue 14): p99 <= 100 ms for detail, search and the list page.
Needs `es-sched stack up`. Prints figures, writes bench/results/current/api.json and api.png.
Each load runs against ``es-sched api --workers N`` for every N of ``--api-workers`` (default
1,2; each its own server, interleaved): the last N's figures carry the plain names
(``detail``), the others a suffix (``detail@1w``).
Rerun: `.venv/bin/python bench/api.py [--workflows 100000 --runs 3 --clients 50 --seconds 10]`

Writes (``--writes-only``, ``write_latency``): what read-your-writes costs (ADR 56). On its own
private system (no seed), one client starts a WAIT workflow and terminates it, back to back,
``--writes`` times a round, ``--runs`` rounds; the rows are ``start`` (the call),
``start_visible`` (the call and the reads until the workflow shows: what a client waits
either way) and ``terminate``, p50 and p99, medians of the rounds; written to
bench/results/current/api_writes.json. Rerun: `PYTHONPATH=. .venv/bin/python bench/api.py
--writes-only --runs 3 --writes 200`
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import platform
import pstats
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
import api_seed  # noqa: E402
from plot_png import Series, line_charts  # noqa: E402

from es_sched.kafka import config_client  # noqa: E402
from es_sched.projections.postgres.store import engine_for  # noqa: E402
from testkit.api import Api, api  # noqa: E402
from testkit.net import free_port  # noqa: E402
from testkit.runtime import Env, Role, roles  # noqa: E402
from testkit.wait import wait_until  # noqa: E402

ENDPOINTS = ("detail", "search", "list", "poll", "baseline")
TARGET_P99_MS = {"detail": 100.0, "search": 100.0, "list": 100.0}
FIGURES = ("requests_per_second", "p50_ms", "p99_ms")
OUT = ROOT / "bench" / "results" / "current" / "api.json"
ROUTES_OUT = ROOT / "bench" / "results" / "current" / "api_routes.json"
COLOURS = ((31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14))


def paths_for(seed: int, workflows: int) -> dict[str, list[str]]:
    """Each endpoint's request paths over the seeded rows (the load cycles through them)."""
    week_ago = api_seed.EPOCH_END - timedelta(days=7)
    queries = (
        "status = FAILED",
        "workflowType = order_fulfilment AND status IN (RUNNING,PAUSED)",
        f"correlationId = order-{workflows // 2}",
        f"startTime > {int(week_ago.timestamp() * 1000)} AND status = COMPLETED",
        "workflowType IN (refund,kyc_check) AND version = 2",
    )
    statuses = ("RUNNING", "FAILED", "COMPLETED", "TERMINATED", "PAUSED")
    return {
        "detail": [
            f"/api/workflow/{i}?includeTasks=true"
            for i in api_seed.sample_ids(seed, workflows, 2000)
        ],
        "search": [f"/api/workflow/search?query={quote(q)}&sort=startTime:DESC" for q in queries],
        "list": [f"/ui/?status={s}" for s in statuses],
        "poll": [
            f"/api/tasks/poll/batch/{t}?count=10&timeout=100&workerid=bench"
            for t in api_seed.task_types()
        ],
        # A 2.6 KB static file, no database: the floor the server and the load generator set.
        "baseline": ["/ui/static/console.css"],
    }


def probe(url: str, path: str) -> int:
    return httpx.get(url + path, timeout=30).status_code


def measure(url: str, paths: list[str], clients: int, seconds: float, warmup: float) -> Any:
    """One load in a separate process (``bench/api_load.py``): its JSON result."""
    spec = {"url": url, "paths": paths, "clients": clients, "seconds": seconds, "warmup": warmup}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "api_load.py"), f.name],
            capture_output=True,
            text=True,
            check=True,
            timeout=seconds + warmup + 120,
        )
    finally:
        Path(f.name).unlink()
    return json.loads(done.stdout)


@contextmanager
def profiled_server(env: Env, dump: Path) -> Any:
    port = free_port()
    role = Role(
        env,
        "api-profiled",
        argv=["api", "--port", str(port)],
        module="bench.api_profiled",
        ES_SCHED_API_AUTH="off",
        BENCH_API_PROFILE=str(dump),
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return probe(url, "/openapi.json") == 200 or role.proc.poll() is not None
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, 90, f"the profiled API on {url}")
        assert role.proc.poll() is None, f"the profiled API exited:\n{role.text()}"
        role.proc.send_signal(signal.SIGUSR1)  # leave start-up out of the profile
        yield url
    finally:
        role.stop()


# Threads parked with nothing to do: the thread pool's idle workers, the event loop's select.
IDLE = ("<method 'acquire' of '_thread.lock' objects>", "<method 'poll' of 'select.epoll' objects>")
VIEWS = {  # name -> (sort key, restriction)
    "own time, idle waits left out": ("tottime", ()),
    "cumulative": ("cumulative", ()),
    "cumulative, es_sched frames": ("cumulative", ("es_sched",)),
}


def top_frames(dump: Path, lines: int = 25) -> dict[str, str]:
    """The profile's top frames in three views. Times are summed over threads: with 40 pool
    threads the totals exceed the wall time, and a frame's share is what matters."""
    out: dict[str, str] = {}
    for view, (key, only) in VIEWS.items():
        buffer = io.StringIO()
        stats = pstats.Stats(str(dump), stream=buffer)
        if not only:
            stats.strip_dirs()
            kept = {k: v for k, v in stats.stats.items() if k[2] not in IDLE}  # type: ignore[attr-defined]
            stats.stats = kept  # type: ignore[attr-defined]
        stats.sort_stats(key).print_stats(*only, lines)
        text_ = buffer.getvalue()
        out[view] = text_[text_.find("   ncalls") :]
    return out


def profile(env: Env, name: str, paths: list[str], opts: argparse.Namespace) -> dict[str, str]:
    with tempfile.TemporaryDirectory() as folder:
        dump = Path(folder) / "api.prof"
        with profiled_server(env, dump) as url:
            measure(url, paths, opts.clients, opts.seconds, opts.warmup)
        wait_until(dump.exists, 60, "the profile dump")
        return top_frames(dump)


def workers(opts: argparse.Namespace) -> Any:
    """``bench/api_workers.py: http_vs_native()`` (built with the gateway), if present."""
    try:  # by name: the module comes with another branch (mypy must not need it here)
        module = importlib.import_module("api_workers")
    except ImportError as exc:
        return {"status": "absent", "reason": str(exc)}
    http_vs_native = getattr(module, "http_vs_native", None)
    if http_vs_native is None:
        return {"status": "absent", "reason": "bench/api_workers.py has no http_vs_native"}
    return {"status": "measured", "result": http_vs_native()}


def run(opts: argparse.Namespace, console: Console, env: Env) -> dict[str, Any]:
    """Seed, serve, load; the result document (also written to ``opts.out``)."""
    load_before = os.getloadavg()  # a loaded machine explains slow figures: keep it
    env.create()
    with Progress(console=console) as bar:
        task = bar.add_task(f"seeding {opts.workflows} workflows", total=opts.workflows)
        seeded = api_seed.seed(
            env.settings,
            opts.workflows,
            opts.seed,
            opts.processes,
            progress=lambda n: bar.advance(task, n),
        )
    how = "reused (marker matches)" if seeded.reused else f"{seeded.rate:,.0f} workflows/s"
    console.print(
        f"seed: {seeded.workflows:,} workflows, {seeded.tasks:,} task rows, "
        f"{seeded.events:,} events folded in schema {seeded.schema}: {how}"
    )
    paths = {k: v for k, v in paths_for(opts.seed, opts.workflows).items() if k in opts.endpoints}
    paths.update(opts.extra_paths)
    # One server per --api-workers count, all up at once, the loads interleaved in each round
    # (the shared machine's load drifts); the last count's figures carry the plain names.
    served = {w: "" if w == opts.api_workers[-1] else f"@{w}w" for w in opts.api_workers}
    paths = {name + tag: some for tag in served.values() for name, some in paths.items()}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in paths}
    absent: dict[str, str] = {}
    with ExitStack() as stack:
        servers = {
            tag: stack.enter_context(api(env, ES_SCHED_API_WORKERS=str(w)))
            for w, tag in served.items()
        }
        url = {n: servers["@" + n.split("@")[1] if "@" in n else ""].url for n in paths}
        for name, some in paths.items():
            status = probe(url[name], some[0])
            if status == 404:
                absent[name] = f"404 on {some[0]}"
        measured = [n for n in paths if n not in absent]
        with Progress(console=console) as bar:
            task = bar.add_task("load", total=opts.runs * len(measured))
            for _ in range(opts.runs):
                for name in sorted(measured, key=lambda n: n.split("@")[0]):
                    runs[name].append(
                        measure(url[name], paths[name], opts.clients, opts.seconds, opts.warmup)
                    )
                    bar.advance(task)
        server_log = server_tail(servers[""])
    medians = {n: {f: statistics.median(r[f] for r in runs[n]) for f in FIGURES} for n in measured}
    missed = [n for n, t in TARGET_P99_MS.items() if n in medians and medians[n]["p99_ms"] > t]
    profiles = {}
    if missed and opts.profile:
        for name in missed:
            with console.status(f"profiling the server under {name}"):
                profiles[name] = profile(env, name, paths[name], opts)
    result = {
        "benchmark": "api",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "code": {"commit": commit(), "note": opts.note},
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seed": {**seeded.__dict__, "workflows_per_second": round(seeded.rate, 1)},
        "load": {
            "clients": opts.clients,
            "seconds": opts.seconds,
            "warmup": opts.warmup,
            "runs": opts.runs,
            "api_workers": opts.api_workers,
        },
        "endpoints": {
            n: {
                "path": paths[n][0],
                "status": "absent" if n in absent else "measured",
                **({"reason": absent[n]} if n in absent else {}),
                "median": medians.get(n),
                "per_run": runs[n],
                "target_p99_ms": TARGET_P99_MS.get(n),
            }
            for n in paths
        },
        "targets_missed": missed,
        "workers": workers(opts) if opts.workers else {"status": "skipped"},
        "profiles": profiles,
        "server_log_tail": server_log,
    }
    opts.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def commit() -> str:
    """The commit the server ran (``+dirty`` when the tree has changes)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True)
        return done.stdout

    return git("rev-parse", "--short", "HEAD").strip() + (
        "+dirty" if git("status", "--porcelain", "--untracked-files=no").strip() else ""
    )


def server_tail(server: Api, lines: int = 20) -> list[str]:
    return server.role.text().splitlines()[-lines:]


def report(result: dict[str, Any], console: Console, png: Path | None) -> None:
    load = result["load"]
    title = (
        f"API at {load['clients']} clients, median of {load['runs']} runs of {load['seconds']} s, "
        f"{result['seed']['workflows']:,} workflows"
    )
    table = Table(title=title)
    columns = (
        "endpoint",
        "req/s",
        "p50 ms",
        "p99 ms",
        "p99 runs",
        "target p99",
        "load cpu",
        "statuses",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "endpoint" else "right")
    for name, e in result["endpoints"].items():
        target = e["target_p99_ms"]
        if e["status"] == "absent":
            table.add_row(name, "absent", "", "", "", str(target or ""), "", e["reason"])
            continue
        m = e["median"]
        ok = "" if target is None else (" ok" if m["p99_ms"] <= target else " MISSED")
        statuses: dict[str, int] = {}
        for r in e["per_run"]:
            for k, v in r["statuses"].items():
                statuses[k] = statuses.get(k, 0) + v
        table.add_row(
            name,
            f"{m['requests_per_second']:.0f}",
            f"{m['p50_ms']:.1f}",
            f"{m['p99_ms']:.1f}",
            ", ".join(f"{r['p99_ms']:.0f}" for r in e["per_run"]),
            f"{target:.0f}{ok}" if target else "",
            f"{statistics.median(r.get('load_cpu_share', 0) for r in e['per_run']):.2f}",
            " ".join(f"{k}:{v}" for k, v in statuses.items()),
        )
    console.print(table)
    console.print("load cpu: the load process's CPU seconds per second (near 1: it set the pace)")
    console.print(f"HTTP vs native workers: {json.dumps(result['workers'])}")
    for name, views in result["profiles"].items():
        for view, frames in views.items():
            console.rule(f"profile of the server under {name}: {view}")
            console.print(frames, markup=False, highlight=False, soft_wrap=True)
    measured = {n: e for n, e in result["endpoints"].items() if e["status"] == "measured"}
    if png is not None and measured:
        series = [
            Series(
                n.upper(),
                COLOURS[i % len(COLOURS)],
                [
                    (
                        float(q),
                        float(statistics.median(r["percentiles_ms"][q] for r in e["per_run"])),
                    )
                    for q in e["per_run"][0]["percentiles_ms"]
                ],
            )
            for i, (n, e) in enumerate(measured.items())
        ]
        line_charts(png, [("LATENCY MS BY PERCENTILE", series)], "PERCENTILE")


def drop(env: Env) -> None:
    admin = engine_for(env.settings, "public")
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA IF EXISTS "{env.settings.postgres.schema_name}" CASCADE'))
    admin.dispose()


# -- write latency: what read-your-writes costs a start and a terminate (ADR 56) ------------
# Kept apart from the read loads above: its own system (private topics, the decider and the
# PostgreSQL projector, no seed), one client writing back to back as an SDK does, its own JSON.
WRITE_GATE = {
    "name": "bench.rw.gate",
    "version": 1,
    "schemaVersion": 2,
    "tasks": [{"name": "gate", "taskReferenceName": "gate", "type": "WAIT"}],
}
WRITE_ROWS = ("start", "start_visible", "terminate")


def _visible(http: httpx.Client, workflow_id: str) -> None:
    """Until ``GET /api/workflow/{id}`` answers (a client that cannot rely on the write)."""
    wait_until(
        lambda: http.get(f"/api/workflow/{workflow_id}").status_code == 200,
        60,
        f"{workflow_id} in the read model",
        every_s=0.002,
    )


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    return {"p50_ms": at(0.50) * 1000, "p99_ms": at(0.99) * 1000, "n": len(ordered)}


def write_round(http: httpx.Client, writes: int) -> dict[str, dict[str, float]]:
    """``writes`` starts and terminates back to back: ``start`` the call, ``start_visible``
    the call and the reads until the workflow shows (what a client waits either way),
    ``terminate`` the DELETE of a workflow the read model shows."""
    took: dict[str, list[float]] = {row: [] for row in WRITE_ROWS}
    for i in range(writes):
        t0 = time.perf_counter()
        answer = http.post(f"/api/workflow/{WRITE_GATE['name']}", json={"i": i})
        t1 = time.perf_counter()
        assert answer.status_code == 200, answer.text
        _visible(http, answer.text)
        t2 = time.perf_counter()
        gone = http.delete(f"/api/workflow/{answer.text}", params={"reason": "bench"})
        t3 = time.perf_counter()
        assert gone.status_code in (200, 204), gone.text
        took["start"].append(t1 - t0)
        took["start_visible"].append(t2 - t0)
        took["terminate"].append(t3 - t2)
    return {row: _percentiles(samples) for row, samples in took.items()}


def write_latency(opts: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Median of ``opts.runs`` rounds of ``write_round``; written to ``opts.writes_out``."""
    env = Env()
    env.create()
    env.push(WRITE_GATE, [])
    load_before = os.getloadavg()
    rounds: list[dict[str, dict[str, float]]] = []
    try:
        with ExitStack() as stack:
            for name in ("decider", "projector-pg"):
                role = stack.enter_context(_role(env, name))
                role.wait_log("started")
            server = stack.enter_context(api(env))
            write_round(server.http, 10)  # warm-up: connections, the registry, the probe
            for n in range(opts.runs):
                rounds.append(write_round(server.http, opts.writes))
                console.print(f"write round {n + 1}: {json.dumps(rounds[-1])}")
    finally:
        drop(env)
    median = {
        row: {
            figure: statistics.median(r[row][figure] for r in rounds)
            for figure in ("p50_ms", "p99_ms")
        }
        for row in WRITE_ROWS
    }
    result = {
        "question": "start and terminate latency through /api/workflow, one client back to back",
        "commit": commit(),
        "note": opts.note,
        "writes_per_round": opts.writes,
        "runs": opts.runs,
        "median": median,
        "per_run": rounds,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "load_average_before": load_before,
        "taken": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    opts.writes_out.parent.mkdir(parents=True, exist_ok=True)
    opts.writes_out.write_text(json.dumps(result, indent=2) + "\n")
    table = Table(title=f"writes: median of {opts.runs} rounds of {opts.writes}")
    for column in ("write", "p50 ms", "p99 ms"):
        table.add_column(column)
    for row, m in median.items():
        table.add_row(row, f"{m['p50_ms']:.1f}", f"{m['p99_ms']:.1f}")
    console.print(table)
    return result


@contextmanager
def _role(env: Env, name: str) -> Any:
    role = Role(env, name)
    try:
        yield role
    finally:
        role.stop()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--workflows", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--clients", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--processes", type=int, default=2, help="seeding processes")
    p.add_argument("--endpoints", type=lambda s: s.split(","), default=list(ENDPOINTS))
    p.add_argument(
        "--api-workers",
        type=lambda s: [int(w) for w in s.split(",")],
        default=[1, 2],
        help="es-sched api --workers counts, each its own server, measured "
        "side by side; the last one's figures carry the plain names",
    )
    p.add_argument("--no-profile", dest="profile", action="store_false")
    p.add_argument("--no-workers", dest="workers", action="store_false")
    p.add_argument("--note", default="", help="kept in the JSON: what was measured, and why")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--png", type=Path, default=ROOT / "bench" / "results" / "current" / "api.png")
    p.add_argument(
        "--writes-only",
        action="store_true",
        help="measure only the start and terminate latency (write_latency), no seed",
    )
    p.add_argument("--writes", type=int, default=200, help="starts and terminates per round")
    p.add_argument(
        "--writes-out",
        type=Path,
        default=ROOT / "bench" / "results" / "current" / "api_writes.json",
    )
    p.set_defaults(extra_paths={})
    route_options(p)
    return p


# --- Every /api/v1 route and console page, idle and at --clients, after and --before (ADR 57) ---
# ``--routes`` runs this part instead of the endpoints above; it writes ``api_routes.json``.
# Kept in functions of their own so other rows (writes) merge beside them.

IDLE_FLOW = "bench.idle"
ROUTE_PAGES = {  # name -> the route it loads
    "v1_workflow": "/api/v1/workflows/{id}",
    "v1_workflows": "/api/v1/workflows?status=S",
    "v1_queues": "/api/v1/queues",
    "v1_history": "/api/v1/workflows/{id}/history",
    "v1_workers": "/api/v1/workers",
    "v1_config": "/api/v1/config",
    "v1_config_key": "/api/v1/config/{key}",
    "v1_task_log": "/api/v1/tasks/{taskId}/log",
    "v1_system": "/api/v1/system",
    "ui_list": "/ui/?status=S",
    "ui_workflow": "/ui/workflows/{id}",
    "ui_live": "/ui/workflows/{id}/live",
    "ui_task": "/ui/workflows/{id}/tasks/{ref}",
    "ui_history": "/ui/workflows/{id}/history",
    "ui_queues": "/ui/queues",
    "ui_workers": "/ui/workers",
    "ui_definitions": "/ui/definitions",
    "ui_submit": "/ui/submit",
    "ui_media": "/ui/media/{id}",
    "ui_data": "/ui/workflows/{id}/data",
    "ui_history_json": "/ui/workflows/{id}/history.json",
    "ui_taskdefs": "/ui/taskdefs",
    "ui_editor": "/ui/definitions/edit",
    "ui_system": "/ui/system",
}
CONFIG_KEY = "pool:bench.idle.step"  # a config record the bench writes, for v1_config_key


def settle_events(env: Env, console: Console) -> list[str]:
    """A few real workflows through the decider and the PostgreSQL projector, so the events
    topic holds transactions (each partition ending in a commit marker) and the read model's
    checkpoints stand at their last records, as on an idle deployment; then the roles stop.
    Reused when the read model has them already. Returns their ids (their history is archived,
    unlike the seeded rows')."""
    engine = engine_for(env.settings)
    query = text("SELECT workflow_id FROM workflows WHERE name = :n ORDER BY workflow_id")
    with engine.connect() as conn:
        ids = [r for (r,) in conn.execute(query, {"n": IDLE_FLOW})]
    if len(ids) >= env.partitions * 2:
        engine.dispose()
        return ids
    step = f"{env.prefix}.step"
    flow = {
        "name": IDLE_FLOW,
        "version": 1,
        "tasks": [{"name": step, "taskReferenceName": "step", "type": "SIMPLE"}],
    }
    env.push(flow, [{"name": step}])
    with (
        console.status("settling a few workflows through the decider and projector"),
        roles(env, "decider", "projector-pg"),
    ):
        made = [s.workflow_id for s in env.submit(IDLE_FLOW, [{}] * (env.partitions * 4))]

        def projected() -> bool:
            with engine.connect() as conn:
                found = conn.execute(
                    text("SELECT count(*) FROM workflows WHERE workflow_id = ANY(:ids)"),
                    {"ids": made},
                ).scalar()
            return found == len(made)

        wait_until(projected, 120, "the settled workflows in the read model")
    engine.dispose()
    return sorted(made)


def settled_tasks(env: Env, settled: list[str]) -> list[str]:
    """The task ids of the settled workflows (their log is read from the event archive)."""
    engine = engine_for(env.settings)
    query = text("SELECT task_id FROM tasks WHERE workflow_id = ANY(:ids) ORDER BY task_id")
    with engine.connect() as conn:
        found = [str(r) for (r,) in conn.execute(query, {"ids": settled})]
    engine.dispose()
    return found


def route_paths(
    seed: int, workflows: int, settled: list[str], tasks: list[str]
) -> dict[str, list[str]]:
    """Each route's paths: seeded workflows where a row is read, the settled ones where their
    archived history is."""
    some = api_seed.sample_ids(seed, workflows, 200)
    statuses = ("RUNNING", "FAILED", "COMPLETED", "TERMINATED", "PAUSED")
    return {
        "v1_workflow": [f"/api/v1/workflows/{i}" for i in some],
        "v1_workflows": [f"/api/v1/workflows?status={s}&size=100" for s in statuses],
        "v1_queues": ["/api/v1/queues"],
        "v1_history": [f"/api/v1/workflows/{i}/history" for i in settled],
        "v1_workers": ["/api/v1/workers"],
        "v1_config": ["/api/v1/config"],
        "ui_list": [f"/ui/?status={s}" for s in statuses],
        "ui_workflow": [f"/ui/workflows/{i}" for i in some],
        "ui_live": [f"/ui/workflows/{i}/live" for i in some],
        "ui_task": [f"/ui/workflows/{i}/tasks/step" for i in settled],
        "ui_history": [f"/ui/workflows/{i}/history" for i in settled],
        "ui_queues": ["/ui/queues"],
        "ui_workers": ["/ui/workers"],
        "ui_definitions": ["/ui/definitions"],
        "ui_submit": ["/ui/submit"],
        "ui_media": [f"/ui/media/{i}" for i in some],
        "v1_config_key": [f"/api/v1/config/{CONFIG_KEY}"],
        "v1_task_log": [f"/api/v1/tasks/{i}/log" for i in tasks],
        "v1_system": ["/api/v1/system"],
        "ui_data": [f"/ui/workflows/{i}/data" for i in some],
        "ui_history_json": [f"/ui/workflows/{i}/history.json" for i in settled],
        "ui_taskdefs": ["/ui/taskdefs"],
        "ui_editor": [f"/ui/definitions/edit?name={IDLE_FLOW}"],
        "ui_system": ["/ui/system"],
    }


@contextmanager
def server_of(env: Env, tree: Path) -> Any:
    """``es-sched api`` run from ``tree`` (its own code), auth off on loopback."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "es_sched", "api", "--port", str(port)],
        cwd=tree,
        env={**os.environ, **env.vars, "PYTHONPATH": str(tree), "ES_SCHED_API_AUTH": "off"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def answers() -> bool:
        try:
            return probe(url, "/openapi.json") == 200 or proc.poll() is not None
        except httpx.HTTPError:
            return False

    try:
        wait_until(answers, 90, f"the API of {tree} on {url}")
        assert proc.poll() is None, Path(log.name).read_text()
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        Path(log.name).unlink()


def drained(url: str, timeout_s: float) -> None:
    """Wait until the server has answered what a load left queued: a request that reads the
    read model and the log queues behind them."""
    httpx.get(url + "/api/v1/queues", timeout=timeout_s)


def measure_routes(opts: argparse.Namespace, console: Console, env: Env) -> dict[str, Any]:
    """Each route idle (one client back to back) and at ``--clients``, on this checkout
    ("after") and ``--before`` TREE, both served at once and taking turns; the result
    document (also written to ``opts.out``)."""
    load_before = os.getloadavg()
    env.create()
    seeded = api_seed.seed(env.settings, opts.workflows, opts.seed, opts.processes)
    settled = settle_events(env, console)
    config_client.publish(env.settings, CONFIG_KEY, {"pool": "default"})
    tasks = settled_tasks(env, settled)
    paths = {
        k: v
        for k, v in route_paths(opts.seed, opts.workflows, settled, tasks).items()
        if k in opts.route_names
    }
    trees = {"after": ROOT, **({"before": opts.before.resolve()} if opts.before else {})}
    loads = {"idle": 1, "busy": opts.clients}
    runs: dict[str, dict[str, dict[str, list[Any]]]] = {
        code: {name: {kind: [] for kind in loads} for name in paths} for code in trees
    }
    statuses: dict[str, dict[str, int]] = {}
    with ExitStack() as stack:
        urls = {code: stack.enter_context(server_of(env, tree)) for code, tree in trees.items()}
        for code, url in urls.items():
            for name, some in paths.items():
                statuses[f"{code} {name}"] = {"probe": probe(url, some[0])}
        # A route the before checkout does not have (its probe is not 2xx there) is measured
        # after only; its row says what before answered.
        absent = {
            (code, name)
            for code in trees
            for name in paths
            if code == "before" and not 200 <= statuses[f"{code} {name}"]["probe"] < 300
        }
        steps = [
            (r, kind, name, code)
            for r in range(opts.runs)
            for kind in loads
            for name in paths
            for code in trees
            if (code, name) not in absent
            and (kind == "idle" or r < (opts.before_busy_runs if code == "before" else opts.runs))
        ]
        with Progress(console=console) as bar:
            task = bar.add_task("routes", total=len(steps))
            for _r, kind, name, code in steps:
                seconds = opts.idle_seconds if kind == "idle" else opts.seconds
                spec = {
                    "url": urls[code],
                    "paths": paths[name],
                    "clients": loads[kind],
                    "seconds": seconds,
                    "warmup": opts.warmup,
                }
                runs[code][name][kind].append(measure_spec(spec, opts.timeout))
                drained(urls[code], 600)
                bar.advance(task)
    figures = ("p50_ms", "p99_ms", "requests_per_second")
    routes: dict[str, Any] = {}
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    for name, some in paths.items():
        routes[name] = {"route": ROUTE_PAGES[name], "path": some[0], "when": when}
        for code in trees:
            if (code, name) in absent:
                routes[name][code] = {"absent": statuses[f"{code} {name}"]["probe"]}
                continue
            routes[name][code] = {
                kind: {
                    "median": {f: statistics.median(r[f] for r in got) for f in figures}
                    if got
                    else None,
                    "runs": len(got),
                    "per_run": got,
                }
                for kind, got in runs[code][name].items()
            }
    result: dict[str, Any] = {
        "benchmark": "api_routes",
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_before": load_before,
            "load_average_after": os.getloadavg(),
        },
        "code": {
            "commit": commit(),
            "before": str(opts.before) if opts.before else None,
            "note": opts.note,
        },
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "seed": {"workflows": seeded.workflows, "tasks": seeded.tasks, "settled": len(settled)},
        "load": {
            "idle": {"clients": 1, "seconds": opts.idle_seconds},
            "busy": {"clients": opts.clients, "seconds": opts.seconds},
            "warmup": opts.warmup,
            "runs": opts.runs,
            "before_busy_runs": opts.before_busy_runs,
            "timeout_s": opts.timeout,
        },
        "probes": statuses,
        "routes": routes,
    }
    if opts.keep_rows and opts.out.exists():
        # Rows of an earlier run not measured in this one stay, each with its own "when";
        # a row's before and after are always from one run.
        earlier = json.loads(opts.out.read_text())
        kept = {
            k: {**v, "when": v.get("when", earlier["when"])}
            for k, v in earlier["routes"].items()
            if k not in routes
        }
        result["routes"] = {**kept, **routes}
        result["earlier_runs"] = [
            *earlier.get("earlier_runs", []),
            {k: earlier[k] for k in ("when", "code", "seed", "load") if k in earlier},
        ]
    opts.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    return result


def measure_spec(spec: dict[str, Any], timeout_s: float) -> Any:
    """``measure`` with a per-request timeout (a request not answered within it counts under
    ``TimeoutError``, and the latencies are of the answered ones)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({**spec, "timeout": timeout_s}, f)
    try:
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "api_load.py"), f.name],
            capture_output=True,
            text=True,
            check=True,
            timeout=spec["seconds"] + spec["warmup"] + timeout_s + 120,
        )
    finally:
        Path(f.name).unlink()
    return json.loads(done.stdout)


def report_routes(result: dict[str, Any], console: Console) -> None:
    codes = [c for c in ("before", "after") if any(c in r for r in result["routes"].values())]
    load = result["load"]
    table = Table(
        title=f"routes: p50/p99 ms idle (1 client) and at {load['busy']['clients']} clients, "
        f"{result['seed']['workflows']:,} workflows"
    )
    table.add_column("route", justify="left")
    for code in codes:
        table.add_column(f"{code} idle", justify="right")
        table.add_column(f"{code} {load['busy']['clients']}", justify="right")
    for name, r in result["routes"].items():
        cells = []
        for code in codes:
            for kind in ("idle", "busy"):
                if code not in r or "absent" in r[code]:
                    cells.append("-")
                    continue
                m = r[code][kind]["median"]
                cells.append("-" if m is None else f"{m['p50_ms']:.1f} / {m['p99_ms']:.1f}")
        table.add_row(name, *cells)
    console.print(table)
    errors = {
        f"{code} {name} {kind}": s
        for name, r in result["routes"].items()
        for code in codes
        if code in r and "absent" not in r[code]
        for kind in ("idle", "busy")
        for run in r[code][kind]["per_run"]
        if (s := {k: v for k, v in run["statuses"].items() if not k.startswith("2")})
    }
    if errors:
        console.print(f"answers not 2xx (errors, timeouts): {json.dumps(errors)}")


def route_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--routes", action="store_true", help="every /api/v1 route and console page")
    p.add_argument("--route-names", type=lambda s: s.split(","), default=list(ROUTE_PAGES))
    p.add_argument("--before", type=Path, help="a checkout served beside this one (--routes)")
    p.add_argument("--idle-seconds", type=float, default=3.0)
    p.add_argument(
        "--keep-rows",
        action="store_true",
        help="keep the output file's rows of routes not measured in this run (--routes)",
    )
    p.add_argument("--timeout", type=float, default=30.0, help="per request (--routes)")
    p.add_argument(
        "--before-busy-runs",
        type=int,
        default=3,
        help="runs of --before's loads at --clients (a slow before takes minutes per load)",
    )


def main() -> None:
    opts = parser().parse_args()
    console = Console(width=None if sys.stdout.isatty() else 160)  # a log keeps whole rows
    if opts.writes_only:
        write_latency(opts, console)
        return
    # The schema (and topic prefix) is named by what is seeded, so a rerun finds its seed.
    env = Env(prefix=f"benchapi_{opts.workflows}_{opts.seed}")
    if opts.routes:
        if opts.out == OUT:
            opts.out = ROUTES_OUT
        report_routes(measure_routes(opts, console, env), console)
        return
    report(run(opts, console, env), console, opts.png)


if __name__ == "__main__":
    main()
