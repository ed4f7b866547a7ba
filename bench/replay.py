"""`es-sched replay` speed on this machine: events per second, with and without --verify.

A history of W media workflows is made once (``projections.make_history``: the real decider
and a worker double, on fresh topics), or reused with ``--prefix`` (the topics of an earlier
history; 12 partitions). It is projected once into PostgreSQL and the search engine, so
``--verify`` has read models to compare. Then ``--runs`` times each (default 3):

- replay: the whole events topic folded with the decider's core (read, decode, fold) -- what
  ``es-sched replay`` does without ``--verify`` (``projections.replay.replay``, or on a checkout
  with ``projections/verified.py`` its ``replay_verified`` with no target: ADR 43);
- verify: the same plus what ``--verify`` adds: every workflow compared with the PostgreSQL
  rows, the search documents and the changelog's snapshots (mismatches must be 0); on a
  checkout with ``projections/verified.py`` (ADR 43) as ``es-sched replay --verify`` runs it,
  each partition group's process comparing its own workflows.

With ``--before PATH`` (a checkout of another commit, e.g. ``git archive main | tar -x -C
/tmp/base``) each measurement runs in a child process on that code and on this one, interleaved
(A, B, A, B, ...), so both see the same machine; the JSON keeps both and their ratios.
Figures are events/s over the events read (refusals included); medians are reported.

Needs `es-sched stack up`. Prints figures, writes bench/results/current/replay.json (or ``--out``).
Rerun: `.venv/bin/python bench/replay.py [--workflows 4000 | --prefix P] [--before /tmp/base]
[--out FILE]`
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
    """One figure with the es_sched on sys.path (this checkout's or --before's): the command
    itself, ``es-sched replay --json [--verify]``, run in this process, so each checkout is
    measured doing what its command does (ADR 43 changed how, not what)."""
    from click.testing import CliRunner  # noqa: PLC0415
    from projections import cpu_seconds, figures  # noqa: PLC0415

    from es_sched.cli.main import cli  # noqa: PLC0415
    from testkit.runtime import Env  # noqa: PLC0415
    from testkit.settings import vars_of  # noqa: PLC0415

    os.environ.update(vars_of(Env(prefix=prefix, partitions=12).settings))
    args = ["replay", "--json", *(["--verify"] if kind == "verify" else [])]
    started, cpu = time.monotonic(), cpu_seconds()
    result = CliRunner().invoke(cli, args)
    seconds, cpu = time.monotonic() - started, cpu_seconds() - cpu
    assert result.exit_code == 0, result.output[-2000:]
    report = json.loads(result.stdout)
    return figures(kind, report["events"] + report["refusals"], seconds, cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=4000)
    parser.add_argument("--prefix", help="reuse the history under this topic prefix")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument("--only", choices=KINDS, action="append", help="these figures only")
    parser.add_argument("--measure", choices=KINDS, help=argparse.SUPPRESS)
    out = ROOT / "bench" / "results" / "current" / "replay.json"
    parser.add_argument("--out", type=Path, default=out, help="an A/B keeps ADR 43's record")
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.measure, opts.prefix)))
        return
    from projections import interleaved, make_history, prepare, summary  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415

    from testkit.runtime import Env  # noqa: PLC0415

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
    opts.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
