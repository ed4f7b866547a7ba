"""The decider's CPU per input without a broker: ``Decider.step`` over fake records.

The same inputs as bench/decider.py (StartWorkflow of a one-task workflow, then DispatchTask and
ReportCompleted for each task; or the media DAG with ``--media``), in batches of 500, through
decode, decide, encode and the changelog snapshot; the transaction itself is not included.
A completion carries ``started=True``, as the SDK's workers send it (ADR 44: the start and the
outcome in one report). Before 2026-12-05 the benches left it out, which skipped each task's
``task.started`` and wrote three timer tombstones per task where workers cause one: figures
from then run about 10 % above these (media: 10.5-10.9k against 9.6-9.7k inputs per
CPU-second, back to back).
Prints inputs per CPU-second per phase (process time: other load on the machine matters less),
medians of ``--repeat``; a profiler can wrap it
(`py-spy record -o x.raw --format raw -- python bench/decider_cpu.py`).

With ``--before TREE`` (another checkout, e.g. ``git archive HEAD | tar -x -C /tmp/base``) each
round runs once on that tree's es_sched and once on this one, in child processes (the tree
first on ``PYTHONPATH``, run from outside the repository, and each child reports which
es_sched it imported: `python -m` from the repository would import this one for both), and the
medians and after/before ratios are written to ``--out`` (default
bench/results/current/decider_cpu_ab.json). Without it, ``--out`` writes the medians if given.

Each child reports which build of the core it ran (ADR 51: ``compiled`` by mypyc, or ``pure``
Python; ``ES_SCHED_CORE`` chooses, a checkout from before it is ``pure``), kept as ``core``.

Rerun: `.venv/bin/python bench/decider_cpu.py [--workflows 4000 --repeat 3] [--media]
[--before /tmp/base] [--out FILE]`
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from es_sched.domain import commands as c
from es_sched.domain.ids import workflow_id_for_command
from es_sched.runtime.decider import Decider
from es_sched.serialization import encode_input
from es_sched.serialization.records import decode_ready
from es_sched.settings import load_settings

ONE_TASK = {
    "name": "bench_one",
    "version": 1,
    "tasks": [{"name": "unit", "taskReferenceName": "unit"}],
}
BATCH = 500


class FakeMsg:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes, value: bytes) -> None:
        self._t, self._p, self._o, self._k, self._v = topic, partition, offset, key, value

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> bytes:
        return self._k

    def value(self) -> bytes:
        return self._v

    def error(self) -> None:
        return None


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
MEDIA = json.loads((EXAMPLES / "media_pipeline.json").read_text())
MEDIA_TASKDEFS = json.loads((EXAMPLES / "media_taskdefs.json").read_text())
MEDIA_INPUT = {
    "source_uri": "s3://in/a.mp4",
    "source_checksum": "0" * 64,
    "callback_url": "http://127.0.0.1:9/cb",
    "asset_id": "a",
}
PROBED = {"height": 1080, "uri": "s3://in/a.mp4", "sha256": "0" * 64, "duration_s": 60.0}


class FakeRegistry:
    def __init__(self) -> None:
        self.taskdefs = [{"name": "unit", "retryCount": 0}, *MEDIA_TASKDEFS]

    def poll(self) -> None:
        return None

    def workflow(self, name: str, version: int | None = None) -> dict[str, Any] | None:
        return {"bench_one": ONE_TASK, "media_pipeline": MEDIA}.get(name)

    def taskdefs_for(self, definition: dict[str, Any]) -> list[dict[str, Any]]:
        return self.taskdefs


def _lease(task_id: str) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "attempt": 1,
        "worker_id": "bench",
        "lease_epoch": 1,
        "lease_token": f"tok-{task_id}",
    }


def run_phase(d: Decider, msgs: list[FakeMsg]) -> tuple[float, list[Any]]:
    outs: list[Any] = []
    t0 = time.process_time()
    for i in range(0, len(msgs), BATCH):
        batch = d.step(msgs[i : i + BATCH])  # type: ignore[arg-type]
        assert batch is not None
        batch.on_commit()
        outs += batch.records
    return time.process_time() - t0, outs


def new_decider() -> Decider:
    """A decider on the fake registry, with the cycle collector tuned as ``Decider.run`` does."""
    from es_sched.bootstrap import script_engine  # noqa: PLC0415

    d = Decider(load_settings(), script_engine())
    d.registry = FakeRegistry()  # type: ignore[assignment]
    young = getattr(d.run_settings, "gc_young_threshold", 0)  # as Decider.run does (ADR 30)
    if young:  # a baseline checkout from before it has no such setting
        gc.set_threshold(young, *gc.get_threshold()[1:])
    return d


def one_run(n: int, prefix: str, d: Decider | None = None) -> dict[str, float]:
    """``n`` one-task workflows, on ``d`` if given (bench/decider_memory.py reads it after)."""
    d = d or new_decider()
    topics = d.topics
    parts = topics.partitions
    starts = []
    for i in range(n):
        cid = f"{prefix}-{i}"
        wf = workflow_id_for_command(cid)
        inp = c.StartWorkflow(cid, wf, name="bench_one", input={"i": i})
        starts.append(FakeMsg(topics.commands, hash(wf) % parts, i, wf.encode(), encode_input(inp)))
    took_start, outs = run_phase(d, starts)
    ready = [decode_ready(o.value) for o in outs if o.topic == topics.ready]
    leases, reports = [], []
    for i, r in enumerate(ready):
        wf, task_id = r["workflow_id"], r["task_id"]
        key, part = wf.encode(), hash(wf) % parts
        lease = c.DispatchTask(f"dispatch-{task_id}", wf, **_lease(task_id))
        done = c.ReportCompleted(f"done-{task_id}", wf, started=True, **_lease(task_id))
        leases.append(FakeMsg(topics.task_results, part, i, key, encode_input(lease)))
        reports.append(FakeMsg(topics.task_results, part, n + i, key, encode_input(done)))
    took_lease, _ = run_phase(d, leases)
    took_done, _ = run_phase(d, reports)
    return {"start": n / took_start, "dispatch": n / took_lease, "completed": n / took_done}


def media_run(n: int, prefix: str, d: Decider | None = None) -> dict[str, float]:
    """``n`` media workflows (1080p: probe, four transcodes, thumbnail, package, write_asset,
    callback) driven to their end wave by wave: every ready task is leased, then completed."""
    d = d or new_decider()
    topics, parts, offset = d.topics, d.topics.partitions, 0
    msgs = []
    for i in range(n):
        cid = f"{prefix}-{i}"
        wf = workflow_id_for_command(cid)
        inp = c.StartWorkflow(cid, wf, name="media_pipeline", input=MEDIA_INPUT)
        msgs.append(FakeMsg(topics.commands, hash(wf) % parts, i, wf.encode(), encode_input(inp)))
    took, outs = run_phase(d, msgs)
    inputs, snapshot_bytes, snapshots = n, 0, 0
    while True:
        snapshot_bytes += sum(len(o.value or b"") for o in outs if o.topic == topics.changelog)
        snapshots += sum(o.topic == topics.changelog for o in outs)
        ready = [decode_ready(o.value) for o in outs if o.topic == topics.ready]
        if not ready:
            break
        leases, reports = [], []
        for r in ready:
            wf, task_id = r["workflow_id"], r["task_id"]
            key, part, offset = wf.encode(), hash(wf) % parts, offset + 1
            output = PROBED if r["name"] == "media.probe" else {}
            lease = c.DispatchTask(f"dispatch-{task_id}", wf, **_lease(task_id))
            done = c.ReportCompleted(
                f"done-{task_id}", wf, output=output, started=True, **_lease(task_id)
            )
            leases.append(FakeMsg(topics.task_results, part, offset, key, encode_input(lease)))
            reports.append(FakeMsg(topics.task_results, part, offset, key, encode_input(done)))
        took_lease, _ = run_phase(d, leases)
        took_done, outs = run_phase(d, reports)
        took, inputs = took + took_lease + took_done, inputs + 2 * len(ready)
    ended = sum(st.terminal for st in d.states.values())
    assert ended == n, f"{ended} of {n} media workflows ended"
    return {
        "media": inputs / took,
        "inputs_per_workflow": inputs / n,
        "changelog_bytes_per_input": snapshot_bytes / inputs,
    }


ROOT = Path(__file__).resolve().parents[1]


def figures(opts: argparse.Namespace) -> dict[str, float]:
    run = media_run if opts.media else one_run
    runs = [run(opts.workflows, f"cpu{k}") for k in range(opts.repeat)]
    return {phase: statistics.median(r[phase] for r in runs) for phase in runs[0]}


def show(side: str, medians: dict[str, float], repeat: int) -> None:
    for phase, rate in medians.items():
        unit = "" if phase in ("inputs_per_workflow", "changelog_bytes_per_input") else " inputs/s"
        print(f"{side:7s}{phase:26s} {rate:10,.0f}{unit} (median of {repeat})")


def child_run(argv: list[str], side: str, tree: Path) -> dict[str, Any]:
    """Run ``argv`` on ``tree``'s es_sched (first on ``PYTHONPATH``, from outside the
    repository); its last line is JSON whose ``code`` names the es_sched it imported."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        argv, env=env, cwd=tempfile.gettempdir(), capture_output=True, text=True, check=True
    )
    doc: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    if Path(doc["code"]) != tree:
        raise SystemExit(f"the {side} run imported es_sched from {doc['code']}, not {tree}")
    return doc


