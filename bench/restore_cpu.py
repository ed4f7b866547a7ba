"""CPU a decider spends restoring one kept state from its changelog, one-task against media.

``bench/decider_state.py`` times a real restore on the broker, of one-task workflows only. A
machine at its ceiling keeps media workflows (``docs/capacity.md``), whose snapshots are
larger and take longer to decode. This bench drives a decider on fake records (the inputs,
fake registry and drive loops of ``bench/decider_cpu.py``) through ``--workflows`` one-task
(``tiny``) or 1080p media (``media``) workflows to their end, writes every kept state's
changelog records as compaction leaves them (each partition's definition bundle once, then one
snapshot per workflow: ``runtime.outbox.snapshot``), then restores them the way the decider
does (``serialization.changelog.Changelog``: ``feed`` each record with its headers, then
``kept``: since ADR 52 an ended workflow's snapshot is kept undecoded, and every workflow here
ended) and reports process CPU per state for each half. The restore runs beside the decider
that wrote the records, still holding its states: a survivor of a failed machine restores that
machine's share while it holds its own, about as many (``docs/capacity.md``), and the garbage
collector's full passes walk both. The decoded states are kept, as the decider keeps them. (With the
writing decider gone and each decoded state dropped, collector running, 62-70 us a media state.)
Each restore runs three times a round, in an order rotated each round: as the decider restores
(resting: the figures the capacity model reads), every snapshot decoded with the cycle
collector paused (``es_sched.tuning.collector_paused``, the decider before ADR 52), and decoded
with the collector running (before 2026-12-06). Both kinds run in each round, so the media/tiny
and resting/decoded ratios are from one run; medians of ``--repeat`` rounds. A pass of its own
counts the memory a restored state holds (tracemalloc), resting and decoded.

Rerun: `.venv/bin/python bench/restore_cpu.py [--workflows 3000 --repeat 5]`
(no stack needed; writes bench/results/current/restore_cpu.json)
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
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


def restore(records: list[tuple[int, Record]], mode: str) -> dict[str, float]:
    """Process CPU of reading (``feed``) and keeping the records, per restored state. ``mode``:
    "resting", as the decider restores since ADR 52 (headers read, an ended workflow's snapshot
    kept undecoded: ``Changelog.kept``); "decoded", every snapshot decoded with the collector
    paused (the decider from the morning of 2026-12-06 to ADR 52); "running", decoded with the
    collector running (before that)."""
    headers = mode == "resting"
    with nullcontext() if mode == "running" else collector_paused():
        t0 = time.process_time()
        logs: dict[int, Changelog] = {}
        for partition, r in records:
            logs.setdefault(partition, Changelog()).feed(
                r.key, r.value, r.headers if headers else None
            )
        t1 = time.process_time()
        kept = [st for log in logs.values() for st in (log.kept() if headers else log.states())]
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


def memory(records: list[tuple[int, Record]], mode: str) -> float:
    """KiB a restored state holds (tracemalloc, after a full collection), "resting" or
    "decoded"; each record's bytes copied first, as a consumer hands the decider new ones."""
    gc.collect()
    tracemalloc.start()
    try:
        base, headers = tracemalloc.get_traced_memory()[0], mode == "resting"
        logs: dict[int, Changelog] = {}
        for partition, r in records:
            value = None if r.value is None else bytes(bytearray(r.value))
            logs.setdefault(partition, Changelog()).feed(
                r.key, value, r.headers if headers else None
            )
        kept = [st for log in logs.values() for st in (log.kept() if headers else log.states())]
        del logs
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - base) / len(kept) / 1024
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/current/restore_cpu.json")
    opts = parser.parse_args()
    console = Console()
    modes = ("resting", "decoded", "running")
    runs = {mode: {kind: list[dict[str, float]]() for kind in KINDS} for mode in modes}
    kib: dict[str, dict[str, list[float]]] = {m: {k: [] for k in KINDS} for m in modes[:2]}
    with console.status("restoring") as status:
        for k in range(opts.repeat):
            for kind in KINDS:
                status.update(f"round {k + 1} of {opts.repeat}: {kind}")
                # the decider that wrote them stays alive: a survivor restores a failed
                # machine's share while holding its own (docs/capacity.md), and the cycle
                # collector's full passes walk both
                d, records = compacted(kind, opts.workflows, f"restore{k}")
                for mode in modes[k % 3 :] + modes[: k % 3]:  # rotate the order each round
                    runs[mode][kind].append(restore(records, mode))
                for mode in modes[:2]:  # held memory: a pass of its own (tracemalloc is slow)
                    kib[mode][kind].append(memory(records, mode))
                del d, records
    medians = {
        mode: {
            kind: {f: statistics.median(r[f] for r in rs) for f in rs[0]}
            for kind, rs in got.items()
        }
        for mode, got in runs.items()
    }
    now = medians["resting"]
    ratio = {f: round(now["media"][f] / now["tiny"][f], 2) for f in now["tiny"]}
    us = {mode: {kind: medians[mode][kind]["us_per_state"] for kind in KINDS} for mode in modes}
    over = {
        mode: {kind: round(us["resting"][kind] / us[mode][kind], 3) for kind in KINDS}
        for mode in ("decoded", "running")
    }
    table = Table(
        title=f"restore CPU per kept state, as the decider restores (ADR 52; median "
        f"of {opts.repeat}, core {CORE})"
    )
    for col in ("figure", *KINDS, "media / tiny"):
        table.add_column(col, justify="right")
    for f in now["tiny"]:
        table.add_row(f, *(f"{now[kind][f]:,.1f}" for kind in KINDS), f"{ratio[f]:.2f}")
    console.print(table)
    held = {
        m: {k: round(statistics.median(v), 2) for k, v in got.items()} for m, got in kib.items()
    }
    console.print(
        f"KiB held a restored state (tracemalloc): resting {held['resting']}, "
        f"decoded {held['decoded']}"
    )
    for mode, what in (
        ("decoded", "every state decoded, collector paused (before ADR 52)"),
        ("running", "decoded, collector running (before 2026-12-06)"),
    ):
        console.print(
            f"{what}: "
            + ", ".join(f"{kind} {us[mode][kind]:,.1f} us a state" for kind in KINDS)
            + f"; resting / this {over[mode]}"
        )
    result: dict[str, Any] = {
        "benchmark": "restore_cpu",
        "workflows": opts.workflows,
        "repeat": opts.repeat,
        "partitions": PARTITIONS,
        "core": CORE,
        "medians": now,
        "ratio_media_over_tiny": ratio,
        "runs": runs["resting"],
        "decoded_collector_paused": {"medians": medians["decoded"], "runs": runs["decoded"]},
        "collector_running": {"medians": medians["running"], "runs": runs["running"]},
        "ratio_resting_over": over,
        "kib_held_per_state": held,
    }
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {opts.out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
