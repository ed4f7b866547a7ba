"""A worker process for the fault tests: ``fault.step`` takes ``FLAKY_WORKER_STEP_S`` (default
0.5 s, so a killed worker holds leases) and echoes its input; ``fault.flaky`` fails its first
attempt when its input says ``fail`` (non-terminally: the task's retry delay sends it through
the retry relay) and echoes on later ones. Everything else is what ``es-sched worker --noop``
does; the failing first attempt is the one thing the no-op worker cannot do.

Run as ``python -m tests.integration.flaky_worker WORKER_ID`` with the test's ES_SCHED_* env.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from typing import Any

from es_sched.workers import TaskContext, TaskFailure, Worker, discover


def main() -> None:
    logging.basicConfig(level="INFO", format="%(asctime)s %(name)s: %(message)s")
    pause = float(os.environ.get("FLAKY_WORKER_STEP_S", "0.5"))
    # No-op tasks use nothing: declare room for many at once, as bench/e2e.py's workers do.
    capacity = replace(discover(), cpu=128.0, memory_mb=262144)
    worker = Worker(
        pool="default", version="1.0", worker_id=sys.argv[1], concurrency=32, capacity=capacity
    )

    @worker.task("fault.step")
    def step(_ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        time.sleep(pause)
        return dict(data)

    @worker.task("fault.flaky")
    def flaky(ctx: TaskContext, data: dict[str, Any]) -> dict[str, Any]:
        if ctx.attempt == 1 and data.get("fail"):
            raise TaskFailure("first attempts fail here")
        return dict(data)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    worker.run(stop)


if __name__ == "__main__":
    main()
