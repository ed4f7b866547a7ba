"""Benchmark the search projection's store against the engine in ES_SCHED_SEARCH_* (the local
OpenSearch by default): what the projector loop would send, without Kafka.

W workflows replay the golden ``media_480`` history (28 events each), interleaved as the log
would carry them; every 500 events make one ``Batch`` of the rows they changed (the newest row
per id) and one ``SearchStore.write``. Then a cold ``load`` of 500 stored workflows (mget, tasks
refresh, search), a full-text search and a status count. Indices live under their own prefix and
are deleted at the end. Prints figures, writes JSON (``--out``).
Rerun: `.venv/bin/python bench/projection_search.py [--workflows 2000] [--out FILE]`
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from es_sched.projections.search_store import SearchStore
from es_sched.projections.store import Batch
from es_sched.projections.views import Change, Row, Rows, apply
from es_sched.serialization import decode_event
from es_sched.settings import SearchSettings, load_settings

ROOT = Path(__file__).resolve().parents[1]
HISTORY = ROOT / "tests" / "fixtures" / "golden" / "media_480.events.jsonl"
PARTITIONS = 12
TOPIC = "bench-events"


def changes_of_one_workflow() -> list[Change]:
    """What each event of the history changes, folded once (the bench renames the rows)."""
    events = [decode_event(line) for line in HISTORY.read_bytes().splitlines()]
    rows: Rows | None = None
    changes: list[Change] = []
    for event in events:
        change = apply(rows, event)
        changes.append(change)
        if rows is None:
            assert change.workflow is not None, "the history starts with workflow.started"
            rows = Rows(change.workflow)
        else:
            rows.merge(change)
    return changes


def renamed(row: Row, n: int) -> Row:
    out = {**row, "workflow_id": f"{row['workflow_id']}-{n}"}
    if "task_id" in row:
        out["task_id"] = f"{row['task_id']}-{n}"
    return out


def batches(changes: list[Change], workflows: int, size: int) -> list[tuple[int, Batch]]:
    """Events of all workflows, each started a little after the previous one, in batches."""
    stream = sorted(
        ((n // 4 + i, n, i) for n in range(workflows) for i in range(len(changes))),
        key=lambda t: (t[0], t[1]),
    )
    offsets = [0] * PARTITIONS
    out: list[tuple[int, Batch]] = []
    for start in range(0, len(stream), size):
        batch = Batch()
        for _, n, i in stream[start : start + size]:
            change, partition = changes[i], n % PARTITIONS
            if change.workflow is not None:
                row = renamed(change.workflow, n)
                batch.workflows[row["workflow_id"]] = row
            for task in change.tasks.values():
                row = renamed(task, n)
                batch.tasks[row["task_id"]] = row
            offsets[partition] += 1
            batch.checkpoints[partition] = offsets[partition]
        out.append((len(stream[start : start + size]), batch))
    return out


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return (time.perf_counter() - started) * 1000, result


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[int(q * (len(ordered) - 1))], 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/projection_search.json")
    opts = parser.parse_args()
    base = load_settings()
    search = SearchSettings.model_validate(
        {**base.search.model_dump(), "index_prefix": f"bench-{uuid.uuid4().hex[:8]}"}
    )
    store = SearchStore(replace(base, search=search))
    work = batches(changes_of_one_workflow(), opts.workflows, opts.batch)
    rows = sum(len(b.workflows) + len(b.tasks) for _, b in work)
    try:
        store.ensure()
        write_ms: list[float] = []
        for _, batch in work:
            started = time.perf_counter()
            store.write(TOPIC, batch)
            write_ms.append((time.perf_counter() - started) * 1000)
        events = sum(n for n, _ in work)
        ids = [f"wf-1-{n}" for n in range(0, opts.workflows, max(1, opts.workflows // 500))]
        load_ms, loaded = timed(lambda: store.load(ids))
        assert len(loaded) == len(ids), "every stored workflow loads"
        store.refresh()
        search_ms, hits = timed(lambda: store.search_text("thumbnail", 50))
        count_ms, counts = timed(store.count_by_status)
        assert counts == {"COMPLETED": opts.workflows}, counts
    finally:
        store.drop()
        store.close()
    total_s = sum(write_ms) / 1000
    result: dict[str, Any] = {
        "benchmark": "projection_search",
        "machine": {"python": platform.python_version(), "engine": search.flavor},
        "workflows": opts.workflows,
        "events": events,
        "batches": len(work),
        "rows_written": rows,
        "events_per_s": round(events / total_s),
        "rows_per_s": round(rows / total_s),
        "write_ms": {
            "p50": round(statistics.median(write_ms), 1),
            "p95": pct(write_ms, 0.95),
            "max": round(max(write_ms), 1),
        },
        "load_ms": {"workflows": len(ids), "ms": round(load_ms, 1)},
        "search_text_ms": {"hits": len(hits), "ms": round(search_ms, 1)},
        "count_by_status_ms": round(count_ms, 1),
    }
    table = Table(title=f"search projection store, {opts.workflows} workflows ({search.flavor})")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in ("events", "rows_written", "events_per_s", "rows_per_s"):
        table.add_row(key, str(result[key]))
    for key, value in result["write_ms"].items():
        table.add_row(f"write ms {key}", str(value))
    table.add_row(f"load {len(ids)} workflows ms", str(round(load_ms, 1)))
    table.add_row("search_text ms", str(round(search_ms, 1)))
    Console().print(table)
    opts.out.parent.mkdir(parents=True, exist_ok=True)
    opts.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
