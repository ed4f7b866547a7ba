"""docs/performance.md, generated from bench/results/current/: every figure beside its file.

Input: the JSON files the benches write under bench/results/current/ (bench/README.md says which
bench writes which). Output: docs/performance.md, a headline table and one table per area, each
naming the file its figures come from and the command that reruns it, then the method and what each
file records of its machine. Nothing is measured here and nothing depends on when or where this
runs: the same files give the same page, byte for byte (tests/unit/bench/test_performance_page.py
compares the committed page with what this makes of the committed files). Every JSON file of
current/ needs an entry in ``SOURCES`` (its rerun command, how to count its runs): one without stops
the page, so a file nobody indexed is not left unread. A section whose file is absent is left out. A
before/after file (a bench run with ``--before`` or ``--compare``) is read for its ``after`` side,
the code that wrote it. The plots are the PNGs the benches draw beside their JSON
(bench/plot_png.py: matplotlib is not in the venv); the page links them and draws none.

Rerun: `.venv/bin/python bench/report.py` after any bench (and after bench/capacity.py, which
reads the same files).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import peer_stats

ROOT = Path(__file__).resolve().parents[1]
CURRENT = ROOT / "bench" / "results" / "current"
PAGE = ROOT / "docs" / "performance.md"
LINK = "../bench/results/current/"  # from docs/ to the files
PY = "PYTHONPATH=. .venv/bin/python"

Doc = dict[str, Any]
Results = dict[str, Doc]


@dataclass(frozen=True)
class Source:
    """A file of current/: the command that makes it again, with the arguments of the run it
    holds (the benches' docstrings explain them), and how many runs its medians are of, as the
    file itself records it."""

    rerun: str
    runs: Callable[[Doc], str]
    note: str = ""

    def how(self) -> str:
        """The command as the page prints it, with its note."""
        return f"`{self.rerun}`" + (f" ({self.note})" if self.note else "")


def _key(key: str, unit: str) -> Callable[[Doc], str]:
    return lambda d: f"{d[key]}{unit}"


def _first_list(key: str, unit: str) -> Callable[[Doc], str]:
    """The length of the first list under ``key`` (the list, or one in nested dicts)."""

    def runs(d: Doc) -> str:
        v = d[key]
        while isinstance(v, dict):
            v = next(iter(v.values()))
        return f"{len(v)}{unit}"

    return runs


def _windows_by_round(d: Doc) -> str:
    each, per_round = len(next(iter(d["windows"].values()))), d["runs_per_round"]
    return f"{each // per_round} rounds of {per_round} windows"


# TREE is an earlier checkout (`git worktree add /tmp/before REV`), P the topic prefix of a
# history an earlier run left.
SOURCES: dict[str, Source] = {
    "api.json": Source(
        f"{PY} bench/api.py --workflows 100000 --runs 3 --clients 50 --seconds 10 "
        "--api-workers 1,2",
        lambda d: f"{d['load']['runs']} rounds",
    ),
    "api_routes.json": Source(
        f"{PY} bench/api.py --routes --workflows 100000 --runs 3 --seconds 4 --idle-seconds 6 "
        "--warmup 0 --clients 50 --before TREE --before-busy-runs 1",
        lambda d: f"{d['load']['runs']} runs ({d['load']['before_busy_runs']} of before's busy)",
    ),
    "api_split.json": Source(
        f"{PY} bench/api_split.py --trials 24 --clients 50", _first_list("splits", " trials")
    ),
    "api_writes.json": Source(
        f"{PY} bench/api.py --writes-only --runs 3 --writes 200",
        lambda d: f"{d['runs']} rounds",
    ),
    "api_workers.json": Source(
        f"{PY} bench/api_workers.py --tasks 600 --rounds 3 --api-workers 1 2 --routes lean fastapi",
        lambda d: f"{d['results'][0]['rounds']} rounds",
    ),
    "broker_settings.json": Source(
        f"{PY} bench/broker_settings.py --rate 26 --seconds 20 --runs 3 --rounds 2",
        _windows_by_round,
    ),
    "capacity.json": Source(f"{PY} bench/capacity.py", lambda d: "computed from the others"),
    "client_requests.json": Source(
        f"{PY} bench/client_requests.py --rate 26 --seconds 20 --runs 3 --partitions 12",
        _first_list("windows", " windows"),
    ),
    "cost.json": Source(
        f"{PY} bench/cost.py --videos 6 --evaluations 3",
        lambda d: f"1 learning + {d['runs']} evaluation passes",
        "ffmpeg and ffprobe, no stack",
    ),
    "core.json": Source(
        f"{PY} bench/core.py --rounds 5", lambda d: f"{len(d['fold']['rounds'])} rounds"
    ),
    "cpu_split.json": Source(
        f"{PY} bench/cpu_split.py --rate 26 --seconds 20 --runs 3",
        _first_list("windows", " windows"),
    ),
    "cpu_split_saturated.json": Source(
        f"{PY} bench/cpu_split.py --rate 90 --seconds 15 --runs 3 "
        "--out bench/results/current/cpu_split_saturated.json",
        _first_list("windows", " windows"),
    ),
    "decider.json": Source(
        f"{PY} bench/decider_ab.py --before TREE --inputs 20000",
        lambda d: f"{d.get('median_of', 1)} runs",
        "bench/decider.py alone writes the same figures without the before side",
    ),
    "decider_cpu_by_input.json": Source(
        f"ES_SCHED_CORE=compiled {PY} bench/decider_cpu.py --workflows 2000 --out A; "
        f"ES_SCHED_CORE=compiled {PY} bench/decider_cpu.py --media --workflows 1500 --out B",
        lambda d: "not recorded",
        "the file holds A under one_task, B under media",
    ),
    "decider_memory.json": Source(
        f"{PY} bench/decider_memory.py --workflows 3000 --repeat 3", _key("repeat", " rounds")
    ),
    "decider_state.json": Source(
        f"{PY} bench/decider_state.py --checkpoints 10000,50000,100000 --live 5000",
        lambda d: f"1 run a mode, {len(d['runs'][0]['restore']['runs'])} restores",
    ),
    "dispatch-latency.json": Source(
        f"{PY} bench/dispatch.py --only latency --runs 3 --tasks 5000 --compare TREE",
        _key("runs", " runs"),
    ),
    "dispatch.json": Source(f"{PY} bench/dispatch.py --runs 3 --tasks 4000", _key("runs", " runs")),
    "dispatch_placement.json": Source(
        f"{PY} bench/dispatch_placement.py --decisions 20000",
        lambda d: f"{d['decisions']:,} decisions",
    ),
    "e2e.json": Source(f"{PY} bench/e2e.py --runs 3 --workflows 1000", _key("runs", " runs")),
    "sla.json": Source(f"{PY} bench/sla.py --runs 3", lambda d: f"{len(d['runs'])} rounds"),
    "fuzz.json": Source(
        f"{PY} bench/fuzz.py --rounds 3 --workflows 10000 --every 1,10",
        lambda d: f"{len(d['rounds']) // (1 + len(d['ratio_to_clean']))} rounds",
    ),
    "fanout.json": Source(
        f"{PY} bench/fanout.py --rounds 3 --before TREE", lambda d: f"{d['after']['rounds']} rounds"
    ),
    "latency_floor.json": Source(
        f"{PY} bench/latency_floor.py --rate 8 --seconds 15 --runs 3",
        _first_list("windows", " windows a system"),
    ),
    "latency_floor_bare.json": Source(
        f"{PY} bench/latency_floor.py --rate 8 --seconds 15 --runs 3 "
        "--out bench/results/current/latency_floor_bare.json",
        _first_list("windows", " windows a system"),
    ),
    "partitions.json": Source(
        f"{PY} bench/partitions.py --partitions 2,4,6,12 --rate 45 --seconds 15 --rounds 3",
        _key("rounds", " rounds"),
    ),
    "projections.json": Source(
        f"{PY} bench/projections.py --prefix P --before TREE", _first_list("per_run", " runs")
    ),
    "projector_offline.json": Source(
        f"{PY} bench/projector_offline.py --before TREE --workflows 1000",
        _first_list("per_run", " runs"),
    ),
    "read_to_end.json": Source(
        f"{PY} bench/read_to_end.py --prefix P --before TREE", _first_list("per_run", " runs")
    ),
    "records.json": Source(
        f"{PY} bench/records.py --rate 10 --seconds 10 --runs 3 --before TREE",
        _first_list("rounds", " rounds"),
    ),
    "recovery.json": Source(
        f"{PY} bench/recovery.py --rounds 3 --rate 40", _key("rounds", " rounds")
    ),
    "replay.json": Source(
        f"{PY} bench/replay.py --prefix P --before TREE", _first_list("per_run", " runs")
    ),
    "restore_broker.json": Source(
        f"{PY} bench/restore_broker.py --rounds 4", _key("rounds", " rounds")
    ),
    "restore_cpu.json": Source(
        f"{PY} bench/restore_cpu.py --workflows 3000 --repeat 5", _key("repeat", " rounds")
    ),
    "scaleout.json": Source(
        f"{PY} bench/scaleout.py --runs 3 --inputs 10000 --workflows 300", _key("runs", " runs")
    ),
    "script_sandbox.json": Source(
        f"{PY} bench/script_sandbox.py --runs 3 --evaluations 2000", _key("runs", " rounds")
    ),
    "side_by_side.json": Source(
        f"{PY} bench/side_by_side.py --runs 3 --burst 600 --seconds 20",
        _key("runs", " rounds"),
        "or `make bench`, which installs the peers and brings the stack up first",
    ),
    "stack_up.json": Source(
        f"{PY} bench/stack_up.py --cold 3 --warm 5",
        lambda d: ", ".join(f"{k} {len(v['runs'])}" for k, v in d["seconds"].items()),
    ),
}


def load(folder: Path = CURRENT) -> Results:
    """Every JSON file of ``folder``, by name."""
    return {p.name: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}


def num(v: object) -> str:
    """A figure as the page prints it: thousands grouped, four significant digits below."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, int | float):
        return str(v)
    if abs(v) >= 1000 or float(v).is_integer():
        return f"{v:,.0f}"
    return f"{v:.4g}"


def ms(v: object) -> str:
    """A latency; ``None`` is a percentile that landed on a DAG that never completed."""
    return "did not complete" if v is None else num(v)


def slash(*values: object, fmt: Callable[[object], str] = num) -> str:
    return " / ".join(fmt(v) for v in values)


def src(name: str) -> str:
    return f"[{name}]({LINK}{name})"


def after(doc: Any) -> Any:
    """The figures of the code that ran: a before/after file's ``after`` side."""
    return doc["after"] if isinstance(doc, dict) and "after" in doc else doc


def this(doc: Doc) -> Any:
    """bench/dispatch.py's figures of this tree: ``this`` alone, ``after`` in a --compare run."""
    return doc.get("this") or doc["after"]


class Page:
    """Markdown blocks, a blank line between them."""

    def __init__(self, folder: Path, results: Results) -> None:
        self.folder, self.r = folder, results
        self.blocks: list[str] = []

    def has(self, *names: str) -> bool:
        return all(n in self.r for n in names)

    def text(self, *lines: str) -> None:
        self.blocks.append("\n".join(lines))

    def table(self, head: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        self.text(*lines)

    def sources(self, *names: str) -> None:
        for name in names:
            self.text(f"Source: {src(name)}. Rerun: {SOURCES[name].how()}.")

    def plot(self, name: str, alt: str) -> None:
        if (self.folder / name).exists():
            self.text(f"![{alt}]({LINK}{name})")

    def markdown(self) -> str:
        return "\n\n".join(self.blocks) + "\n"


# -- the headline -----------------------------------------------------------------------------


def _systems(d: Doc) -> dict[str, Any]:
    systems: dict[str, Any] = d["median"]["systems"]
    return systems


def _light(system: Doc) -> str:
    """p50 / p95 at the lightest offered load."""
    lat = system["loads"][0]["latency_ms"]
    return slash(lat["p50"], lat["p95"], fmt=ms)


HEADLINE: list[tuple[str, str, Callable[[Doc], str]]] = [
    (
        "side_by_side.json",
        "burst maximum, DAGs/s (the 9-task media DAG)",
        lambda d: ", ".join(f"{k} {num(s['max_per_second'])}" for k, s in _systems(d).items()),
    ),
    (
        "side_by_side.json",
        "best sustained load, DAGs/s",
        lambda d: ", ".join(
            f"{k} {num(peer_stats.best_sustained(s))}" for k, s in _systems(d).items()
        ),
    ),
    (
        "side_by_side.json",
        "p50 / p95 ms at 25 % of each system's maximum",
        lambda d: ", ".join(f"{k} {_light(s)}" for k, s in _systems(d).items()),
    ),
    (
        "capacity.json",
        "capacity model, workflows/s by machines (first limit)",
        lambda d: ", ".join(
            f"{p['machines']}: {num(p['write_path_workflows_per_second'])} ({p['first_limit']})"
            for p in d["projection"]
        ),
    ),
    (
        "decider.json",
        "decider inputs/s on one core, from a backlog",
        lambda d: (
            f"StartWorkflow {num(d['inputs_per_second']['start_workflow_backlog'])}, "
            f"completions {num(d['inputs_per_second']['task_completed_backlog'])}"
        ),
    ),
    (
        "cpu_split_saturated.json",
        "CPU per workflow near the maximum, ms (every process)",
        lambda d: f"{num(d['total']['ms_per_workflow'])} at {num(d['rate'])} DAGs/s",
    ),
    (
        "e2e.json",
        "end to end (the media DAG's 6-task default branch)",
        lambda d: (
            f"{num(d['median']['workflows_per_second'])} workflows/s; dispatch p95 "
            f"{num(d['median']['dispatch_latency_ms']['p95'])} ms at half that rate"
        ),
    ),
    (
        "latency_floor.json",
        "workflow p50 / p95 ms at 8 DAGs/s: empty hops (floor), es-sched",
        lambda d: ", ".join(
            f"{k} {slash(v['workflow']['p50'], v['workflow']['p95'])}"
            for k, v in d["medians"].items()
        ),
    ),
    (
        "replay.json",
        "`es-sched replay` events/s",
        lambda d: ", ".join(
            f"{k} {num(v)}" for k, v in after(d["median_events_per_second"]).items()
        ),
    ),
    (
        "projections.json",
        "projection events/s",
        lambda d: ", ".join(
            f"{k} {num(v)}"
            for k, v in after(d["median_events_per_second"]).items()
            if k != "verify"
        ),
    ),
    (
        "api.json",
        "API p50 / p99 ms at 50 clients, 2 processes",
        lambda d: ", ".join(
            f"{k} {slash(e['median']['p50_ms'], e['median']['p99_ms'])}"
            for k, e in d["endpoints"].items()
            if k in ("detail", "search", "list") and e["status"] == "measured"
        ),
    ),
    (
        "recovery.json",
        "decider killed: seconds to its first new event; a worker: to its task leased again",
        lambda d: ", ".join(
            f"{m}: {num(d['median'][m]['decider']['first_new_event_s'])}, "
            f"{num(d['median'][m].get('worker', {}).get('first_leased_again_s'))}"
            for m in d["modes"]
            if "decider" in d["median"][m]
        ),
    ),
]


def headline(p: Page) -> None:
    rows = [
        [figure, value(p.r[name]), src(name), SOURCES[name].how()]
        for name, figure, value in HEADLINE
        if p.has(name)
    ]
    if rows:
        p.text("## Headline")
        p.table(["figure", "value", "source", "rerun"], rows)


# -- es-sched against Celery + Redis ----------------------------------------------------------


def side_by_side(p: Page) -> None:
    if not p.has("side_by_side.json"):
        return
    d = p.r["side_by_side.json"]
    systems = _systems(d)
    p.text("## es-sched against Celery + Redis")
    p.text(
        f"The same DAG and no-op workers, one system after the other in each of {d['runs']} "
        "rounds on one machine and broker, medians of the rounds (method: "
        "[ADR 29](adr/0029-peer-benchmark.md)). Offered load is a share of each system's own "
        "burst maximum; latency is submit to completion."
    )
    half = peer_stats.LOADS.index(0.5)
    p.table(
        ["", *systems],
        [
            ["burst maximum, DAGs/s", *(num(s["max_per_second"]) for s in systems.values())],
            [
                "best sustained, DAGs/s",
                *(num(peer_stats.best_sustained(s)) for s in systems.values()),
            ],
            [
                "dispatch p95 ms at 50 %",
                *(ms(s["loads"][half]["dispatch_ms"]["p95"]) for s in systems.values()),
            ],
        ],
    )
    head = ["offered load"]
    for k in systems:
        head += [f"{k}: DAGs/s offered / completed", f"{k}: p50 / p95 ms"]
    rows = []
    for i, share in enumerate(peer_stats.LOADS):
        row = [f"{int(share * 100)} %"]
        for s in systems.values():
            x = s["loads"][i]
            held = "" if x["sustained_runs"] * 2 > x["runs"] else " (not sustained)"
            row.append(slash(x["offered_per_second"], x["steady_completion_rate"]) + held)
            row.append(slash(x["latency_ms"]["p50"], x["latency_ms"]["p95"], fmt=ms))
        rows.append(row)
    p.table(head, rows)
    if ratios := d["median"].get("ratios"):
        p.text(
            "Ratios in the same run (DAGs/s: es-sched over Celery's default; p95: Celery's over "
            "es-sched's, above 1 when es-sched is faster):"
        )
        p.table(["ratio", "value"], [[k, num(v)] for k, v in ratios.items()])
    if limit := d["median"].get("kafka_limit"):
        p.text(
            "The limit of a Python transactional consume -> produce loop on the same broker, "
            "measured in each round:"
        )
        p.table(["loop", "records/s"], [[k, num(v)] for k, v in limit.items()])
    p.sources("side_by_side.json")
    p.plot("side_by_side.png", "throughput and p95 against offered load")
    p.plot("side_by_side_cdf.png", "latency CDFs at 50 % and 100 % load")


# -- the capacity model -----------------------------------------------------------------------


def capacity(p: Page) -> None:
    if not p.has("capacity.json"):
        return
    d = p.r["capacity.json"]
    check = d["one_machine_check"]
    p.text("## Capacity model")
    p.text(
        "Computed from the measured rates by `bench/capacity.py` (the model and its outside "
        "figures: [capacity.md](capacity.md))."
    )
    rows = [["model: the CPU ceiling", num(check["predicted_workflows_per_second"]), ""]]
    for key in ("e2e", "side_by_side"):
        if f"{key}_measured" in check:
            error = f"{check[f'{key}_error_percent']:+} %"
            rows.append([f"measured: {src(key + '.json')}", num(check[f"{key}_measured"]), error])
    rows.append(
        ["the decider alone on one core", num(check["decider_one_core_workflows_per_second"]), ""]
    )
    p.table(["one machine", "workflows/s", "model error"], rows)
    p.table(
        [
            "machines",
            "write path, workflows/s",
            "first limit",
            "next",
            "read models keep up to",
            "restore after a failure, s",
            "decider state per machine, GiB",
        ],
        [
            [
                x["machines"],
                num(x["write_path_workflows_per_second"]),
                x["first_limit"],
                x["next_limit"],
                num(x["read_models_keep_up_to"]),
                num(x["restore_after_failure_s"]),
                num(x["decider_state_gib_per_machine"]),
            ]
            for x in d["projection"]
        ],
    )
    p.sources("capacity.json")


# -- the write path ---------------------------------------------------------------------------


def decider(p: Page) -> None:
    if p.has("decider.json"):
        d = p.r["decider.json"]
        ips, cpu, lat = d["inputs_per_second"], d["inputs_per_cpu_second"], d["latency_ms"]
        p.text("### Decider")
        p.table(
            ["figure", "value"],
            [
                [
                    f"{label} inputs/s from a backlog (per CPU-second)",
                    f"{num(ips[key])} ({num(cpu[key])})",
                ]
                for label, key in (
                    ("StartWorkflow", "start_workflow_backlog"),
                    ("task-completion", "task_completed_backlog"),
                )
            ]
            + [
                [
                    f"completion -> committed `workflow.completed` at "
                    f"{num(d['phase2_rate_per_second'])}/s, p50 / p99 ms",
                    slash(lat["p50"], lat["p99"]),
                ],
                ["inputs per transaction (mean)", num(d["mean_inputs_per_transaction"])],
                ["partitions", num(d["settings"]["partitions"])],
            ],
        )
        p.sources("decider.json")
    if p.has("decider_cpu_by_input.json"):
        d = p.r["decider_cpu_by_input.json"]
        rows = [[f"one-task workflow: {k}", num(v)] for k, v in d["one_task"]["medians"].items()]
        rows.append(["media DAG, every input", num(d["media"]["medians"]["media"])])
        p.text(
            "Without a broker (`Decider.step` over fake records: decode, decide, encode, "
            "snapshot), inputs per CPU-second:"
        )
        p.table(["input", "inputs per CPU-second"], rows)
        p.sources("decider_cpu_by_input.json")
    if p.has("core.json"):
        fold, decide = p.r["core.json"]["fold"], p.r["core.json"]["decide"]
        rows = [
            ["fold, events/s", num(fold["events_per_second_median"])],
            ["decide, median / p95 us an input", slash(decide["median_us"], decide["p95_us"])],
        ]
        rows += [
            [f"decide, median us: {k}", num(v)]
            for k, v in decide["median_us_by_input_type"].items()
        ]
        p.text("The pure core on one core (a 1080p media run):")
        p.table(["figure", "value"], rows)
        p.sources("core.json")
    if p.has("fuzz.json"):
        d = p.r["fuzz.json"]
        wps, paired = d["median_workflows_per_s"], paired_ratios(d)
        p.text(
            "Legitimate workflows/s from a backlog with the hostile campaign interleaved (one "
            "hostile record after every K starts; target: at least 0.8 of clean), "
            f"{d['core']} core:"
        )
        p.table(
            ["variant", "workflows/s", "ratio of medians", "median ratio in its round"],
            [
                [v, num(m), num(d["ratio_to_clean"].get(v)), num(paired.get(v))]
                for v, m in wps.items()
            ],
        )
        p.sources("fuzz.json")


def dispatch(p: Page) -> None:
    rows: list[list[object]] = []
    if p.has("dispatch.json"):
        med = p.r["dispatch.json"]["median"]
        for role in ("dispatcher", "worker"):
            x = this(med[role])
            value = f"{num(x['tasks_per_second'])}, {num(x['cpu_ms_per_task'])}"
            rows.append([f"{role} alone: tasks/s, CPU ms a task", value, src("dispatch.json")])
    if p.has("dispatch-latency.json"):
        x = this(p.r["dispatch-latency.json"]["median"]["latency"])
        rows.append(
            [
                f"dispatcher alone at {num(x['rate'])} ready records/s: p50 / p95 / p99 ms",
                slash(x["p50_ms"], x["p95_ms"], x["p99_ms"]),
                src("dispatch-latency.json"),
            ]
        )
    if p.has("dispatch_placement.json"):
        d = p.r["dispatch_placement.json"]
        us = d["decision_us"]
        rows.append(
            [
                f"one placement decision, {num(d['workers'])} workers, "
                f"{num(d['queued_tasks'])} queued: p50 / p95 / p99 us",
                slash(us["p50"], us["p95"], us["p99"]),
                src("dispatch_placement.json"),
            ]
        )
    if rows:
        p.text("### Dispatch")
        p.table(["figure", "value", "source"], rows)
        p.sources(
            *(
                n
                for n in ("dispatch.json", "dispatch-latency.json", "dispatch_placement.json")
                if p.has(n)
            )
        )


def sla(p: Page) -> None:
    if not p.has("sla.json"):
        return
    d = p.r["sla.json"]
    o = d["settings"]
    p.text("## SLA tiers on saturated workers")
    p.text(
        f"Every tenth workflow a P0 with a deadline of {num(o['deadline_s'])} s, the rest P3 "
        f"bulk, submitted at {num(o['rate'])} workflows/s for {num(o['seconds'])} s to "
        f"{o['workers']} workers of {o['concurrency']} slots that finish about "
        f"{num(d['capacity_wf_per_s'])}/s (two {num(o['task_s'])} s steps each); the same "
        "load with tiers and without (no tier, the same deadlines), alternating. The issue's "
        "30 s deadline is scaled down with the task time (ADR 67). With tiers the P3 bulk "
        f"leaves a share of {num(100 * o['reserve_p0'])} % of the slots to P0 "
        "(`ES_SCHED_SLA_RESERVE_P0`), idle while no P0 waits: the bulk's price for the "
        "deadlines. Medians of the rounds."
    )
    med = d["median"]
    rows = [
        [
            label,
            f"{num(100 * med[m]['p0_hit_rate'])} %",
            slash(med[m]["p0_p50_s"], med[m]["p0_max_s"]),
            num(med[m]["p3_per_s"]),
            num(med[m]["breached_events"]),
        ]
        for label, m in (("with tiers", "tiers"), ("without tiers", "no_tiers"))
    ]
    p.table(
        [
            "load",
            "P0 deadline hit rate",
            "P0 start to end p50 / max s",
            "P3 workflows/s",
            "workflow.sla_breached",
        ],
        rows,
    )
    p.plot("sla.png", "P0 times against the deadline, and hit rates, with and without tiers")
    p.sources("sla.json")


def end_to_end(p: Page) -> None:
    if p.has("e2e.json"):
        d = p.r["e2e.json"]
        med = d["median"]
        lat = med["dispatch_latency_ms"]
        p.text("### End to end")
        p.text(
            f"{num(d['workflows_per_run'])} media workflows at once (the stock no-op probe: the "
            "DAG's default branch), then half that rate for dispatch latency (ready committed "
            "to assignment read):"
        )
        p.table(
            ["workflows/s", "tasks/s", "dispatch p50 / p95 / p99 ms"],
            [
                [
                    num(med["workflows_per_second"]),
                    num(med["tasks_per_second"]),
                    slash(lat["p50"], lat["p95"], lat["p99"]),
                ]
            ],
        )
        p.sources("e2e.json")
    for name in ("latency_floor.json", "latency_floor_bare.json"):
        if not p.has(name):
            continue
        d = p.r[name]
        systems: dict[str, Any] = d["medians"]
        p.text(
            f"Each hop at {num(d['rate'])} DAGs/s, p50 / p95 ms: the same hops with nothing in "
            "them (the floors) beside es-sched, windows alternating:"
        )
        p.table(
            ["hop", *systems],
            [
                [hop, *(slash(s[hop]["p50"], s[hop]["p95"]) for s in systems.values())]
                for hop in next(iter(systems.values()))
            ],
        )
        p.sources(name)
    if p.has("partitions.json"):
        d = p.r["partitions.json"]
        p.text(f"By partition count at {num(d['rate'])} DAGs/s, the counts taking turns:")
        p.table(
            [
                "partitions",
                "workflow p50 / p95 ms",
                "ready -> dispatched p95 ms",
                "outcome -> event p95 ms",
            ],
            [
                [
                    count,
                    slash(m["workflow"]["p50"], m["workflow"]["p95"]),
                    num(m["ready -> dispatched"]["p95"]),
                    num(m["outcome -> event"]["p95"]),
                ]
                for count, m in d["medians"].items()
            ],
        )
        p.sources("partitions.json")
        p.plot("partitions.png", "latency against the partition count")


def client_name(key: str) -> str:
    """``process | kind | module.function: target = call(...)`` as a table cell: process, kind,
    where it is made and the attribute that holds it (a cell cannot hold a ``|``)."""
    where, _, line = key.partition(": ")
    process, kind, function = where.split(" | ")
    target = line.split(" = ", 1)[0].split(":", 1)[0].strip()
    return f"{process}, {kind}, `{function}` (`{target}`)"


def broker_cost(p: Page) -> None:
    splits = [n for n in ("cpu_split.json", "cpu_split_saturated.json") if p.has(n)]
    if splits:
        cost = {n: p.r[n]["medians"]["ms_per_workflow"] for n in splits}
        procs = list(dict.fromkeys(proc for n in splits for proc in cost[n]))
        rows = [[proc, *(num(cost[n].get(proc)) for n in splits)] for proc in procs]
        rows.append(["total", *(num(p.r[n]["total"]["ms_per_workflow"]) for n in splits)])
        p.text("### CPU, records and requests per workflow")
        p.text("CPU ms per media workflow, by process:")
        p.table(["process", *(f"at {num(p.r[n]['rate'])} DAGs/s ({src(n)})" for n in splits)], rows)
        p.sources(*splits)
    if p.has("records.json"):
        topics = after(p.r["records.json"]["medians"])
        p.text("Records and commit markers a media workflow leaves, by topic:")
        p.table(
            ["topic", "records", "markers"],
            [[t, num(v["records"]), num(v["markers"])] for t, v in topics.items()],
        )
        p.sources("records.json")
    if p.has("client_requests.json"):
        d = p.r["client_requests.json"]
        med = d["medians"]
        rows = [[client_name(c), num(v["total"])] for c, v in med["clients"].items()]
        rows.append(["all clients", num(med["total"])])
        p.text(
            f"Requests each es-sched client sends the broker per workflow, at {num(d['rate'])} "
            f"DAGs/s and {d['partitions']} partitions:"
        )
        p.table(["client (process, kind, where it is made)", "requests"], rows)
        p.sources("client_requests.json")
    if p.has("broker_settings.json"):
        med = p.r["broker_settings.json"]["medians"]
        p.text("Broker settings against its CPU per workflow:")
        p.table(
            ["variant", "broker ms", "whole machine ms", "broker / stock"],
            [
                [k, num(v["broker_ms"]), num(v["whole_ms"]), num(v["broker_ms_ratio"])]
                for k, v in med.items()
            ],
        )
        p.sources("broker_settings.json")


def scale(p: Page) -> None:
    if p.has("scaleout.json"):
        d = p.r["scaleout.json"]
        p.text("### Scale out and fan-out")
        p.text("One against two decider processes on this machine, interleaved:")
        p.table(
            ["figure", "1 process", "2 processes", "2 / 1"],
            [
                [label, num(x["median"]["1"]), num(x["median"]["2"]), num(x["ratio_2_over_1"])]
                for label, x in (
                    ("decider inputs/s", d["decider_inputs_per_second"]),
                    ("end-to-end workflows/s", d["e2e_workflows_per_second"]),
                )
            ],
        )
        p.sources("scaleout.json")
    if p.has("fanout.json"):
        sizes = p.r["fanout.json"]["after"]["sizes"]
        p.text("One FORK_JOIN_DYNAMIC of N branches on the pure core:")
        p.table(
            ["branches", "decide CPU of the whole run, s", "largest changelog record, bytes"],
            [
                [
                    num(int(n)),
                    num(x["decide_s_median"]),
                    num(x["largest_bytes"].get("changelog record")),
                ]
                for n, x in sizes.items()
            ],
        )
        p.sources("fanout.json")


def write_path(p: Page) -> None:
    p.text("## Write path")
    for section in (decider, dispatch, end_to_end, broker_cost, scale):
        section(p)


# -- the read side ----------------------------------------------------------------------------


def read_side(p: Page) -> None:
    rows: list[list[object]] = []
    names = [n for n in ("projections.json", "replay.json", "projector_offline.json") if p.has(n)]
    for name in (n for n in names if n != "projector_offline.json"):
        d = p.r[name]
        wall, cpu = after(d["median_events_per_second"]), after(d["median_events_per_cpu_second"])
        targets, events = d.get("targets", {}), d["history"]["records"]
        rows += [
            [
                f"{name[:-5]}: {k}",
                num(v),
                num(cpu.get(k)),
                num(targets.get(k)),
                num(events),
                src(name),
            ]
            for k, v in wall.items()
        ]
    if p.has("projector_offline.json"):
        x = after(p.r["projector_offline.json"]["median"])
        rows.append(
            [
                "PostgreSQL projector without Kafka",
                num(x["events_per_second"]),
                num(x["events_per_cpu_second"]),
                "-",
                "-",
                src("projector_offline.json"),
            ]
        )
    if rows:
        p.text("## Read side")
        p.text(
            "Events/s (`pg`: one PostgreSQL projector; `pg_groups`: a rebuild, partition groups "
            "in processes; `search`: OpenSearch; `verify`: `es-sched replay --verify`):"
        )
        p.table(
            ["figure", "events/s", "per CPU-second", "target", "events in the history", "source"],
            rows,
        )
        p.sources(*names)
    if p.has("read_to_end.json"):
        d = p.r["read_to_end.json"]
        unit = {k: {"seconds": "s"}.get(u, u) for k, u in d["units"].items()}
        p.text("Bounded reads, to the end the topic had when they began:")
        p.table(
            ["reader", "time"], [[k, f"{num(v)} {unit[k]}"] for k, v in after(d["median"]).items()]
        )
        p.sources("read_to_end.json")


# -- decider state and recovery ---------------------------------------------------------------
def paired_ratios(d: Doc) -> dict[str, float]:
    """``fuzz.json``: each campaign's median ratio to the clean round of the same turn (its
    rounds are stored turn by turn, every variant once a turn)."""
    per_turn = 1 + len(d["ratio_to_clean"])
    ratios: dict[str, list[float]] = {}
    for start in range(0, len(d["rounds"]), per_turn):
        turn = d["rounds"][start : start + per_turn]
        clean = next(x["workflows_per_s"] for x in turn if x["variant"] == "clean")
        for x in turn:
            if x["variant"] != "clean":
                ratios.setdefault(x["variant"], []).append(x["workflows_per_s"] / clean)
    return {v: round(statistics.median(rs), 3) for v, rs in ratios.items()}


def fault_rows(d: dict[str, Any], fault: str, *keys: str) -> list[list[str]]:
    """One row per mode of ``recovery.json``: the mode, then the fault's medians of ``keys``."""
    return [
        [mode, *(num(d["median"][mode].get(fault, {}).get(k)) for k in keys)] for mode in d["modes"]
    ]


def state(p: Page) -> None:
    files = ("decider_state.json", "decider_memory.json", "restore_cpu.json", "restore_broker.json")
    if not any(p.has(n) for n in (*files, "recovery.json")):
        return
    p.text("## Decider state and recovery")
    if p.has("decider_state.json"):
        runs = p.r["decider_state.json"]["runs"]
        kept = ", ".join(f"`{run['mode']}` {num(run['retain_finished_s'])} s" for run in runs)
        p.text(
            "A real decider on one core, one-task workflows; ended states kept by mode "
            f"(`ES_SCHED_RUN_RETAIN_FINISHED_S`): {kept}:"
        )
        p.table(
            ["mode", "finished workflows", "RSS MiB", "compacted changelog MiB"],
            [
                [
                    run["mode"],
                    num(x["finished"]),
                    num(x["rss_mib"]),
                    num(x["bytes_compacted"] / 2**20),
                ]
                for run in runs
                for x in run["points"]
            ],
        )
        p.table(
            ["mode", "states restored", "restore s", "ms a state"],
            [
                [
                    run["mode"],
                    num(run["restore"]["live_restored"]),
                    num(run["restore"]["median_seconds"]),
                    num(run["restore"]["median_ms_per_state_restored"]),
                ]
                for run in runs
            ],
        )
        p.sources("decider_state.json")
        p.plot("decider_state.png", "RSS and changelog against finished workflows")
    rows: list[list[object]] = []
    if p.has("decider_memory.json"):
        kib = after(p.r["decider_memory.json"]["kib_per_workflow_median"])
        rows += [
            [
                f"memory a finished {k} workflow holds (tracemalloc), KiB",
                num(v),
                src("decider_memory.json"),
            ]
            for k, v in kib.items()
        ]
    if p.has("restore_cpu.json"):
        d = p.r["restore_cpu.json"]
        rows += [
            [f"restore CPU a kept {k} state, us", num(v["us_per_state"]), src("restore_cpu.json")]
            for k, v in d["medians"].items()
        ]
        rows += [
            [f"memory a restored {k} state holds, KiB", num(v), src("restore_cpu.json")]
            for k, v in d["kib_held_per_state"]["resting"].items()
        ]
    if p.has("restore_broker.json"):
        rows += [
            [
                f"restore on the broker, {k}: {num(v['states'])} states, s (read, CPU)",
                f"{num(v['seconds'])} ({num(v['read_s'])}, {num(v['cpu_s'])})",
                src("restore_broker.json"),
            ]
            for k, v in p.r["restore_broker.json"]["medians"].items()
        ]
    if rows:
        p.table(["figure", "value", "source"], rows)
        p.sources(*(n for n in files[1:] if p.has(n)))
    if p.has("recovery.json"):
        d = p.r["recovery.json"]
        p.text(
            f"kill -9 of the decider at {num(d['load']['workflows_per_second'])} workflows/s, "
            "restarted at once, seconds from the kill:"
        )
        settings = d["settings"]["modes"]
        p.table(
            ["mode", "settings", "first new event", "back to full throughput", "restored"],
            [
                [
                    mode,
                    ", ".join(f"{k}={v}" for k, v in settings[mode].items())
                    if isinstance(settings[mode], dict)
                    else settings[mode],
                    num(x["first_new_event_s"]),
                    num(x["back_to_full_throughput_s"]),
                    num(x["log"]["restored"]),
                ]
                for mode in d["modes"]
                for x in [d["median"][mode].get("decider")]
                if x is not None
            ],
        )
        if d.get("note"):
            p.text(f"Note of the run: {d['note']}.")
        p.text(
            "A worker killed (not restarted), seconds from the kill to the first of its tasks "
            "completed by another worker; the dispatcher killed and restarted, to its first new "
            "dispatch:"
        )
        p.table(
            [
                "mode",
                "worker: its task leased again",
                "worker: done elsewhere",
                "dispatcher: first dispatch",
            ],
            [
                [
                    mode,
                    num(d["median"][mode].get("worker", {}).get("first_leased_again_s")),
                    num(d["median"][mode].get("worker", {}).get("first_new_event_s")),
                    num(d["median"][mode].get("dispatcher", {}).get("first_new_event_s")),
                ]
                for mode in d["modes"]
            ],
        )
        p.text(
            "A second decider SIGSTOPped inside an open transaction: seconds from the stop to "
            "the first decider's first event on its partitions, to the last of them, and the "
            "first decider's longest pause on its own partitions meanwhile:"
        )
        p.table(
            ["mode", "first of its partitions", "all of them", "own partitions paused"],
            fault_rows(
                d,
                "paused",
                "first_new_event_s",
                "all_its_partitions_back_s",
                "own_partitions_longest_pause_s",
            ),
        )
        if any("broker" in d["median"][mode] for mode in d["modes"]):
            p.text(
                "The single broker killed and restarted 20 s later: seconds from the broker "
                "answering again to the first dispatch and the first event, and to the broker "
                "serving a produce and both groups' coordinators:"
            )
            p.table(
                ["mode", "first dispatch", "first event", "broker serving"],
                fault_rows(
                    d, "broker", "first_new_dispatch_s", "first_new_event_s", "broker_serving_s"
                ),
            )
        p.sources("recovery.json")


# -- the HTTP API and the local stack ---------------------------------------------------------


def api_writes(p: Page) -> None:
    """What read-your-writes costs a write (ADR 56): start and terminate, one client back to
    back; ``before`` is the same rounds on the commit before it, when a present."""
    d = p.r["api_writes.json"]
    before = d.get("before", {}).get("median", {})
    p.text(
        f"Writes through `/api/workflow`, one client back to back, medians of {d['runs']} "
        f"rounds of {num(d['writes_per_round'])}: `start` the call, `start_visible` the call "
        "and the reads until the workflow shows, `terminate` the DELETE (ms):"
    )
    p.table(
        ["write", "p50 / p99 ms", "before: p50 / p99 ms"],
        [
            [
                row,
                slash(m["p50_ms"], m["p99_ms"]),
                slash(before[row]["p50_ms"], before[row]["p99_ms"]) if row in before else "-",
            ]
            for row, m in d["median"].items()
        ],
    )
    p.sources("api_writes.json")


def api(p: Page) -> None:
    if not any(
        p.has(n)
        for n in (
            "api.json",
            "api_routes.json",
            "api_split.json",
            "api_workers.json",
            "api_writes.json",
        )
    ):
        return
    p.text("## HTTP API")
    if p.has("api.json"):
        d = p.r["api.json"]
        load_ = d["load"]
        p.text(
            f"{num(d['seed']['workflows'])} workflows in the read models, {load_['clients']} "
            f"clients, medians of {load_['runs']} rounds; an endpoint's plain name is served by "
            f"{load_['api_workers'][-1]} API processes, `@1w` by one:"
        )
        p.table(
            ["endpoint", "requests/s", "p50 / p99 ms", "p99 target"],
            [
                [
                    k,
                    num(e["median"]["requests_per_second"]),
                    slash(e["median"]["p50_ms"], e["median"]["p99_ms"]),
                    num(e.get("target_p99_ms")),
                ]
                for k, e in d["endpoints"].items()
                if e["status"] == "measured"
            ],
        )
        p.sources("api.json")
        p.plot("api.png", "API requests/s and latency")
    if p.has("api_routes.json"):
        api_routes(p, p.r["api_routes.json"])
    if p.has("api_writes.json"):
        api_writes(p)
    if p.has("api_split.json"):
        d = p.r["api_split.json"]
        p.text(
            f"{d['clients']} keep-alive connections opened at once on two API processes, "
            f"{len(d['splits'])} trials: the smaller share min {num(d['smaller_share_min'])}, "
            f"median {num(d['smaller_share_median'])}."
        )
        p.sources("api_split.json")
    if p.has("api_workers.json"):
        p.text(
            "HTTP workers through the API against the native Kafka worker, one fork of no-op "
            "tasks, tasks/s (ratio to native):"
        )
        p.table(
            [
                "API processes, routes",
                "native",
                "HTTP pollers",
                "conductor-python",
                "API CPU ms a task (pollers, SDK)",
            ],
            [
                [
                    f"{x['api_workers']}, {'lean' if x['lean_worker_routes'] else 'FastAPI'}",
                    num(x["native_tasks_per_s"]),
                    f"{num(x['http_tasks_per_s'])} ({x['http_over_native']:.2f})",
                    f"{num(x['sdk_tasks_per_s'])} ({x['sdk_over_native']:.2f})",
                    f"{num(x['api_cpu_ms']['http'])}, {num(x['api_cpu_ms']['sdk'])}",
                ]
                for x in p.r["api_workers.json"]["results"]
            ],
        )
        p.sources("api_workers.json")


def api_routes(p: Page, d: Doc) -> None:
    """Every /api/v1 route and console page, idle and busy; before's idle p50 beside."""
    busy = d["load"]["busy"]["clients"]

    def cell(side: Doc | None, kind: str) -> str:
        m = side[kind]["median"] if side and "absent" not in side else None
        return "-" if m is None else slash(m["p50_ms"], m["p99_ms"])

    def before(r: Doc) -> str:
        side = r.get("before")
        if side and "absent" in side:
            return f"no such route ({side['absent']})"
        m = side["idle"]["median"] if side else None
        return "-" if m is None else num(m["p50_ms"])

    runs = sorted({r.get("when", d["when"]) for r in d["routes"].values()})

    p.text(
        f"Every `/api/v1` route and console page, {num(d['seed']['workflows'])} workflows in the "
        f"read model, one API process: idle is one client back to back, busy {busy} clients; "
        f"medians of {d['load']['runs']} runs; before is the checkout named in the file, served "
        "beside it in the same run"
        + (
            f" (rows from {len(runs)} runs: {', '.join(runs)}; a row's figures are from one)"
            if len(runs) > 1
            else ""
        )
        + ":"
    )
    p.table(
        ["route", "p50 / p99 ms idle", f"p50 / p99 ms at {busy} clients", "before idle p50 ms"],
        [
            [
                f"`{r['route']}`",
                cell(r["after"], "idle"),
                cell(r["after"], "busy"),
                before(r),
            ]
            for r in d["routes"].values()
        ],
    )
    p.sources("api_routes.json")


def learned_cost(p: Page) -> None:
    """The media cost estimate against ffmpeg, before and after the learned correction (ADR 66)."""
    if not p.has("cost.json"):
        return
    d = p.r["cost.json"]
    videos = d["videos"]
    p.text("## Learned cost")
    p.text(
        f"Every transcode the media pipeline asks of the demo's {len(videos)} videos "
        f"({min(v['height'] for v in videos)}p to {max(v['height'] for v in videos)}p, "
        f"{num(min(v['duration_s'] for v in videos))} to "
        f"{num(max(v['duration_s'] for v in videos))} s), run with the worker's ffmpeg command: "
        "the cost model's estimate of its cpu-seconds (the probe's, which the task declares), "
        "what ffmpeg used (user + system, its own), and the estimate corrected by what a first "
        "pass taught each size class (`domain.learned_cost.correct`: the median ratio, memory at "
        f"its P95 x 1.25, nothing below {d['settings']['min_samples']} samples). Per class the "
        f"median over its transcodes, then over {d['runs']} passes after the learning one; "
        "error is |figure - measured| / measured.",
    )
    rows = []
    for subject, c in d["classes"].items():
        if subject == "all":
            continue
        learned = (
            f"{num(c['learned_cost_ratio'])} ({c['learned_samples']} samples)"
            if c["corrected"]
            else f"not applied ({c['learned_samples']} samples)"
        )
        rows.append(
            [
                f"`{subject}`",
                c["transcodes"],
                num(c["estimated_cpu_s"]),
                num(c["measured_cpu_s"]),
                num(c["corrected_cpu_s"]),
                learned,
                f"{num(c['error_before_pct'])} %",
                f"{num(c['error_after_pct'])} %",
                f"{num(c['cpu_before'])} / {num(c['cpu_after'])}",
                f"{num(c['memory_estimated_mb'])} / {num(c['peak_memory_mb'])} / "
                f"{num(c['memory_corrected_mb'])}",
            ]
        )
    every = d["classes"]["all"]
    rows.append(
        [
            "all",
            every["transcodes"],
            "",
            "",
            "",
            "",
            f"{num(every['error_before_pct'])} %",
            f"{num(every['error_after_pct'])} %",
            "",
            "",
        ]
    )
    same = all(c["cpu_before"] == c["cpu_after"] for k, c in d["classes"].items() if k != "all")
    if same:
        p.text(
            "On clips this short every rendition declares the same cores either way (the "
            "model sizes a rendition to finish in about a minute, at least 0.5 cores): here "
            "the correction changes the memory placed by; cores change on longer sources."
        )
    p.table(
        [
            "size class",
            "transcodes",
            "estimated cpu-s",
            "measured cpu-s",
            "corrected cpu-s",
            "learned ratio",
            "error before",
            "error after",
            "cores declared: estimate / corrected",
            "memory MiB: estimated / measured peak / corrected",
        ],
        rows,
    )
    p.sources("cost.json")


def stack(p: Page) -> None:
    if not p.has("stack_up.json"):
        return
    d = p.r["stack_up.json"]
    p.text("## Local stack")
    p.table(
        ["`es-sched stack up`", "seconds"], [[k, num(v["median"])] for k, v in d["seconds"].items()]
    )
    p.table(
        ["service", "memory after start, MiB (PSS)"],
        [[k, num(v["median"])] for k, v in d["memory_mb_pss_after_start"].items()],
    )
    p.sources("stack_up.json")


# -- the method -------------------------------------------------------------------------------


def machine_of(d: Doc) -> str:
    """What a file says it ran on (the benches record different parts of it)."""
    m = d.get("machine")
    if not isinstance(m, dict):
        m = {"cores": d["cores"]} if "cores" in d else {}
    parts = [
        fmt.format(m[key])
        for key, fmt in (
            ("cores", "{} cores"),
            ("cpus", "{} cores"),
            ("cores_used", "{} core used"),
            ("decider_cores", "decider on {} core"),
            ("cpu", "{}"),
            ("ram_gb", "{} GB RAM"),
            ("kernel", "kernel {}"),
        )
        if key in m
    ]
    return ", ".join(parts) or "-"


def taken_of(d: Doc) -> str:
    """When the run began, where the file records it."""
    return next(
        (d[k] for k in ("started", "when", "measured_at") if isinstance(d.get(k), str)), "-"
    )


def method(p: Page) -> None:
    p.text("## Method")
    p.text(
        "- A figure is the median of several runs, rounds or windows (the table below says how "
        "many each file holds), every run kept in the file beside the median: one lucky run is "
        "never the figure. A file of one run says so in its runs column.",
        "- A ratio (before/after, es-sched/Celery, 1 against 2 processes) comes from one run in "
        "which the variants alternate (A, B, A, B, or an order rotated each round), so both see "
        "the same machine and broker; ratios from runs on different hosts or hours are not made. "
        "A before/after file is read here for its after side.",
        "- The machines are shared 2-core hosts whose speed moves between hosts and hours: "
        "compare absolute figures within one file, not across files taken on different "
        "machines. The table gives what each file records of its machine (some record only the "
        "cores) and, where it records it, when the run began.",
        "- Rerun a row with its command from the repository root, with the local stack up "
        "(`es-sched stack up`) unless the bench's docstring says otherwise, then "
        "`.venv/bin/python bench/capacity.py` and `.venv/bin/python bench/report.py`. TREE is an "
        "earlier checkout (`git worktree add /tmp/before REV`), P the topic prefix of a history "
        "an earlier run left.",
    )
    p.table(
        ["file", "runs", "machine", "taken", "rerun"],
        [
            [src(n), SOURCES[n].runs(d), machine_of(d), taken_of(d), SOURCES[n].how()]
            for n, d in p.r.items()
        ],
    )


# -- the page ---------------------------------------------------------------------------------


def page(folder: Path = CURRENT) -> str:
    """docs/performance.md's text from the files of ``folder``."""
    results = load(folder)
    if unknown := sorted(set(results) - set(SOURCES)):
        raise SystemExit(
            f"bench/report.py: no SOURCES entry for {', '.join(unknown)} in {folder}: index "
            "it there (and in bench/README.md), or move it to bench/results/archive/"
        )
    p = Page(folder, results)
    p.text(
        "# Performance",
        "",
        "Generated by `bench/report.py` from `bench/results/current/`; do not edit. Every "
        "figure names its file; older runs are in `bench/results/archive/` (the index of both: "
        "[bench/README.md](../bench/README.md)).",
    )
    sections = (
        headline,
        side_by_side,
        capacity,
        write_path,
        read_side,
        state,
        sla,
        api,
        learned_cost,
        stack,
    )
    for section in sections:
        section(p)
    method(p)
    return p.markdown()


def main(argv: Sequence[str] = sys.argv[1:]) -> None:
    if argv:
        raise SystemExit("usage: python bench/report.py (writes docs/performance.md)")
    PAGE.write_text(page())
    print(f"wrote {PAGE}")


if __name__ == "__main__":
    main()
