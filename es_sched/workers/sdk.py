"""Worker SDK: register handlers for task types and serve a pool's assignments.

    worker = Worker(pool="gpu", version="1.4.0", concurrency=2)

    @worker.task("transcode", resources={"gpu": 1})
    def transcode(ctx: TaskContext, input: dict) -> dict:
        subprocess.run([...], env=ctx.env, check=True)  # pinned to ctx.gpu
        ctx.progress(50, "half way")
        ctx.raise_if_cancelled()
        return {"uri": ...}

    worker.run(stop)  # until stop is set, then a graceful shutdown

Sync handlers run in a thread pool, ``async def`` handlers on one asyncio loop; together at most
``concurrency`` run at once (further assignments wait in order, and the partition is paused while
that backlog is full). Reports go to ``<prefix>.task-results`` as decider inputs: started before
the handler runs, then completed with its return value, or failed: ``TaskFailure`` says whether
it is retryable, any other exception is retryable. A ``cancel`` record sets ``ctx.cancelled``;
a cancelled task is handed back without any report (ADR 5: the dispatcher already took the lease
back). A type with no handler fails non-terminally (another worker may serve it); a return value
that is not a JSON object fails terminally. Every ``heartbeat_s`` (default: the dispatcher's
``ES_SCHED_DISPATCH_HEARTBEAT_S``) a ``WorkerStatus`` listing running and queued task ids goes
to ``<prefix>.worker-status``; an unreadable assignments record goes to the dead letters.

Shutdown (``stop`` set): no new assignment starts (queued and newly read ones are handed back
with a non-terminal failure), running tasks get ``grace_s`` to finish and report; the rest are
cancelled and handed back with a non-terminal ``worker.task_failed``. The position is committed
and a tombstone for the worker's status key says it left.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from confluent_kafka import Message

from es_sched.domain import commands as c
from es_sched.errors import EsSchedError, SchemaError
from es_sched.kafka.topics import assignment_topic, topics_for
from es_sched.metrics import Registry
from es_sched.serialization import wire
from es_sched.settings import Settings, load_settings
from es_sched.workers import runner
from es_sched.workers.admission import admits, use_of
from es_sched.workers.capacity import Capacity, discover, nvml_gpus

log = logging.getLogger(__name__)
HANDED_BACK = runner.HANDED_BACK
JSON = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


class TaskCancelled(EsSchedError):
    """Raised by ``TaskContext.raise_if_cancelled`` once the dispatcher cancelled the task."""


class TaskFailure(EsSchedError):
    """Raise from a handler to fail the task; ``retryable=False`` makes the failure terminal."""

    def __init__(self, message: str, retryable: bool = True, output: JSON | None = None) -> None:
        super().__init__(message)
        self.message, self.retryable, self.output = message, retryable, output or {}


class TaskContext:
    """What a handler knows about its task, and how it reports progress or sees cancellation."""

    def __init__(self, assignment: wire.Assignment, worker_id: str, reporter: runner.Reporter):
        self.assignment, self.worker_id, self._reporter = assignment, worker_id, reporter
        self.task_id, self.attempt = assignment.task_id, assignment.attempt
        self.workflow_id, self.task_type = assignment.workflow_id, assignment.task_type
        self.input, self.gpu, self.resources = (
            assignment.input,
            assignment.gpu,
            assignment.resources,
        )
        self.cancel_event = threading.Event()
        self.progress_sent = False
        self._progress_seq = 0
        self.env = dict(os.environ)  # for subprocesses: env=ctx.env pins them to ctx.gpu
        if assignment.gpu is not None:
            self.env.update(
                CUDA_VISIBLE_DEVICES=str(assignment.gpu), CUDA_DEVICE_ORDER="PCI_BUS_ID"
            )

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()

    def raise_if_cancelled(self) -> None:
        if self.cancel_event.is_set():
            raise TaskCancelled(f"task {self.task_id} was cancelled")

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


@dataclass
class _Running:
    ctx: TaskContext
    started: float  # monotonic
    handed_back: bool = False


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Worker:
    def __init__(
        self,
        pool: str = "default",
        version: str = "0.0.0",
        worker_id: str | None = None,
        concurrency: int = 4,
        settings: Settings | None = None,
        heartbeat_s: float | None = None,
        labels: dict[str, str] | None = None,
        capacity: Capacity | None = None,
        grace_s: float = 30.0,
        registry: Registry | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.pool, self.version, self.concurrency = pool, version, concurrency
        self.worker_id = worker_id or default_worker_id()
        self.settings = settings or load_settings()
        # The dispatcher's heartbeat: it releases a lease missing from our status that long.
        self.heartbeat_s = heartbeat_s or self.settings.dispatch.heartbeat_s
        self.labels, self.grace_s = dict(labels or {}), grace_s
        self.capacity, self._refresh_gpus = capacity, capacity is None
        self.handlers: dict[str, Handler] = {}
        self.ready = threading.Event()  # set once the partition is assigned and announced
        self._lock = threading.Lock()
        self._running: dict[str, _Running] = {}
        self._pending = runner.Backlog()
        r = self.metrics = registry or Registry()
        self.m_running = r.gauge("es_sched_worker_running", "Tasks running, then queued here.")
        self.m_tasks = r.counter("es_sched_worker_tasks_total", "Tasks ended, by type and outcome.")
        self.m_seconds = r.histogram("es_sched_worker_task_seconds", "Handler run time.")

    def task(self, task_type: str, resources: JSON | None = None) -> Callable[[F], F]:
        """Register ``fn(ctx, input) -> dict`` (sync or ``async def``) for ``task_type``."""

        def register(fn: F) -> F:
            if task_type in self.handlers:
                raise ValueError(f"a handler for {task_type!r} is already registered")
            self.handlers[task_type] = Handler(task_type, fn, dict(resources or {}))
            return fn

        return register

    @property
    def running(self) -> list[str]:
        with self._lock:
            return sorted(self._running)

    # -- the loop ---------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        kafka = self.settings.kafka
        prefix = kafka.topic_prefix
        if self.capacity is None:
            self.capacity = discover()
            self._refresh_gpus = bool(self.capacity.gpus)
        self._reporter = runner.Reporter(kafka.bootstrap_servers, topics_for(self.settings))
        reader = runner.AssignmentReader(
            kafka.bootstrap_servers,
            assignment_topic(prefix, self.pool),
            self.worker_id,
            f"{prefix}-worker-{self.worker_id}",
        )
        self._threads = ThreadPoolExecutor(self.concurrency, thread_name_prefix="es-sched-task")
        self._loop: asyncio.AbstractEventLoop | None = None
        if any(h.is_async for h in self.handlers.values()):
            self._loop = asyncio.new_event_loop()
            threading.Thread(
                target=self._loop.run_forever, name="es-sched-async", daemon=True
            ).start()
        try:
            if not reader.open(stop):
                return
            self._heartbeat()
            self.ready.set()
            log.info("worker %s started (%s[%d])", self.worker_id, reader.topic, reader.partition)
            self._serve(reader, stop)
            self._shutdown(reader)
        finally:
            reader.close()
            self._threads.shutdown(wait=False, cancel_futures=True)
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self._loop.stop)
            if self._reporter.flush(30) > 0:
                log.error("worker %s: some reports were not delivered", self.worker_id)

    def _serve(self, reader: runner.AssignmentReader, stop: threading.Event) -> None:
        next_beat, paused = time.monotonic() + self.heartbeat_s, False
        while not stop.is_set():
            self._start_pending()
            full = len(self._pending) >= self.concurrency
            if full != paused:  # bound the backlog; the dispatcher normally respects capacity
                reader.pause(full)
                paused = full
            msg = reader.poll(0.05)
            if msg is not None:
                self._on_record(msg, stopping=False)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.heartbeat_s
                self._heartbeat()
                reader.commit(self._pending.commit_point())
            self._reporter.poll()
        if paused:
            reader.pause(False)

    def _shutdown(self, reader: runner.AssignmentReader) -> None:
        log.info("worker %s stopping: %d running", self.worker_id, len(self._running))
        for a in self._pending.drain():
            self._reporter.hand_back(a, self.worker_id)
        deadline = time.monotonic() + self.grace_s
        next_beat = time.monotonic() + self.heartbeat_s
        while self._running and time.monotonic() < deadline:
            msg = reader.poll(0.05)  # cancels still apply; new assignments are handed back
            if msg is not None:
                self._on_record(msg, stopping=True)
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.heartbeat_s
                self._heartbeat()
        with self._lock:  # from here on a handler that returns reports nothing (_finish)
            leftovers = list(self._running.values())
            self._running.clear()
            for run in leftovers:
                run.handed_back = True
        for run in leftovers:
            run.ctx.cancel_event.set()
            self._reporter.hand_back(run.ctx.assignment, self.worker_id)
            self._end_progress(run.ctx)
        reader.commit(self._pending.commit_point())
        self._reporter.tombstone(self.worker_id)
        log.info("worker %s stopped; handed back %d task(s)", self.worker_id, len(leftovers))

    def _heartbeat(self) -> None:
        assert self.capacity is not None
        if self._refresh_gpus:
            self.capacity = replace(self.capacity, gpus=nvml_gpus())
        cap = self.capacity
        with self._lock:
            held = [r.ctx.assignment for r in self._running.values()]
        held += self._pending.assignments()
        status = wire.WorkerStatus(
            worker_id=self.worker_id,
            pool=self.pool,
            version=self.version,
            types=sorted(self.handlers),
            cpu=cap.cpu,
            memory_mb=cap.memory_mb,
            gpus=list(cap.gpus),
            custom=dict(cap.custom),
            labels=self.labels,
            running=sorted({a.task_id for a in held}),  # queued ones too
            concurrency=self.concurrency,
            used=use_of(held).report(),
            sent_at=runner.now_iso(),
        )
        self._reporter.status(status, self.worker_id)
        self.m_running.set(len(self.running), state="running")
        self.m_running.set(len(self._pending), state="queued")

    # -- records ----------------------------------------------------------------------------
    def _on_record(self, msg: Message, stopping: bool) -> None:
        offset = msg.offset() or 0
        self._pending.seen(offset)
        if msg.value() is None:
            return
        try:
            record = wire.decode(msg.value())
        except SchemaError as exc:
            log.error(
                "unreadable record at %s[%s]@%d: %s", msg.topic(), msg.partition(), offset, exc
            )
            self._reporter.dead_letter(msg, str(exc), type(exc).__name__)
            return
        if getattr(record, "worker_id", None) != self.worker_id:
            return  # another worker whose id hashes to this partition
        match record:
            case wire.Assignment() if stopping:
                self._reporter.hand_back(record, self.worker_id)
            case wire.Assignment():
                if not self._known(record):
                    self._pending.add(record, offset)
            case wire.Cancel():
                self._cancel(record)
            case _:
                log.warning("ignoring a %s record on the assignments topic", record.kind)

    def _known(self, a: wire.Assignment) -> bool:
        with self._lock:
            run = self._running.get(a.task_id)
        same = run is not None and run.ctx.assignment.lease_epoch == a.lease_epoch
        return same or self._pending.has(a.task_id, a.lease_epoch)

    def _cancel(self, cancel: wire.Cancel) -> None:
        waiting = self._pending.drop(cancel.task_id, cancel.lease_epoch)
        with self._lock:
            run = self._running.get(cancel.task_id)
        if run is not None and run.ctx.assignment.lease_epoch <= cancel.lease_epoch:
            log.info("task %s cancelled: %s", cancel.task_id, cancel.reason)
            run.ctx.cancel_event.set()
        elif not waiting:
            log.debug("cancel for unknown task %s ignored", cancel.task_id)

    # -- tasks ------------------------------------------------------------------------------
    def _start_pending(self) -> None:
        while self._pending and len(self._running) < self.concurrency:
            with self._lock:
                running = [r.ctx.assignment for r in self._running.values()]
            assert self.capacity is not None
            if not admits(self.capacity, running, self._pending.peek()):
                return  # another dispatcher's placement raced ours: wait for room (ADR 6)
            self._start(self._pending.pop())

    def _start(self, a: wire.Assignment) -> None:
        handler = self.handlers.get(a.task_type)
        if handler is None:
            reason = f"worker {self.worker_id} has no handler for {a.task_type!r}"
            self._reporter.send(runner.failed(a, self.worker_id, reason, terminal=False))
            return
        run = _Running(TaskContext(a, self.worker_id, self._reporter), time.monotonic())
        with self._lock:
            self._running[a.task_id] = run
        self._reporter.send(runner.started(a, self.worker_id))
        future: Future[Any]
        if handler.is_async:
            assert self._loop is not None
            coro: Coroutine[Any, Any, Any] = handler.fn(run.ctx, a.input)
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        else:
            future = self._threads.submit(handler.fn, run.ctx, a.input)
        future.add_done_callback(lambda f: self._finish(run, f))

    def _finish(self, run: _Running, future: Future[Any]) -> None:
        """Runs on the handler's thread (or the asyncio loop's) when the handler returned."""
        ctx, a = run.ctx, run.ctx.assignment
        with self._lock:
            if run.handed_back or self._running.get(ctx.task_id) is not run:
                return  # shutdown already handed it back
            del self._running[ctx.task_id]
        self._end_progress(ctx)
        self.m_seconds.observe(time.monotonic() - run.started)
        if ctx.cancelled:
            log.info("task %s ended after cancellation; no report", ctx.task_id)
            self.m_tasks.inc(task_type=a.task_type, outcome="cancelled")
            return
        try:
            report = self._outcome(a, future)
            outcome = "completed" if isinstance(report, c.ReportCompleted) else "failed"
            self.m_tasks.inc(task_type=a.task_type, outcome=outcome)
            self._reporter.send(report)
        except (SchemaError, TypeError, ValueError) as exc:
            reason = f"output of {a.task_type} is not JSON: {exc}"
            self._reporter.send(runner.failed(a, self.worker_id, reason, terminal=True))

    def _outcome(self, a: wire.Assignment, future: Future[Any]) -> c.WorkerReport:
        exc = None if future.cancelled() else future.exception()
        if future.cancelled():
            return runner.failed(a, self.worker_id, "handler was cancelled", terminal=False)
        if isinstance(exc, TaskFailure):
            return runner.failed(a, self.worker_id, exc.message, not exc.retryable, exc.output)
        if exc is not None:
            log.warning("task %s (%s) raised %r", a.task_id, a.task_type, exc)
            return runner.failed(a, self.worker_id, f"{type(exc).__name__}: {exc}", False)
        output = future.result()
        if output is None:
            output = {}
        if not isinstance(output, dict):
            reason = f"handler returned {type(output).__name__}, not a dict"
            return runner.failed(a, self.worker_id, reason, terminal=True)
        return runner.completed(a, self.worker_id, output)

    def _end_progress(self, ctx: TaskContext) -> None:
        if ctx.progress_sent:  # the compacted topic forgets the finished task's progress
            self._reporter.tombstone(runner.progress_key(self.worker_id, ctx.task_id))
