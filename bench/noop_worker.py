"""``es-sched worker --noop`` whose ``media.probe`` reports a 1080p source, so that
examples/media_pipeline.json takes its 1080p branch (probe, four transcodes, thumbnail, package,
write_asset, callback: nine worker tasks), the DAG bench/side_by_side.py gives Celery too.

The stock no-op worker echoes each task's input: the probe's echo has no ``height``, the SWITCH
takes its default case and a workflow runs six worker tasks (one transcode). Here the probe
answers what a real probe of a 60 s 1920x1080 source answers (``height`` and the resource
estimates the transcodes declare, from es_sched.workers.media.cost); every other type echoes.
Same options as ``es-sched worker``: `python bench/noop_worker.py --noop --types ... [...]`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from es_sched.cli import worker as cli
from es_sched.workers import TaskContext, Worker
from es_sched.workers.media.cost import estimate_grid

PROBED = {
    "height": 1080,
    "width": 1920,
    "duration_s": 60.0,
    "sha256": "0" * 64,
    **estimate_grid(60.0, 1920, 1080, 30.0, max_cpu=2.0),
}


def probe(_ctx: TaskContext, task_input: dict[str, Any]) -> dict[str, Any]:
    return {**PROBED, "uri": task_input.get("uri")}


def noop_1080(worker: Worker, types: list[str], hold_s: float = 0.0) -> Worker:
    _echo_all(worker, [t for t in types if t != "media.probe"], hold_s)
    if "media.probe" in types:
        worker.task("media.probe")(probe)
    return worker


_echo_all = cli.noop_worker


if __name__ == "__main__":
    cli.noop_worker = noop_1080
    cli.worker(prog_name="noop_worker")
