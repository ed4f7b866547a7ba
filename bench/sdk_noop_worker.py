"""The no-op worker bench/api_workers.py runs with conductor-python's ``TaskHandler``:
module-level, as the SDK starts each worker in a spawned process that imports it by name. The
SDK's defaults (poll interval 100 ms, update-v2) but for ``thread_count``: 32, the native
worker's concurrency in the same bench. No ``from __future__ import annotations``: the SDK
converts inputs by the parameters' annotations, which must be types."""

from typing import Any

from conductor.client.worker.worker_task import worker_task

THREADS = 32


@worker_task(task_definition_name="bench.sdk", thread_count=THREADS)  # type: ignore[untyped-decorator]
def noop() -> dict[str, Any]:
    return {}
