"""Projection and audit speed on this machine: events per second.

A history is made once: W media workflows run through the real decider with a worker double
(every task completes), on fresh topics. Then, ``--runs`` times each (default 3):
- PostgreSQL: a projector catches up from offset 0 into a fresh schema (``Projector.catch_up``:
  decode, fold, version-guarded upserts, archive, checkpoints, one transaction per batch);
- OpenSearch: the same into fresh indices (bulk with external versions);
- replay --verify: ``es-sched replay``'s fold of the whole topic with the decider's core plus
  the comparison with every PostgreSQL row;
- pg_groups: PostgreSQL as a rebuild catches up (``projections.catch_up``: partition groups,
  one projector process each; a checkout without it measures one projector).
Figures are events/s; the medians are reported, each run kept in the JSON.

``--prefix P`` reuses the history under topic prefix P (12 partitions) instead of making one.
With ``--before PATH`` (a checkout of another commit, e.g. ``git archive main | tar -x -C
/tmp/base``) each measurement runs in a child process on that code and on this one,
interleaved (A, B, B, A, ...), so both see the same loaded machine; the JSON keeps both and
their ratios (``bench/replay.py`` does the same for ``es-sched replay``).

Needs `es-sched stack up`. Prints figures, writes bench/results/current/projections.json.
Rerun: `.venv/bin/python bench/projections.py [--workflows 3000 | --prefix P] [--before PATH]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_CODE", ROOT))  # --before: a child on another checkout
sys.path.insert(0, str(CODE))
from es_sched.projections import replay as audit  # noqa: E402
from es_sched.projections.postgres.store import PgStore, engine_for  # noqa: E402
from es_sched.projections.projector import Projector  # noqa: E402
from es_sched.projections.search.store import SearchStore  # noqa: E402
from testkit.runtime import (  # noqa: E402
    MEDIA,
    Env,
    Role,
    Worker,
    completed,
    media_inputs,
    read_events,
)
from testkit.settings import settings_with  # noqa: E402
from testkit.wait import wait_until  # noqa: E402

KINDS = ("pg", "search", "verify", "pg_groups")
TARGETS: dict[str, int | None] = {
    "pg": 20_000,
    "search": 10_000,
    "verify": 50_000,
    "pg_groups": 20_000,
}


def make_history(workflows: int) -> tuple[Env, int]:
    env = Env(partitions=12)
    env.create()
    env.push_files(*MEDIA)
    decider = Role(env, "decider")
    try:
        decider.wait_log("started", 90)
        with Worker(env):
            env.submit("media_pipeline", media_inputs(workflows))
            wait_until(lambda: completed(env) == workflows, 900, f"{workflows} workflows")
    finally:
        decider.stop()
    return env, sum(len(v) for v in read_events(env).values())


def prepare(env: Env) -> None:
    """Project the history into its own schema and indices once (``verify`` compares them)."""
    settings = env.settings
    for store in (PgStore(settings), SearchStore(settings)):
        store.ensure()
        Projector(settings, store, group=f"{env.prefix}-bench-prepare-{store.name}").catch_up()
        store.close()


def timed_pg(env: Env, groups: bool = False) -> tuple[float, int]:
    """One projector catching a fresh schema up; ``groups``: as a rebuild does it, where the
    checkout has ``projections.catch_up`` (partition groups in processes), else the same."""
    schema = f"{env.prefix}_b{uuid.uuid4().hex[:8]}"
    store = PgStore(env.settings, schema=schema)
    store.ensure()
    group = f"bench-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        from es_sched.projections.catch_up import catch_up  # noqa: PLC0415
    except ImportError:
        catch_up = None  # type: ignore[assignment]
    if groups and catch_up is not None:
        read = catch_up(env.settings, partial(PgStore, env.settings, schema=schema), group)
    else:
        read = Projector(env.settings, store, group=group).catch_up()
    seconds = time.monotonic() - started
    store.close()
    admin = engine_for(env.settings, "public")
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()
    return seconds, read


def timed_search(env: Env) -> tuple[float, int]:
    prefix = f"es-sched-bench-{env.prefix}-{uuid.uuid4().hex[:8]}"
    settings = settings_with({**env.vars, "ES_SCHED_SEARCH_INDEX_PREFIX": prefix})
    store = SearchStore(settings)
    store.ensure()
    started = time.monotonic()
    read = Projector(settings, store, group=f"bench-{uuid.uuid4().hex[:8]}").catch_up()
    seconds = time.monotonic() - started
    store.drop()
    store.close()
    return seconds, read


def timed_verify(env: Env) -> tuple[float, int]:
    """``replay`` plus the comparison with every PostgreSQL row (of ``prepare``'s schema)."""
    started = time.monotonic()
    done = audit.replay(env.settings)
    store = PgStore(env.settings)
    mismatches = audit.verify_store(done, store, sorted(done.states))
    store.close()
    assert not mismatches, mismatches[:3]
    return time.monotonic() - started, done.events + done.refusals


def measure(kind: str, prefix: str) -> dict[str, Any]:
    """One figure with the es_sched on sys.path (this checkout's or --before's)."""
    env = Env(prefix=prefix, partitions=12)
    cpu = cpu_seconds()
    timed: dict[str, Callable[[Env], tuple[float, int]]] = {
        "pg": timed_pg,
        "search": timed_search,
        "verify": timed_verify,
        "pg_groups": partial(timed_pg, groups=True),
    }
    seconds, records = timed[kind](env)
    return figures(kind, records, seconds, cpu_seconds() - cpu)


def cpu_seconds() -> float:
    """CPU time of this process and of its children that ended (a replay's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def figures(kind: str, records: int, seconds: float, cpu: float) -> dict[str, Any]:
    """Events/s of wall time (the target) and per CPU second of this process (all threads,
    and children):
    on a host shared with other work the second moves less with the neighbours' load."""
    return {
        "kind": kind,
        "records": records,
        "seconds": round(seconds, 3),
        "events_per_second": round(records / seconds),
        "cpu_seconds": round(cpu, 3),
        "events_per_cpu_second": round(records / cpu),
    }


def in_subprocess(script: str, code: Path, args: list[str]) -> dict[str, Any]:
    """``script --measure ...`` in a child on ``code`` (its PYTHONPATH and working directory);
    the last line it prints is the JSON of one figure."""
    env = {**os.environ, "PYTHONPATH": str(code), "BENCH_CODE": str(code)}
    out = subprocess.run(
        [sys.executable, script, *args],
        env=env,
        cwd=code,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{script} {args} on {code}:\n{out.stderr[-3000:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def commit(code: Path) -> str:
    done = subprocess.run(
        ["git", "-C", str(code), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or str(code)


def interleaved(
    script: str,
    codes: dict[str, Path],
    kinds: tuple[str, ...],
    runs: int,
    args: list[str],
    console: Console,
) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Every kind on every code, ``runs`` times, the codes' order alternating per run."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = {c: {k: [] for k in kinds} for c in codes}
    for n in range(runs):
        for kind in kinds:
            for label, code in sorted(codes.items(), reverse=n % 2 == 1):
                r = in_subprocess(script, code, ["--measure", kind, *args])
                out[label][kind].append(r)
                console.print(
                    f"run {n + 1} {label:6} {kind:6} {r['events_per_second']:>8} "
                    f"events/s ({r['records']} in {r['seconds']} s; "
                    f"{r['events_per_cpu_second']} per CPU second)"
                )
    return out


def summary(
    name: str,
    codes: dict[str, Path],
    runs: dict[str, dict[str, list[dict[str, Any]]]],
    targets: dict[str, int | None],
    console: Console,
) -> dict[str, Any]:
    """Medians per code and kind, after/before ratios, a table; the JSON's common part."""
    kinds = tuple(targets)
    median = {
        label: {k: float(statistics.median(r["events_per_second"] for r in by[k])) for k in kinds}
        for label, by in runs.items()
    }
    per_cpu = {
        label: {
            k: float(statistics.median(r["events_per_cpu_second"] for r in by[k])) for k in kinds
        }
        for label, by in runs.items()
    }
    cpu_ratios = {
        k: round(per_cpu["after"][k] / per_cpu["before"][k], 2) if "before" in per_cpu else None
        for k in kinds
    }
    ratios = {
        k: round(median["after"][k] / median["before"][k], 2) if "before" in median else None
        for k in kinds
    }
    table = Table(
        title=f"{name}: median events/s of {len(runs['after'][kinds[0]])} runs "
        "(a shared, loaded host: compare the ratios)"
    )
    table.add_column("figure")
    for label in codes:
        table.add_column(label, justify="right")
    table.add_column("after/before", justify="right")
    table.add_column("target", justify="right")
    for k in kinds:
        ratio = f"{ratios[k]:.2f}x" if ratios[k] else "-"
        table.add_row(k, *(f"{median[c][k]:.0f}" for c in codes), ratio, str(targets[k] or "-"))
        ratio = f"{cpu_ratios[k]:.2f}x" if cpu_ratios[k] else "-"
        table.add_row(f"{k} per CPU s", *(f"{per_cpu[c][k]:.0f}" for c in codes), ratio, "")
    console.print(table)
    return {
        "benchmark": name,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        },
        "code": {label: commit(code) for label, code in codes.items()},
        "median_events_per_second": median,
        "ratio_after_over_before": ratios,
        "median_events_per_cpu_second": per_cpu,
        "cpu_ratio_after_over_before": cpu_ratios,
        "per_run": runs,
        "targets": targets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--prefix", help="reuse the history under this topic prefix")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument("--only", choices=KINDS, action="append", help="these figures only")
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.measure, opts.prefix)))
        return
    console = Console()
    if opts.prefix:
        env = Env(prefix=opts.prefix, partitions=12)
    else:
        with console.status(f"making a history of {opts.workflows} workflows"):
            env, _ = make_history(opts.workflows)
    with console.status("projecting it once for verify"):
        prepare(env)
    codes = {"after": ROOT, **({"before": opts.before.resolve()} if opts.before else {})}
    kinds = tuple(opts.only or KINDS)
    runs = interleaved(__file__, codes, kinds, opts.runs, ["--prefix", env.prefix], console)
    targets = {k: TARGETS[k] for k in kinds}
    result = summary("projections", codes, runs, targets, console)
    result["history"] = {"prefix": env.prefix, "records": runs["after"][kinds[0]][0]["records"]}
    (ROOT / "bench" / "results" / "current" / "projections.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
