"""A worker process for the stale-worker tests: its handler takes ``SLOW_WORKER_S`` seconds and
up to ``SLOW_WORKER_CONCURRENCY`` (default 2) handlers run at once.

Run as ``python -m tests.integration.slow_worker WORKER_ID`` with the test's ES_SCHED_* env.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from typing import Any

from es_sched.workers import TaskContext, Worker


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s: %(message)s")
    concurrency = int(os.environ.get("SLOW_WORKER_CONCURRENCY", "2"))
    worker = Worker(pool="default", version="1.0", worker_id=sys.argv[1], concurrency=concurrency)
    pause = float(os.environ.get("SLOW_WORKER_S", "0"))

    @worker.task("slow.step")
    def step(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        logging.getLogger("slow_worker").info("working on %s attempt %s", ctx.task_id, ctx.attempt)
        time.sleep(pause)
        return {"by": sys.argv[1]}

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run(stop)


if __name__ == "__main__":
    main()
