"""What a handler sees of its task: ``TaskContext`` (input, GPU pin, progress, log lines,
cancellation) and the exceptions it raises (``TaskFailure``) or that tell it to stop
(``TaskCancelled``);
``outcome`` turns how a handler ended into the report the worker sends.
``es_sched.workers.sdk`` serves the handlers; this is their side of the contract.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from es_sched.domain import commands as c
from es_sched.errors import EsSchedError
from es_sched.serialization import wire
from es_sched.workers import reports, tasklogs

log = logging.getLogger("es_sched.workers.sdk")

JSON = dict[str, Any]


class TaskCancelled(EsSchedError):
    """Raised by ``TaskContext.raise_if_cancelled`` once the dispatcher cancelled the task."""


class TaskFailure(EsSchedError):
    """Raise from a handler to fail the task; ``retryable=False`` makes the failure terminal."""

    def __init__(self, message: str, retryable: bool = True, output: JSON | None = None) -> None:
        super().__init__(message)
        self.message, self.retryable, self.output = message, retryable, output or {}


class HostFault(TaskFailure):
    """Raise from a handler when this worker's host failed, not the task's input (a disk not
    writable, a GPU driver error, a full scratch volume): the failure is retryable (another
    worker may succeed) and it counts against this worker, whose dispatcher blacklists it when
    such faults are most of its recent outcomes (ADR 58). Any other failure never does."""

    def __init__(self, message: str, output: JSON | None = None) -> None:
        super().__init__(message, retryable=True, output=output)


class TaskContext:
    """What a handler knows about its task, and how it reports progress or sees cancellation."""

    def __init__(
        self,
        assignment: wire.Assignment,
        worker_id: str,
        reporter: reports.Reporter,
        log_max_chars: int = 32 * 1024,
    ):
        self.assignment, self.worker_id, self._reporter = assignment, worker_id, reporter
        self.task_id, self.attempt = assignment.task_id, assignment.attempt
        self.workflow_id, self.task_type = assignment.workflow_id, assignment.task_type
        self.input, self.gpu, self.resources = (
            assignment.input,
            assignment.gpu,
            assignment.resources,
        )
        self.cancel_event = threading.Event()
        self.cancel_reason = ""  # the dispatcher's, once cancelled
        self.progress_sent = False
        self._progress_seq = 0
        self.logs = tasklogs.TaskLog(log_max_chars)

    @cached_property
    def env(self) -> dict[str, str]:
        """For subprocesses: ``env=ctx.env`` pins them to ``ctx.gpu``. Built when first asked
        for: a copy of the environment per task was 3% of a no-op worker's CPU."""
        env = dict(os.environ)
        if self.gpu is not None:
            env.update(CUDA_VISIBLE_DEVICES=str(self.gpu), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        return env

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def raise_if_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise TaskCancelled(f"task {self.task_id} was cancelled")

    def log(self, message: str) -> None:
        """A line for the task's log: kept here (the newest ``ES_SCHED_WORKER_LOG_MAX_CHARS``
        characters) and sent with the outcome, so logging costs no record (ADR 60). Served
        at ``GET /api/tasks/{taskId}/log`` and on the console's task panel."""
        self.logs.add(message)

    def progress(self, percent: float, message: str = "") -> None:
        """Percent (0-100) and a message: a ``progress`` record on worker-status for the
        dispatcher and a ``worker.task_progress`` input for the workflow."""
        self._progress_seq += 1
        self._reporter.progress(
            self.assignment, self.worker_id, self._progress_seq, percent, message
        )
        self.progress_sent = True


@dataclass(frozen=True)
class Handler:
    task_type: str
    fn: Callable[[TaskContext, JSON], Any]
    resources: JSON = field(default_factory=dict)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.fn)


def outcome(
    a: wire.Assignment,
    worker_id: str,
    future: Future[Any],
    started: bool = False,
    logs: list[JSON] | None = None,
    traceback_max_chars: int = 8 * 1024,
) -> c.WorkerReport:
    """The report a handler's end makes: its dict as the output, ``TaskFailure`` as it says
    (``HostFault``: the host's fault, ADR 58), any other exception retryable, anything but a
    JSON object a terminal failure.
    ``started``: the handler's start was not reported on its own (ADR 44). ``logs`` (the
    context's lines) go with any outcome; an exception's traceback with its failure, its last
    ``traceback_max_chars`` characters, except a ``TaskFailure`` raised on purpose (one raised
    while handling another exception keeps the chain's)."""
    exc = None if future.cancelled() else future.exception()
    if future.cancelled():
        return reports.failed(a, worker_id, "handler was cancelled", False, started=started)
    if isinstance(exc, TaskFailure):
        chained = exc.__cause__ is not None or exc.__context__ is not None
        trace = tasklogs.traceback_of(exc, traceback_max_chars) if chained else ""
        host = isinstance(exc, HostFault)
        return reports.failed(
            a,
            worker_id,
            exc.message,
            not exc.retryable,
            exc.output,
            started,
            logs,
            trace,
            host_fault=host,
        )
    if exc is not None:
        log.warning("task %s (%s) raised %r", a.task_id, a.task_type, exc)
        reason, trace = (
            f"{type(exc).__name__}: {exc}",
            tasklogs.traceback_of(exc, traceback_max_chars),
        )
        return reports.failed(a, worker_id, reason, False, None, started, logs, trace)
    output = future.result()
    if output is None:
        output = {}
    if not isinstance(output, dict):
        reason = f"handler returned {type(output).__name__}, not a dict"
        return reports.failed(a, worker_id, reason, True, None, started, logs)
    return reports.completed(a, worker_id, output, started, logs)


@dataclass
class Running:
    """A handler running at the worker (``es_sched.workers.sdk``)."""

    ctx: TaskContext
    started: float  # monotonic
    handed_back: bool = False
    start_reported: bool = False
    task: asyncio.Task[Any] | None = None  # an async handler's, once it runs on the loop


async def as_task(run: Running, coro: Coroutine[Any, Any, Any]) -> Any:
    """Runs an async handler as this task, kept in ``run`` so a cancel can cancel it; the
    future ends only once the handler has unwound."""
    run.task = asyncio.current_task()
    if run.ctx.cancelled:  # cancelled before the loop got to it
        coro.close()
        raise asyncio.CancelledError
    return await coro
