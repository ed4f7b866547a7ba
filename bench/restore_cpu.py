"""CPU a decider spends restoring one kept state from its changelog, one-task against media.

``bench/decider_state.py`` times a real restore on the broker, of one-task workflows only. A
machine at its ceiling keeps media workflows (``docs/capacity.md``), whose snapshots are
larger and take longer to decode. This bench drives a decider on fake records (the inputs,
fake registry and drive loops of ``bench/decider_cpu.py``) through ``--workflows`` one-task
(``tiny``) or 1080p media (``media``) workflows to their end, writes every kept state's
changelog records as compaction leaves them (each partition's definition bundle once, then one
snapshot per workflow: ``runtime.outbox.snapshot``), then restores them the way the decider
does (``serialization.changelog.Changelog``: ``feed`` each record, then decode ``states``) and
reports process CPU per state for each half. The restore runs beside the decider that wrote
the records, still holding its states: a survivor of a failed machine restores that machine's
share while it holds its own, about as many (``docs/capacity.md``), and the garbage collector's
full passes walk both. The decoded states are kept, as the decider keeps them. (With the
writing decider gone and each decoded state dropped, collector running, 62-70 us a media state.)
Each restore runs twice a round, with the cycle collector paused as the decider pauses it since
2026-12-06 (``es_sched.tuning.collector_paused``: the figures the capacity model reads) and
running, in alternating order. Both kinds run in each round, so the media/tiny and
paused/running ratios are from one run; medians of ``--repeat`` rounds.

Rerun: `.venv/bin/python bench/restore_cpu.py [--workflows 3000 --repeat 5]`
(no stack needed; writes bench/results/restore_cpu.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import decider_cpu  # beside this file
from rich.console import Console
from rich.table import Table

from es_sched.domain import CORE
from es_sched.runtime.decider import Decider
from es_sched.runtime.outbox import Record, snapshot
from es_sched.serialization.changelog import Changelog
from es_sched.tuning import collector_paused

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("tiny", "media")
PARTITIONS = 12  # as the replay and capacity benches' histories


def compacted(kind: str, n: int, prefix: str) -> tuple[Decider, list[tuple[int, Record]]]:
    """A decider holding ``n`` finished workflows of ``kind``, and what a compacted changelog
    holds for them."""
    d = decider_cpu.new_decider()
    run = decider_cpu.media_run if kind == "media" else decider_cpu.one_run
    run(n, prefix, d)
    ended = sum(st.terminal for st in d.states.values())
    if ended != n:
        raise SystemExit(f"{ended} of {n} {kind} workflows ended")
    bundles: dict[int, set[str]] = {}
    out: list[tuple[int, Record]] = []
    for n_wf, st in enumerate(d.states.values()):
        partition = n_wf % PARTITIONS
        records, _ = snapshot(d.topics, st, partition, bundles.setdefault(partition, set()))
        out += [(partition, r) for r in records]
    return d, out


def restore(records: list[tuple[int, Record]], paused: bool) -> dict[str, float]:
    """Process CPU of reading (``feed``) and decoding the records, per restored state; with
    the cycle collector paused as the decider's restore pauses it, or running."""
    with collector_paused() if paused else nullcontext():
        t0 = time.process_time()
        logs: dict[int, Changelog] = {}
        for partition, r in records:
            logs.setdefault(partition, Changelog()).feed(r.key, r.value)
        t1 = time.process_time()
        kept = [st for log in logs.values() for st in log.states()]  # held, as the decider does
        t2 = time.process_time()
    states = len(kept)
    return {
        "states": states,
        "records_per_state": len(records) / states,
        "bytes_per_state": sum(len(r.value or b"") for _, r in records) / states,
        "feed_us_per_state": (t1 - t0) / states * 1e6,
        "decode_us_per_state": (t2 - t1) / states * 1e6,
        "us_per_state": (t2 - t0) / states * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/restore_cpu.json")
    opts = parser.parse_args()
    console = Console()
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    running: dict[str, list[dict[str, float]]] = {kind: [] for kind in KINDS}
    with console.status("restoring") as status:
        for k in range(opts.repeat):
            for kind in KINDS:
                status.update(f"round {k + 1} of {opts.repeat}: {kind}")
                # the decider that wrote them stays alive: a survivor restores a failed
                # machine's share while holding its own (docs/capacity.md), and the cycle
                # collector's full passes walk both
                d, records = compacted(kind, opts.workflows, f"restore{k}")
                for paused in (True, False) if k % 2 else (False, True):  # alternate the order
                    (runs if paused else running)[kind].append(restore(records, paused))
                del d, records
    medians, medians_running = (
        {kind: {f: statistics.median(r[f] for r in rs) for f in rs[0]} for kind, rs in got.items()}
        for got in (runs, running)
    )
    ratio = {f: round(medians["media"][f] / medians["tiny"][f], 2) for f in medians["tiny"]}
    us = {kind: (medians[kind]["us_per_state"], medians_running[kind]["us_per_state"])
          for kind in KINDS}  # fmt: skip
    paused_ratio = {kind: round(a / b, 3) for kind, (a, b) in us.items()}
    table = Table(title=f"restore CPU per kept state (median of {opts.repeat}, core {CORE})")
    for col in ("figure", *KINDS, "media / tiny"):
        table.add_column(col, justify="right")
    for f in medians["tiny"]:
        table.add_row(f, *(f"{medians[kind][f]:,.1f}" for kind in KINDS), f"{ratio[f]:.2f}")
    console.print(table)
    console.print(
        "with the collector running instead (as before 2026-12-06): "
        + ", ".join(f"{kind} {b:,.1f} us a state" for kind, (_, b) in us.items())
        + f"; paused / running {paused_ratio}"
    )
    result: dict[str, Any] = {
        "benchmark": "restore_cpu", "workflows": opts.workflows, "repeat": opts.repeat,
        "partitions": PARTITIONS, "core": CORE, "medians": medians,
        "ratio_media_over_tiny": ratio, "runs": runs,
        "collector_running": {"medians": medians_running, "runs": running},
        "ratio_paused_over_running": paused_ratio,
    }  # fmt: skip
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {opts.out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
