"""The capacity model (ADR 33): workflows/s for 1, 10 and 100 machines, from measured rates.

Inputs are the JSON files under bench/results/current/ (the per-process rates measured on this
machine) and a few outside figures (``OUTSIDE``, each with its source in docs/capacity.md).
Nothing is measured here: rerun the benches, then this, and docs/capacity.md's generated block
(between its ``capacity:begin`` / ``capacity:end`` markers) is rewritten from the new figures.

The model, one rule per limit (``ceilings``), each a workflows/s ceiling for M machines:
- cpu: each machine is one of these (``cores``), running its share of every role and one
  broker, as the e2e bench does: M * cores * 1000 / cpu_ms_per_workflow;
- broker: records written per workflow, times the replication factor, against the brokers'
  record rate (one broker per machine);
- transactions: decider transactions per workflow (inputs per workflow / inputs per
  transaction) against the coordinators' rate (one per broker);
- partitions: a partition is decided by one process, so the decider's parallelism is at most
  the partition count; the cluster's replica count must stay under the per-broker and
  per-cluster guidance;
- postgres: one primary takes every projected row (events * rows per event);
- search: indexing scales with search nodes (one per ``machines_per_search_node``);
The first limit at a scale is the smallest ceiling; the restore time after a failure
(``restore_s``) is reported beside it, since it bounds recovery, not throughput.

Rerun: `.venv/bin/python bench/capacity.py` (writes bench/results/current/capacity.json and the
doc).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "current"
DOC = ROOT / "docs" / "capacity.md"
BEGIN, END = "<!-- capacity:begin -->", "<!-- capacity:end -->"
SCALES = (1, 10, 100)

# Outside figures and assumptions (sources in docs/capacity.md, "Outside figures").
OUTSIDE: dict[str, float] = {
    "replication_factor": 3,  # production topics; the local broker runs 1
    "partitions_per_broker": 4_000,  # replicas per broker, ZooKeeper-era guidance (KRaft: more)
    "partitions_per_cluster": 200_000,  # same guidance for a cluster
    "txn_per_s_per_broker": 2_000,  # ASSUMPTION: coordinator commits/s per broker, not measured
    "pg_row_writes_per_s": 100_000,  # one 16-vCPU NVMe primary, batched upserts (TPC-B x rows)
    "pg_rows_per_event": 2,  # archive row + workflow/task upsert (upper bound: batches dedupe)
    "search_docs_per_s_per_node": 20_000,  # ASSUMPTION: small documents, bulk indexing
    "search_docs_per_event": 2,  # workflow document + task document
    "machines_per_search_node": 4,
    "decider_partitions": 64,  # partitions per workflow-keyed topic at 10+ machines
    # commands, task-results, events, changelog, timers, 4 retry tiers, ready
    "workflow_keyed_topics": 10,
    "retain_finished_s": 86_400,  # ES_SCHED_RUN_RETAIN_FINISHED_S default (ADR 18)
    # issue 15's estimate of every process's CPU per media workflow; replaced by
    # bench/results/current/cpu_split_saturated.json (bench/cpu_split.py near the maximum) when
    # present
    "cpu_ms_per_workflow": 35,
    "broker_records_per_s": 35_000,  # issue 15: transactional consume->produce loop, batches of 500
    "dispatcher_tasks_per_s": 4_000,  # replaced by bench/results/current/dispatch.json when present
}


@dataclass(frozen=True)
class Measured:
    """Per-process rates and per-workflow costs, from bench/results/current (or OUTSIDE
    defaults)."""

    cores: int
    decider_inputs_per_s: float  # one decider process on one core
    inputs_per_workflow: float
    events_per_workflow: float
    tasks_per_workflow: float
    inputs_per_transaction: float
    dispatcher_tasks_per_s: float
    pg_events_per_s: float  # one projector process
    search_events_per_s: float
    restore_records_per_s: float  # changelog restore, one decider
    records_per_state: float  # changelog records per held state at restore
    kib_per_state: float  # decider memory per held state
    cpu_ms_per_workflow: float
    broker_records_per_s: float
    e2e_workflows_per_s: float  # the one-machine measurement the model is checked against
    side_by_side_workflows_per_s: float | None
    sources: tuple[str, ...]
    # Measured per workflow when their files exist (records.json, cpu_split_saturated.json):
    # the records it leaves on the topics (records_per_workflow's estimate stands in without).
    records_per_workflow_measured: float | None = None
    # CPU a kept media state's restore takes beyond a one-task state's (restore_cpu.json, both
    # in one run); decider_state.json restores one-task states only.
    restore_media_extra_us: float = 0.0


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def measured(outside: dict[str, float] = OUTSIDE) -> Measured:
    """Read the figures; a missing optional file falls back to its OUTSIDE parameter."""
    dec, core, e2e = _load("decider.json"), _load("core.json"), _load("e2e.json")
    proj, state = _load("projections.json"), _load("decider_state.json")
    assert dec and core and e2e and proj and state, "run the benches first (make bench)"
    used = ["decider.json", "core.json", "e2e.json", "projections.json", "decider_state.json"]
    rates = dec["inputs_per_second"]
    kept = next(r for r in state["runs"] if r["mode"] == "kept")
    restore = kept["restore"]["runs"]
    points = kept["points"]
    dispatcher = outside["dispatcher_tasks_per_s"]
    if (dispatch := _load("dispatch.json")) is not None:
        run = dispatch["median"]["dispatcher"]  # "this" alone; "after" in a --compare run
        dispatcher = (run.get("this") or run["after"])["tasks_per_second"]
        used.append("dispatch.json")
    broker = outside["broker_records_per_s"]
    if (limit := _load("kafka_limit.json")) is not None:
        broker = max(v["median"] for v in limit.values() if isinstance(v, dict) and "median" in v)
        used.append("kafka_limit.json")
    records = None
    if (counted := _load("records.json")) is not None:  # the newest checkout's, if an A/B
        records = float(counted["medians"]["after"]["all topics"]["records"])
        used.append("records.json")
    cpu_ms = outside["cpu_ms_per_workflow"]
    if (split := _load("cpu_split_saturated.json")) is not None:
        cpu_ms = float(split["total"]["ms_per_workflow"])  # all of it, idle included
        used.append("cpu_split_saturated.json")
    kib = (points[-1]["rss_mib"] - points[0]["rss_mib"]) * 1024
    kib /= points[-1]["states_held"] - points[0]["states_held"]  # one-task states, by RSS
    if (memory := _load("decider_memory.json")) is not None:
        # The model's workflow is the media DAG, whose kept state is about six one-task states
        # (bench/decider_memory.py, by tracemalloc: within 10 % of the RSS slope for one task).
        kib = float(memory["kib_per_workflow_median"]["after"]["media"])
        used.append("decider_memory.json")
    extra = 0.0
    if (restored := _load("restore_cpu.json")) is not None:
        cost = {kind: float(v["us_per_state"]) for kind, v in restored["medians"].items()}
        extra = cost["media"] - cost["tiny"]
        used.append("restore_cpu.json")
    side = None
    if (sbs := _load("side_by_side.json")) is not None:
        side = float(sbs["median"]["systems"]["es-sched"]["max_per_second"])
        used.append("side_by_side.json")
    med = e2e["median"]
    return Measured(
        cores=int(e2e["machine"]["cores"]),
        decider_inputs_per_s=statistics.mean(rates.values()),
        inputs_per_workflow=float(core["decide"]["inputs"]),
        events_per_workflow=float(core["fold"]["events_per_history"]),
        tasks_per_workflow=med["tasks_per_second"] / med["workflows_per_second"],
        inputs_per_transaction=float(dec["mean_inputs_per_transaction"]),
        dispatcher_tasks_per_s=float(dispatcher),
        pg_events_per_s=_projection_rate(proj, "pg"),
        search_events_per_s=_projection_rate(proj, "search"),
        restore_records_per_s=statistics.median(r["records"] / r["seconds"] for r in restore),
        records_per_state=restore[0]["records"] / restore[0]["live"],
        kib_per_state=kib,
        cpu_ms_per_workflow=cpu_ms,
        broker_records_per_s=float(broker),
        e2e_workflows_per_s=float(med["workflows_per_second"]),
        side_by_side_workflows_per_s=side,
        sources=tuple(used),
        records_per_workflow_measured=records,
        restore_media_extra_us=extra,
    )


def _projection_rate(proj: dict[str, Any], kind: str) -> float:
    """events/s of one projection: a plain run's median, or this code's in a --before run."""
    if "median" in proj:
        return float(proj["median"][f"{kind}_events_per_second"])
    return float(proj["median_events_per_second"]["after"][kind])


def records_per_workflow(m: Measured) -> float:
    """Records a workflow writes: as counted on the topics (bench/records.py) when measured,
    else estimated: its inputs, its events, a changelog snapshot per input at worst (one per
    transaction that changed it), and per task a ready and an assignment."""
    if m.records_per_workflow_measured is not None:
        return m.records_per_workflow_measured
    return 2 * m.inputs_per_workflow + m.events_per_workflow + 2 * m.tasks_per_workflow


def ceilings(m: Measured, machines: int, o: dict[str, float] = OUTSIDE) -> dict[str, float]:
    """workflows/s each limit allows with ``machines`` machines (one broker each)."""
    brokers = machines
    partitions = o["decider_partitions"] if machines > 1 else 12
    replicas = partitions * o["workflow_keyed_topics"] * min(o["replication_factor"], brokers)
    part_limit = min(brokers * o["partitions_per_broker"], o["partitions_per_cluster"])
    return {
        "cpu": machines * m.cores * 1000 / m.cpu_ms_per_workflow,
        "broker": brokers
        * m.broker_records_per_s
        / (records_per_workflow(m) * min(o["replication_factor"], brokers)),
        "transactions": brokers
        * o["txn_per_s_per_broker"]
        / (m.inputs_per_workflow / m.inputs_per_transaction),
        # one process per partition at most; a partition count past the guidance is refused
        "partitions": (partitions * m.decider_inputs_per_s / m.inputs_per_workflow)
        if replicas <= part_limit
        else 0.0,
        "postgres": o["pg_row_writes_per_s"] / (m.events_per_workflow * o["pg_rows_per_event"]),
        "search": max(1, math.ceil(machines / o["machines_per_search_node"]))
        * o["search_docs_per_s_per_node"]
        / (m.events_per_workflow * o["search_docs_per_event"]),
    }


def worst_txn_per_broker(m: Measured) -> float:
    """Transactions/s per broker if every core runs a decider loop committing as often as it
    can: a loop's commit cycle (inputs per transaction / inputs per second, measured at
    saturation) does not shrink under a lighter load, its batches do. One broker per machine."""
    return m.cores * m.decider_inputs_per_s / m.inputs_per_transaction


def restore_s(
    m: Measured, workflows_per_s: float, machines: int, o: dict[str, float] = OUTSIDE
) -> float:
    """Seconds to restore one failed machine's decider state on the survivors: the states it
    held (its share of the rate times how long a state stays: the retention) in records, at
    the measured restore rate of one decider (read and kept, one-task states), plus what
    decoding a media state takes beyond a one-task one."""
    held = workflows_per_s / machines * o["retain_finished_s"]
    per_state = m.records_per_state / m.restore_records_per_s + m.restore_media_extra_us / 1e6
    return held * per_state


WRITE_PATH = ("cpu", "broker", "transactions", "partitions")
READ_SIDE = ("postgres", "search")


def project(m: Measured, o: dict[str, float] = OUTSIDE) -> list[dict[str, Any]]:
    """Per scale: the write path's rate (its smallest ceiling), how far the read models keep
    up (a read-side limit makes them lag; it does not stop the work), and the first limit."""
    rows = []
    for machines in SCALES:
        limits = ceilings(m, machines, o)
        order = sorted(limits, key=lambda k: limits[k])
        write = min(limits[k] for k in WRITE_PATH)
        read = min(limits[k] for k in READ_SIDE)
        rate = min(write, read)
        rows.append(
            {
                "machines": machines,
                "write_path_workflows_per_second": round(write, 1),
                "read_models_keep_up_to": round(read, 1),
                "first_limit": order[0],
                "next_limit": order[1],
                "ceilings": {k: round(v, 1) for k, v in limits.items()},
                "decider_processes_needed": math.ceil(
                    write * m.inputs_per_workflow / m.decider_inputs_per_s
                ),
                "transactions_per_second": round(
                    write * m.inputs_per_workflow / m.inputs_per_transaction, 1
                ),
                "worst_txn_per_s_per_broker": round(worst_txn_per_broker(m), 1),
                "pg_events_per_second": round(rate * m.events_per_workflow),
                "pg_projectors_needed": math.ceil(rate * m.events_per_workflow / m.pg_events_per_s),
                "restore_after_failure_s": round(restore_s(m, write, machines, o)),
                "decider_state_gib_per_machine": round(
                    write / machines * o["retain_finished_s"] * m.kib_per_state / 2**20, 1
                ),
            }
        )
    return rows


def one_machine_check(m: Measured) -> dict[str, Any]:
    """The model's one-machine prediction against the measurements, error in %."""
    predicted = ceilings(m, 1)["cpu"]

    def error(measured: float) -> float:
        return round(100 * (predicted / measured - 1), 1)

    out: dict[str, Any] = {
        "predicted_workflows_per_second": round(predicted, 1),
        "e2e_measured": m.e2e_workflows_per_s,
        "e2e_error_percent": error(m.e2e_workflows_per_s),
    }
    if m.side_by_side_workflows_per_s:
        out["side_by_side_measured"] = m.side_by_side_workflows_per_s
        out["side_by_side_error_percent"] = error(m.side_by_side_workflows_per_s)
    # The decider alone, on one core: the ceiling if it were the only cost.
    out["decider_one_core_workflows_per_second"] = round(
        m.decider_inputs_per_s / m.inputs_per_workflow, 1
    )
    return out


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"
        return f"{v:,}" if isinstance(v, int) else str(v)

    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]


