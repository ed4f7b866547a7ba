"""A worker process whose handler leaves a side effect every 100 ms: one line with the time in
``TICK_FILE`` while its task runs (up to 60 s), then ``cancelled <time>`` once it sees the
cancellation, so a test can tell when the side effects stopped.

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
    worker = Worker(pool="default", version="1.0", worker_id=sys.argv[1], concurrency=1)

    @worker.task("tick.step")
    def step(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        deadline = time.time() + 60
        with ticks.open("a") as out:
            while time.time() < deadline:
                if ctx.cancelled:
                    out.write(f"cancelled {time.time()}\n")
                    return {}
                out.write(f"{time.time()}\n")
                out.flush()
                time.sleep(0.1)
        return {"ticked": "60 s"}

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run(stop)


if __name__ == "__main__":
    main()
