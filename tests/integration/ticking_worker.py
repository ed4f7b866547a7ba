"""A worker process whose handler leaves a side effect every 100 ms: one line with the time in
``TICK_FILE`` while its task runs (up to ``TICK_SECONDS``, default 60 s), then
``cancelled <time>`` once it sees the cancellation, so a test can tell when the side effects
stopped. With ``START_FILE`` set, every start of the handler first appends
``<task id> <lease epoch> <worker id>`` there: the record of what this worker ever ran.

Run as ``python -m tests.integration.ticking_worker WORKER_ID`` with the test's ES_SCHED_* env.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from es_sched.workers import TaskContext, Worker


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s: %(message)s")
    ticks = Path(os.environ["TICK_FILE"])
    starts = Path(os.environ["START_FILE"]) if os.environ.get("START_FILE") else None
    seconds = float(os.environ.get("TICK_SECONDS", "60"))
    worker = Worker(pool="default", version="1.0", worker_id=sys.argv[1], concurrency=1)

    @worker.task("tick.step")
    def step(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        if starts is not None:
            with starts.open("a") as started:
                started.write(f"{ctx.task_id} {ctx.assignment.lease_epoch} {sys.argv[1]}\n")
        deadline = time.monotonic() + seconds
        with ticks.open("a") as out:
            while time.monotonic() < deadline:
                if ctx.cancelled:
                    out.write(f"cancelled {time.time()}\n")
                    return {}
                out.write(f"{time.time()}\n")
                out.flush()
                time.sleep(0.1)
        return {"ticked": f"{seconds:g} s", "by": sys.argv[1]}

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run(stop)


if __name__ == "__main__":
    main()