def interleaved(opts: argparse.Namespace) -> dict[str, Any]:
    """A round is one run on ``--before``'s es_sched, then one on this checkout's."""
    sides = {"before": opts.before.resolve(), "after": ROOT}
    runs: dict[str, list[dict[str, float]]] = {side: [] for side in sides}
    cores: dict[str, set[str]] = {side: set() for side in sides}
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        "--repeat",
        "1",
        "--workflows",
        str(opts.workflows),
        *(["--media"] if opts.media else []),
    ]
    for k in range(opts.repeat):
        for side, tree in sides.items():
            doc = child_run(argv, side, tree)
            runs[side].append(doc["figures"])
            cores[side].add(doc.get("core", "pure"))
            print(f"round {k + 1} {side:6s} {doc.get('core', 'pure'):8s} {doc['figures']}")
    medians = {
        side: {phase: statistics.median(r[phase] for r in rs) for phase in rs[0]}
        for side, rs in runs.items()
    }
    ratio = {p: round(medians["after"][p] / medians["before"][p], 3) for p in medians["after"]}
    return {
        "benchmark": "decider_cpu",
        "media": opts.media,
        "workflows": opts.workflows,
        "before_tree": str(sides["before"]),
        "runs": runs,
        "medians": medians,
        "core": {side: "/".join(sorted(c)) for side, c in cores.items()},
        "ratio_after_over_before": ratio,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=4000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--media", action="store_true", help="the 1080p media DAG instead")
    parser.add_argument("--before", type=Path, help="another checkout, measured interleaved")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        import es_sched  # noqa: PLC0415
        import es_sched.domain  # noqa: PLC0415

        code = str(Path(es_sched.__file__).resolve().parents[1])
        core = getattr(es_sched.domain, "CORE", "pure")  # ADR 51: compiled or Python
        print(json.dumps({"code": code, "core": core, "figures": figures(opts)}))
        return
    if opts.before is None:
        result: dict[str, Any] = {
            "benchmark": "decider_cpu",
            "media": opts.media,
            "workflows": opts.workflows,
            "medians": figures(opts),
        }
        show("", result["medians"], opts.repeat)
    else:
        result = interleaved(opts)
        for side in ("before", "after"):
            show(side, result["medians"][side], opts.repeat)
        print("after / before:", result["ratio_after_over_before"])
        opts.out = opts.out or ROOT / "bench" / "results" / "current" / "decider_cpu_ab.json"
    if opts.out is not None:
        opts.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {opts.out}")


if __name__ == "__main__":
    main()
