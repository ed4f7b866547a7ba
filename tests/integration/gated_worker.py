"""A worker process for the pinned-versions test: ``pin.prep`` holds its task until the file
``GATE_FILE`` exists (so a test can change the registry while the parent runs), every other
task type in ``TASK_TYPES`` completes at once with ``{"ran": <its type>}``.

Run as ``python -m tests.integration.gated_worker WORKER_ID`` with the test's ES_SCHED_* env.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from es_sched.workers import TaskContext, Worker

POLL_S = 0.05


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s: %(message)s")
    gate = Path(os.environ["GATE_FILE"])
    stop = threading.Event()
    worker = Worker(pool="default", version="1.0", worker_id=sys.argv[1], concurrency=4)

    @worker.task("pin.prep")
    def prep(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        while not gate.exists():  # the fact the test creates once the registry changed
            if ctx.cancelled or stop.wait(POLL_S):
                return {}
        return {"ran": "pin.prep"}

    for task_type in os.environ["TASK_TYPES"].split(","):
        worker.task(task_type)(lambda ctx, data, t=task_type: {"ran": t})

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run(stop)


if __name__ == "__main__":
    main()
