"""Projection and audit speed on this machine: events per second.

A history is made once: W media workflows run through the real decider with a worker double
(every task completes), on fresh topics. Then, ``--runs`` times each (default 3):
- PostgreSQL: a projector catches up from offset 0 into a fresh schema (``Projector.catch_up``:
  decode, fold, version-guarded upserts, archive, checkpoints, one transaction per batch);
- OpenSearch: the same into fresh indices (bulk with external versions);
- replay --verify: ``es-sched replay``'s fold of the whole topic with the decider's core plus
  the comparison with every PostgreSQL row.
Figures are events/s; the medians are reported, each run kept in the JSON.

Needs `es-sched stack up`. Prints figures, writes bench/results/projections.json.
Rerun: `.venv/bin/python bench/projections.py [--workflows 3000 --runs 3]`
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from es_sched.projections import replay as audit  # noqa: E402
from es_sched.projections.postgres.store import PgStore, engine_for  # noqa: E402
from es_sched.projections.projector import Projector  # noqa: E402
from es_sched.projections.search.store import SearchStore  # noqa: E402
from tests.integration.runtime_harness import (  # noqa: E402
    MEDIA,
    Env,
    Role,
    Worker,
    completed,
    media_inputs,
    read_events,
)
from tests.support.settings import settings_with  # noqa: E402
from tests.support.wait import wait_until  # noqa: E402


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


def timed_pg(env: Env, schema: str) -> tuple[float, int]:
    settings = env.settings
    store = PgStore(settings, schema=schema)
    store.ensure()
    started = time.monotonic()
    read = Projector(settings, store, group=f"bench-{uuid.uuid4().hex[:8]}").catch_up()
    return time.monotonic() - started, read


def timed_search(env: Env, prefix: str) -> tuple[float, int]:
    settings = settings_with({**env.vars, "ES_SCHED_SEARCH_INDEX_PREFIX": prefix})
    store = SearchStore(settings)
    store.ensure()
    started = time.monotonic()
    read = Projector(settings, store, group=f"bench-{uuid.uuid4().hex[:8]}").catch_up()
    seconds = time.monotonic() - started
    store.drop()
    return seconds, read


def timed_verify(env: Env, schema: str) -> tuple[float, int, int]:
    settings = settings_with({**env.vars, "ES_SCHED_PG_SCHEMA_NAME": schema})
    started = time.monotonic()
    done = audit.replay(settings)
    store = PgStore(settings)
    mismatches = audit.verify_store(done, store, sorted(done.states))
    store.close()
    return time.monotonic() - started, done.events, len(mismatches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--runs", type=int, default=3)
    opts = parser.parse_args()
    console = Console()
    with console.status(f"making a history of {opts.workflows} workflows"):
        env, events = make_history(opts.workflows)
    runs: list[dict[str, Any]] = []
    admin = engine_for(env.settings, "public")
    with Progress(console=console) as bar:
        task = bar.add_task("runs", total=opts.runs * 3)
        for n in range(opts.runs):
            schema = f"{env.prefix}_bench{n}"
            pg_s, pg_n = timed_pg(env, schema)
            bar.advance(task)
            os_s, os_n = timed_search(env, f"es-sched-bench-{env.prefix}-{n}")
            bar.advance(task)
            v_s, v_n, bad = timed_verify(env, schema)
            bar.advance(task)
            with admin.begin() as conn:
                conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
            runs.append({
                "pg_events_per_second": round(pg_n / pg_s), "pg_records": pg_n,
                "search_events_per_second": round(os_n / os_s), "search_records": os_n,
                "verify_events_per_second": round(v_n / v_s), "verify_mismatches": bad,
            })  # fmt: skip
    admin.dispose()

    def median(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))

    keys = ("pg_events_per_second", "search_events_per_second", "verify_events_per_second")
    targets = dict(zip(keys, (20_000, 10_000, 50_000), strict=True))
    result = {
        "benchmark": "projections",
        "machine": {"cores": os.cpu_count(), "python": platform.python_version()},
        "history": {"workflows": opts.workflows, "events": events},
        "median": {k: median(k) for k in keys},
        "per_run": runs,
        "targets": targets,
    }
    table = Table(title=f"projections, median of {len(runs)} runs over {events} events")
    table.add_column("figure")
    table.add_column("median events/s", justify="right")
    table.add_column("runs", justify="right")
    table.add_column("target", justify="right")
    for k in keys:
        table.add_row(k.removesuffix("_events_per_second"), f"{median(k):.0f}",
                      ", ".join(str(r[k]) for r in runs), str(targets[k]))  # fmt: skip
    console.print(table)
    (ROOT / "bench" / "results" / "projections.json").write_text(
        json.dumps(result, indent=2) + "\n"
    )


if __name__ == "__main__":
    main()
