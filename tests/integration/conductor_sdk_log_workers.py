"""Two conductor-python 2.0.0 workers for ``test_task_logs`` (ADR 60): module-level, as the
SDK's ``TaskHandler`` starts each in a spawned process that imports them by name. Plain
functions handed to ``Worker`` (not ``@worker_task``, whose registry every ``TaskHandler`` in
the process would scan). No ``from __future__ import annotations``: the SDK converts inputs by
the parameters' annotations, which must be types, not strings."""

from typing import Any

from conductor.client.context.task_context import get_task_context


def logs_two_lines(n: int = 0) -> dict[str, Any]:
    """Lines a Conductor worker adds to its TaskResult's ``logs`` (``add_log``: ms times)."""
    ctx = get_task_context()
    ctx.add_log(f"sdk line one of {n}")
    ctx.add_log("sdk line two")
    return {"logged": 2}


def raises() -> dict[str, Any]:
    """The SDK fails the task and sends the traceback as a log line (timed in seconds)."""
    raise RuntimeError("sdk worker broke")
