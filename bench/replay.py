"""`es-sched replay` speed on this machine: events per second, with and without --verify.

A history of W media workflows is made once (``projections.make_history``: the real decider
and a worker double, on fresh topics), or reused with ``--prefix`` (the topics of an earlier
history; 12 partitions). It is projected once into PostgreSQL and the search engine, so
``--verify`` has read models to compare. Then ``--runs`` times each (default 3):

- replay: ``projections.replay.replay`` folds the whole events topic with the decider's core
  (read, decode, fold) -- what ``es-sched replay`` does without ``--verify``;
- verify: the same plus what ``--verify`` adds: every workflow compared with the PostgreSQL
  rows, the search documents and the changelog's snapshots (mismatches must be 0); on a
  checkout with ``projections/verified.py`` (ADR 43) as ``es-sched replay --verify`` runs it,
  each partition group's process comparing its own workflows.

With ``--before PATH`` (a checkout of another commit, e.g. ``git archive main | tar -x -C
/tmp/base``) each measurement runs in a child process on that code and on this one, interleaved
(A, B, A, B, ...), so both see the same machine; the JSON keeps both and their ratios.
Figures are events/s over the events read (refusals included); medians are reported.

Needs `es-sched stack up`. Prints figures, writes bench/results/replay.json.
Rerun: `.venv/bin/python bench/replay.py [--workflows 4000 | --prefix P] [--before /tmp/base]`
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_CODE", ROOT))  # --before: a child on another checkout
sys.path.insert(0, str(CODE))
KINDS = ("replay", "verify")
TARGETS: dict[str, int | None] = {"replay": None, "verify": 50_000}


def measure(kind: str, prefix: str) -> dict[str, Any]:
    """One figure with the es_sched on sys.path (this checkout's or --before's)."""
    from projections import cpu_seconds, figures  # noqa: PLC0415

    from es_sched import bootstrap  # noqa: PLC0415
    from es_sched.projections import replay as audit  # noqa: PLC0415
    from es_sched.projections.postgres import queries  # noqa: PLC0415
    from tests.integration.runtime_harness import Env  # noqa: PLC0415

    settings = Env(prefix=prefix, partitions=12).settings
    started, cpu = time.monotonic(), cpu_seconds()
    if kind == "verify" and (CODE / "es_sched" / "projections" / "verified.py").exists():
        # ADR 43: each partition group's process folds and compares its own workflows
        from functools import partial  # noqa: PLC0415

        from es_sched.projections.verified import replay_verified  # noqa: PLC0415

        targets = ("pg", "search", "changelog")
        checked = replay_verified(settings, targets, partial(bootstrap.store, settings))
        assert not checked.mismatches(), [m.line() for m in checked.mismatches()[:3]]
        seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
        return figures(kind, checked.events + checked.refusals, seconds, cpu)
    done = audit.replay(settings)
    if kind == "verify":  # what `es-sched replay --verify` compares, as it compares it
        ids, targets = audit.comparable_ids(done, None), ("pg", "search", "changelog")
        if hasattr(audit, "verify_all"):
            stores = lambda t: bootstrap.store(settings, t)  # noqa: E731
            found = audit.verify_all(settings, done, ids, targets, stores, whole=True)
        else:  # before it: one target after the other
            found = []
            for target in targets[:2]:
                store = bootstrap.store(settings, target)
                pg = target == "pg"
                total = queries.total_workflows(store.engine) if pg else None  # type: ignore[attr-defined]
                found += audit.verify_store(done, store, ids, total)
                store.close()
            found += audit.verify_changelog(settings, done, set(ids))
        assert not found, [m.line() for m in found[:3]]
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
    return figures(kind, done.events + done.refusals, seconds, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=4000)
    parser.add_argument("--prefix", help="reuse the history under this topic prefix")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument("--only", choices=KINDS, action="append", help="these figures only")
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.measure, opts.prefix)))
        return
    from projections import interleaved, make_history, prepare, summary  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415

    from tests.integration.runtime_harness import Env  # noqa: PLC0415

    console = Console()
    if opts.prefix:
        env = Env(prefix=opts.prefix, partitions=12)
    else:
        with console.status(f"making a history of {opts.workflows} workflows"):
            env, _ = make_history(opts.workflows)
    with console.status("projecting it into PostgreSQL and the search engine"):
        prepare(env)
    codes = {"after": ROOT, **({"before": opts.before.resolve()} if opts.before else {})}
    kinds = tuple(opts.only or KINDS)
    runs = interleaved(__file__, codes, kinds, opts.runs, ["--prefix", env.prefix], console)
    targets = {k: TARGETS[k] for k in kinds}
    result = summary("replay", codes, runs, targets, console)
    result["history"] = {"prefix": env.prefix, "records": runs["after"][kinds[0]][0]["records"]}
    (ROOT / "bench" / "results" / "replay.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