def render(m: Measured, rows: list[dict[str, Any]], check: dict[str, Any]) -> str:
    """The generated block of docs/capacity.md."""
    out = [
        f"Generated by `bench/capacity.py` from {', '.join(m.sources)} (OUTSIDE parameters "
        "stand in for absent files).",
        "",
        "### Measured inputs (this machine)",
        "",
    ]
    values = [[k, v] for k, v in asdict(m).items() if k != "sources"]
    out += _table(
        ["figure", "value"], [*values, ["records_per_workflow (used)", records_per_workflow(m)]]
    )
    out += ["", "### One-machine check", ""]
    checks = [
        [
            f"model: cpu ceiling ({m.cores} cores, {m.cpu_ms_per_workflow:g} ms per workflow)",
            check["predicted_workflows_per_second"],
            "",
        ],
        [
            "measured: bench/results/current/e2e.json (its DAG takes the 6-task default branch, "
            "lighter than the 1080p DAG of the CPU figure)",
            check["e2e_measured"],
            f"{check['e2e_error_percent']:+}%",
        ],
    ]
    if "side_by_side_measured" in check:
        checks.append(
            [
                "measured: bench/results/current/side_by_side.json (burst max)",
                check["side_by_side_measured"],
                f"{check['side_by_side_error_percent']:+}%",
            ]
        )
    checks.append(
        [
            "the decider alone on one core (no other cost)",
            check["decider_one_core_workflows_per_second"],
            "",
        ]
    )
    out += _table(["", "workflows/s", "model error"], checks)
    if (scale := _load("scaleout.json")) is not None:
        d, e = scale["decider_inputs_per_second"], scale["e2e_workflows_per_second"]
        out += ["", "### 1 vs 2 decider processes here (bench/results/current/scaleout.json)", ""]
        out += _table(
            ["figure", "1 process", "2 processes", "2/1", "runs (1 | 2)"],
            [
                [
                    label,
                    x["median"]["1"],
                    x["median"]["2"],
                    x["ratio_2_over_1"],
                    f"{x['per_run']['1']} / {x['per_run']['2']}",
                ]
                for label, x in (("decider inputs/s", d), ("e2e workflows/s", e))
            ],
        )
    out += ["", "### Projection (workflows/s ceilings per limit)", ""]
    names = list(rows[0]["ceilings"])
    out += _table(
        ["machines", "write path", "read models keep up to", "first limit", "next", *names],
        [
            [
                r["machines"],
                r["write_path_workflows_per_second"],
                r["read_models_keep_up_to"],
                r["first_limit"],
                r["next_limit"],
                *r["ceilings"].values(),
            ]
            for r in rows
        ],
    )
    out += ["", "### What the write path's rate needs at each scale", ""]
    out += _table(
        [
            "machines",
            "decider processes",
            "decider txn/s",
            "txn/s per broker, worst",
            "PG events/s (projectors)",
            "restore of a failed machine's decider state",
            "decider state per machine (GiB)",
        ],
        [
            [
                r["machines"],
                r["decider_processes_needed"],
                r["transactions_per_second"],
                r["worst_txn_per_s_per_broker"],
                f"{r['pg_events_per_second']:,} ({r['pg_projectors_needed']})",
                f"{r['restore_after_failure_s']:,} s",
                r["decider_state_gib_per_machine"],
            ]
            for r in rows
        ],
    )
    out += ["", "Parameters: " + ", ".join(f"`{k}`={v:,g}" for k, v in OUTSIDE.items())]
    return "\n".join(out)


def write_doc(block: str, doc: Path = DOC) -> None:
    text = doc.read_text()
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{block}\n{END}{tail}")


def main() -> None:
    m = measured()
    rows, check = project(m), one_machine_check(m)
    result = {
        "benchmark": "capacity",
        "measured": asdict(m),
        "outside": OUTSIDE,
        "one_machine_check": check,
        "projection": rows,
    }
    (RESULTS / "capacity.json").write_text(json.dumps(result, indent=2) + "\n")
    block = render(m, rows, check)
    write_doc(block)
    print(block)


if __name__ == "__main__":
    main()
