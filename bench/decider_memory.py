"""Memory a decider keeps per finished workflow, by allocation site (``tracemalloc``).

``bench/decider_state.py`` reads the RSS of a real decider on the broker; RSS also holds what
the allocator has not given back, and its slope moves by tens of bytes a workflow between runs.
This bench counts the bytes Python still holds: a decider on fake records (the inputs, fake
registry and drive loops of ``bench/decider_cpu.py``) runs ``--workflows`` one-task workflows
(``tiny``) or 1080p media workflows (``media``) to their end, every finished state kept (no
retirement, ADR 18); after a full collection, the bytes still traced since just after the
decider was built, divided by the workflows, and the allocation sites holding most of them.
The fake registry gives every workflow the media TaskDefs (seven, with the one-task
workflow's), so ``tiny`` holds TaskDefs a real one-task workflow would not.

With ``--before TREE`` (another checkout with a built core, e.g. ``git worktree add /tmp/base
HEAD~1`` then ``python tools/build_core.py`` there) each round runs once on that tree's
es_sched and once on this one, in child processes, as ``bench/decider_cpu.py`` does; medians
of ``--repeat`` rounds and the after/before ratios go to ``--out``
(default bench/results/current/decider_memory.json).

Rerun: `.venv/bin/python bench/decider_memory.py [--workflows 3000 --repeat 3] [--before TREE]`
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import decider_cpu  # beside this file; it imports es_sched, from PYTHONPATH in a child

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("tiny", "media")


def measure(kind: str, n: int) -> dict[str, Any]:
    """One decider, ``n`` workflows of ``kind`` run to their end; bytes kept per workflow."""
    d = decider_cpu.new_decider()
    gc.collect()
    tracemalloc.start()
    run = decider_cpu.media_run if kind == "media" else decider_cpu.one_run
    run(n, f"mem-{kind}", d)
    ended = sum(st.terminal for st in d.states.values())
    if ended != n:
        raise SystemExit(f"{ended} of {n} {kind} workflows ended")
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    sites = tracemalloc.take_snapshot().statistics("lineno")[:8]
    tracemalloc.stop()
    top = [
        {
            "site": _short(s.traceback[0].filename, s.traceback[0].lineno),
            "bytes_per_workflow": round(s.size / n, 1),
            "objects_per_workflow": round(s.count / n, 2),
        }
        for s in sites
    ]
    return {"kib_per_workflow": round(held / 1024 / n, 3), "top": top}


def _short(filename: str, line: int) -> str:
    parts = Path(filename).parts
    tail = parts[parts.index("es_sched") :] if "es_sched" in parts else parts[-1:]
    return f"{'/'.join(tail)}:{line}"


def child(n: int) -> None:
    import es_sched  # noqa: PLC0415
    import es_sched.domain  # noqa: PLC0415

    code = str(Path(es_sched.__file__).resolve().parents[1])
    core = getattr(es_sched.domain, "CORE", "pure")  # ADR 51: compiled or Python
    figures = {kind: measure(kind, n) for kind in KINDS}
    print(json.dumps({"code": code, "core": core, "figures": figures}))


def rounds(trees: dict[str, Path], n: int, repeat: int) -> dict[str, list[dict[str, Any]]]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--child", "--workflows", str(n)]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in trees}
    for k in range(repeat):
        for side, tree in trees.items():
            doc = decider_cpu.child_run(argv, side, tree)
            doc["figures"]["core"] = doc["core"]
            runs[side].append(doc["figures"])
            kib = {kind: doc["figures"][kind]["kib_per_workflow"] for kind in KINDS}
            print(f"round {k + 1} {side:6s} {doc['core']:8s} KiB per finished workflow {kib}")
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench/results/current/decider_memory.json"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.workflows)
        return
    trees = (
        {"after": ROOT} if opts.before is None else {"before": opts.before.resolve(), "after": ROOT}
    )
    runs = rounds(trees, opts.workflows, opts.repeat)
    medians = {
        side: {kind: statistics.median(r[kind]["kib_per_workflow"] for r in rs) for kind in KINDS}
        for side, rs in runs.items()
    }
    result: dict[str, Any] = {
        "benchmark": "decider_memory",
        "workflows": opts.workflows,
        "repeat": opts.repeat,
        "trees": {side: str(tree) for side, tree in trees.items()},
        "kib_per_workflow_median": medians,
        "top_sites_last_round": {
            side: {k: rs[-1][k]["top"] for k in KINDS} for side, rs in runs.items()
        },
        "core": {side: sorted({r["core"] for r in rs}) for side, rs in runs.items()},
    }
    for side, kib in medians.items():
        print(
            f"{side:7s}"
            + "  ".join(f"{k} {v:.2f} KiB" for k, v in kib.items())
            + f"  (median of {opts.repeat}, per finished workflow kept)"
        )
    if "before" in medians:
        result["ratio_after_over_before"] = {
            k: round(medians["after"][k] / medians["before"][k], 3) for k in KINDS
        }
        print("after / before:", result["ratio_after_over_before"])
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {opts.out.relative_to(ROOT) if opts.out.is_relative_to(ROOT) else opts.out}")


if __name__ == "__main__":
    main()
