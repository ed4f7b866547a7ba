"""Two conductor-python workers for ``test_api_workers``: module-level, as the SDK's
``TaskHandler`` starts each in a spawned process that imports them by name. No
``from __future__ import annotations``: the SDK converts inputs by the parameters' annotations,
which must be types, not strings."""

from typing import Any

from conductor.client.worker.worker_task import worker_task


@worker_task(task_definition_name="http.a", poll_interval_millis=50)  # type: ignore[untyped-decorator]
def step_a(name: str = "") -> dict[str, Any]:
    return {"x": 42}


@worker_task(task_definition_name="http.b", poll_interval_millis=50)  # type: ignore[untyped-decorator]
def step_b(x: int = 0) -> dict[str, Any]:
    return {"done": True, "x": x}
