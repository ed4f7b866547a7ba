"""The PostgreSQL projector's batch path without Kafka: ``Projector.project`` over records
made in memory (the golden 1080p media history, re-encoded at the current schema versions as
the decider writes it, under W workflow ids, 12 partitions), into a
fresh schema: decode, fold, write (rows, archive, checkpoints), offsets "committed" to a fake.

It isolates what ADR 32 changed in the projector (the writer thread, no lookup for starting
workflows) from the broker. With ``--before PATH`` it runs this checkout and that one in
children, interleaved, ``--runs`` times; prints events/s (wall and per CPU second) and writes
bench/results/current/projector_offline.json. Needs PostgreSQL (`es-sched stack up`).
Rerun: `.venv/bin/python bench/projector_offline.py --before /tmp/base [--workflows 1000]`
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "fixtures" / "golden" / "media_1080_v1.events.jsonl"


class _Msg:
    __slots__ = ("_offset", "_partition", "_value")

    def __init__(self, value: bytes, offset: int, partition: int) -> None:
        self._value, self._offset, self._partition = value, offset, partition

    def error(self) -> None:
        return None

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def value(self) -> bytes:
        return self._value

    def key(self) -> None:
        return None


class _Consumer:
    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None: ...

    def assignment(self) -> list[Any]:
        return []


def measure(workflows: int, batch: int) -> dict[str, Any]:
    """One run with the es_sched on sys.path (PYTHONPATH: this checkout or --before's)."""
    from sqlalchemy import text  # noqa: PLC0415

    from es_sched.projections.postgres.store import PgStore, engine_for  # noqa: PLC0415
    from es_sched.projections.projector import Projector  # noqa: PLC0415
    from es_sched.serialization import decode_logged_event, encode_event  # noqa: PLC0415
    from testkit.settings import private_settings  # noqa: PLC0415

    # As the decider writes them today: the golden history's v1 events at their current version.
    lines = [
        encode_event(decode_logged_event(line.encode()))
        for line in GOLDEN.read_text().splitlines()
        if line.strip()
    ]
    msgs, next_offset = [], [0] * 12
    for w in range(workflows):
        wid, part = f'"wf-bench-{w}"'.encode(), w % 12
        for line in lines:
            msgs.append(_Msg(line.replace(b'"wf-1"', wid), next_offset[part], part))
            next_offset[part] += 1
    settings = private_settings()
    schema = f"bench_offline_{uuid.uuid4().hex[:8]}"
    store = PgStore(settings, schema=schema)
    store.ensure()
    projector = Projector(settings, store)
    projector.consumer = _Consumer()  # type: ignore[assignment]
    began, cpu = time.monotonic(), os.times()
    for i in range(0, len(msgs), batch):
        projector.project(msgs[i : i + batch])  # type: ignore[arg-type]
    getattr(projector, "flush", lambda: None)()
    wall, end = time.monotonic() - began, os.times()
    store.close()
    admin = engine_for(settings, "public")
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()
    spent = end.user - cpu.user + end.system - cpu.system
    return {
        "events": len(msgs),
        "seconds": round(wall, 3),
        "events_per_second": round(len(msgs) / wall),
        "events_per_cpu_second": round(len(msgs) / spent),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workflows", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--before", type=Path)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.measure:
        print(json.dumps(measure(opts.workflows, opts.batch)))
        return
    import statistics  # noqa: PLC0415

    codes = {"after": ROOT, **({"before": opts.before.resolve()} if opts.before else {})}
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in codes}
    args = ["--measure", "--workflows", str(opts.workflows), "--batch", str(opts.batch)]
    for n in range(opts.runs):
        for label, code in sorted(codes.items(), reverse=n % 2 == 1):
            env = {**os.environ, "PYTHONPATH": str(code)}
            out = subprocess.run(
                [sys.executable, __file__, *args],
                env=env,
                cwd=code,
                capture_output=True,
                text=True,
                check=True,
            )
            runs[label].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(label, runs[label][-1], flush=True)
    median = {
        label: {
            k: statistics.median(r[k] for r in rs)
            for k in ("events_per_second", "events_per_cpu_second")
        }
        for label, rs in runs.items()
    }
    result = {
        "benchmark": "projector_offline",
        "cores": os.cpu_count(),
        "load_average_at_end": [round(x, 1) for x in os.getloadavg()],
        "median": median,
        "per_run": runs,
    }
    if "before" in median:
        result["ratio_after_over_before"] = {
            k: round(median["after"][k] / median["before"][k], 2) for k in median["after"]
        }
    print(json.dumps(result["median"]), result.get("ratio_after_over_before"))
    out_path = ROOT / "bench" / "results" / "current" / "projector_offline.json"
    out_path.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
