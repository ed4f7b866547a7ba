"""Worker SDK: register handlers for task types and serve a pool's assignments.

    worker = Worker(pool="gpu", version="1.4.0", concurrency=2)

    @worker.task("transcode", resources={"gpu": 1})
    def transcode(ctx: TaskContext, input: dict) -> dict:
        subprocess.run([...], env=ctx.env, check=True)  # pinned to ctx.gpu
        ctx.progress(50, "half way")
        ctx.log("encoded 1080p")  # sent with the outcome (ADR 60)
        ctx.raise_if_cancelled()
        return {"uri": ...}

    worker.run(stop)  # until stop is set, then a graceful shutdown

Sync handlers run in a thread pool, ``async def`` handlers on one asyncio loop; together at most
``concurrency`` run at once (further assignments wait in order, and the partition is paused while
that backlog is full). Reports go to ``<prefix>.task-results`` as decider inputs: started once
the handler has run ``started_after_s`` (a shorter task's start travels with its outcome, ADR 44),
then completed with its return value, or failed: ``TaskFailure`` says whether it is retryable,
``HostFault`` that the worker's host failed (it counts against the worker, ADR 58), any other
exception is retryable, blames no one and sends its traceback (bounded). Lines of ``ctx.log``
go with the outcome, bounded (``es_sched.workers.tasklogs``, ADR 60). A ``cancel`` record sets
``ctx.cancelled`` and cancels an async handler's asyncio task; once the handler has ended, the
worker reports ``worker.task_cancelled`` (the decider records it, nothing more: the dispatcher
already took the lease back, ADR 5). Nothing starts whose lease has ended
(``es_sched.workers.stale``): before a start the worker reads its partition to the end, and
skips, reporting it cancelled, an assignment whose cancel it has read or whose lease expired
while it was not heartbeating.
A type with no handler fails non-terminally (another worker may serve it); a return value
that is not a JSON object fails terminally. Every ``heartbeat_s`` (default: the dispatcher's
``ES_SCHED_DISPATCH_HEARTBEAT_S``) a ``WorkerStatus`` listing running and queued task ids goes
to ``<prefix>.worker-status``; an unreadable assignments record goes to the dead letters.
The status carries the public half of a key the worker makes at start (ADR 74): the
dispatcher seals each lease token to it, the worker opens it on reading, and an assignment
sealed to another key (its previous process's) is dead-lettered, never run.

Shutdown (``stop`` set): no new assignment starts (queued and newly read ones are handed back
with a non-terminal failure), running tasks get ``grace_s`` to finish and report; the rest are
cancelled and handed back with a non-terminal ``worker.task_failed``. The position is committed
and a tombstone for the worker's status key says it left.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from typing import Any, TypeVar

from confluent_kafka import Message

from es_sched.domain import commands as c
from es_sched.errors import SchemaError
from es_sched.kafka.connection import connection, worker_principal
from es_sched.kafka.topics import assignment_topic, topics_for
from es_sched.metrics import Registry
from es_sched.roster import same_deployment
from es_sched.serialization import sealed, wire
from es_sched.settings import Settings, load_settings
from es_sched.workers import reports, runner
from es_sched.workers.admission import admits, use_of
from es_sched.workers.capacity import Capacity, discover, nvml_gpus
from es_sched.workers.context import (
    Handler,
    HostFault,
    Running,
    TaskCancelled,
    TaskContext,
    TaskFailure,
    as_task,
    outcome,
)
from es_sched.workers.stale import Stale, StaleLeases

__all__ = [
    "HANDED_BACK",
    "HostFault",
    "TaskCancelled",
    "TaskContext",
    "TaskFailure",
    "Worker",
]
log = logging.getLogger(__name__)
HANDED_BACK = reports.HANDED_BACK
JSON = dict[str, Any]
F = TypeVar("F", bound=Callable[..., Any])


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
        started_after_s: float | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.pool, self.version, self.concurrency = pool, version, concurrency
        self.worker_id = worker_id or default_worker_id()
        self.settings = settings or load_settings()
        self.deployment = self.settings.system.deployment_id  # ADR 63
        # This process's key: its lease tokens come sealed to it (ADR 74); a restart makes a
        # new one, and the dispatcher takes back what was sealed to the old.
        self.lease_key = sealed.LeaseKey()
        # The dispatcher's heartbeat: it releases a lease missing from our status that long.
        self.heartbeat_s = heartbeat_s or self.settings.dispatch.heartbeat_s
        self.labels, self.grace_s = dict(labels or {}), grace_s
        after = started_after_s
        self.started_after_s = self.settings.worker.started_after_s if after is None else after
        self.capacity, self._refresh_gpus = capacity, capacity is None
        self.handlers: dict[str, Handler] = {}
        self.ready = threading.Event()  # set once the partition is assigned and announced
        self._lock = threading.Lock()
        self._running: dict[str, Running] = {}
        self._pending = runner.Backlog()
        self._stale = StaleLeases(self.heartbeat_s)
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
        # A worker is its pool's principal (ADR 72) unless the process names another.
        own = connection(kafka, kafka.principal or worker_principal(self.pool))
        self._reporter = reports.Reporter(own, topics_for(self.settings))
        reader = runner.AssignmentReader(
            own,
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
        next_beat = time.monotonic() + self.heartbeat_s
        while not stop.is_set():
            self._start_pending(reader)
            # bound the backlog; the dispatcher normally respects capacity
            reader.pause(len(self._pending) >= self.concurrency)
            msg = reader.poll(0.05)
            if msg is not None:
                self._on_record(msg, stopping=False)
            self._report_starts()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.heartbeat_s
                self._heartbeat()
                reader.commit(self._pending.commit_point())
            self._reporter.poll()
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
            self._report_starts()
            if time.monotonic() >= next_beat:
                next_beat = time.monotonic() + self.heartbeat_s
                self._heartbeat()
        with self._lock:  # from here on a handler that returns reports nothing (_finish)
            leftovers = list(self._running.values())
            self._running.clear()
            for run in leftovers:
                run.handed_back = True
        for run in leftovers:
            self._stop_handler(run, HANDED_BACK)
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
            sent_at=reports.now_iso(),
            deployment=self.deployment,
            lease_key=self.lease_key.public,
        )
        self._reporter.status(status, self.worker_id)
        self._stale.beat()
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
        if isinstance(record, wire.Assignment):
            opened = runner.unseal(record, self.lease_key, msg, self._reporter)
            if opened is None:
                return
            record = opened
        match record:
            case wire.Assignment() if not same_deployment(record.deployment, self.deployment):
                self._foreign(msg, record)
            case wire.Assignment() if stopping:
                self._reporter.hand_back(record, self.worker_id)
            case wire.Assignment():
                if not self._known(record):
                    self._pending.add(record, offset)
            case wire.Cancel():
                self._cancel(record)
            case _:
                log.warning("ignoring a %s record on the assignments topic", record.kind)

    def _foreign(self, msg: Message, a: wire.Assignment) -> None:
        """An assignment of another deployment's dispatcher (ADR 63): never run, never
        reported to that deployment's decider; a dead letter says why, and the lease runs out
        there (the dispatcher leaves this worker out of its fleet from its next report)."""
        reason = (
            f"deployment mismatch: assignment of {a.task_id} from deployment "
            f"{a.deployment!r}, this worker ({self.worker_id}) belongs to {self.deployment!r}"
        )
        log.error("%s: not run", reason)
        self._reporter.dead_letter(msg, reason, "DeploymentMismatch")

    def _known(self, a: wire.Assignment) -> bool:
        with self._lock:
            run = self._running.get(a.task_id)
        same = run is not None and run.ctx.assignment.lease_epoch == a.lease_epoch
        return same or self._pending.has(a.task_id, a.lease_epoch)

    def _cancel(self, cancel: wire.Cancel) -> None:
        self._stale.cancelled(cancel.task_id, cancel.lease_epoch)
        waiting = self._pending.drop(cancel.task_id, cancel.lease_epoch)
        for a in waiting:
            self._skip(a, Stale(f"cancelled before it started: {cancel.reason}", cancelled=True))
        with self._lock:
            run = self._running.get(cancel.task_id)
        if run is not None and run.ctx.assignment.lease_epoch <= cancel.lease_epoch:
            log.info("task %s cancelled: %s", cancel.task_id, cancel.reason)
            self._stop_handler(run, cancel.reason)
        elif not waiting:
            log.debug("cancel for unknown task %s ignored", cancel.task_id)

    def _stop_handler(self, run: Running, reason: str) -> None:
        """Set the context's flag; an async handler's task is cancelled on its loop as well."""
        run.ctx.cancel_reason = reason
        run.ctx.cancel_event.set()

        def cancel_task() -> None:  # on the loop, where the task lives
            if run.task is not None:
                run.task.cancel()

        if self._loop is not None:
            self._loop.call_soon_threadsafe(cancel_task)

    # -- tasks ------------------------------------------------------------------------------
    def _start_pending(self, reader: runner.AssignmentReader) -> None:
        caught_up = False
        while self._pending and len(self._running) < self.concurrency:
            head = self._pending.peek()
            why = self._stale.why_not(head)
            if why is not None:
                self._skip(self._pending.pop(), why)
                continue
            with self._lock:
                running = [r.ctx.assignment for r in self._running.values()]
            assert self.capacity is not None
            if not admits(self.capacity, running, head):
                return  # another dispatcher's placement raced ours: wait for room (ADR 6)
            if not caught_up:  # a cancel behind it may already be in the partition
                # within half a heartbeat (a second at most), so heartbeats keep their pace
                budget = min(1.0, self.heartbeat_s / 2)
                if not reader.catch_up(budget, lambda msg: self._on_record(msg, stopping=False)):
                    return
                caught_up = True
                continue  # what was read may have ended the head: look again
            self._start(self._pending.pop())

    def _skip(self, a: wire.Assignment, why: Stale) -> None:
        log.info("task %s (epoch %d) not started: %s", a.task_id, a.lease_epoch, why.reason)
        self.m_tasks.inc(task_type=a.task_type, outcome="skipped")
        self._reporter.send(reports.not_started(a, self.worker_id, why))

    def _start(self, a: wire.Assignment) -> None:
        handler = self.handlers.get(a.task_type)
        if handler is None:
            reason = f"worker {self.worker_id} has no handler for {a.task_type!r}"
            self._reporter.send(reports.failed(a, self.worker_id, reason, terminal=False))
            return
        ctx = TaskContext(a, self.worker_id, self._reporter, self.settings.worker.log_max_chars)
        run = Running(ctx, time.monotonic())
        with self._lock:
            self._running[a.task_id] = run
        if self.started_after_s <= 0:
            run.start_reported = True
            self._reporter.send(reports.started(a, self.worker_id))
        future: Future[Any]
        if handler.is_async:
            assert self._loop is not None
            coro: Coroutine[Any, Any, Any] = handler.fn(run.ctx, a.input)
            future = asyncio.run_coroutine_threadsafe(as_task(run, coro), self._loop)
        else:
            future = self._threads.submit(handler.fn, run.ctx, a.input)
        future.add_done_callback(lambda f: self._finish(run, f))

    def _finish(self, run: Running, future: Future[Any]) -> None:
        """Runs on the handler's thread (or the asyncio loop's) when the handler returned."""
        ctx, a = run.ctx, run.ctx.assignment
        with self._lock:
            if run.handed_back or self._running.get(ctx.task_id) is not run:
                return  # shutdown already handed it back
            del self._running[ctx.task_id]
        self._end_progress(ctx)
        self.m_seconds.observe(time.monotonic() - run.started)
        if ctx.cancelled:
            log.info("task %s ended after cancellation: %s", ctx.task_id, ctx.cancel_reason)
            self.m_tasks.inc(task_type=a.task_type, outcome="cancelled")
            self._reporter.send(reports.cancelled(a, self.worker_id, ctx.cancel_reason))
            return
        try:
            limit = self.settings.worker.traceback_max_chars
            report = outcome(a, self.worker_id, future, True, ctx.logs.lines(), limit)
            ended = "completed" if isinstance(report, c.ReportCompleted) else "failed"
            self.m_tasks.inc(task_type=a.task_type, outcome=ended)
            self._reporter.send(report)
        except (SchemaError, TypeError, ValueError) as exc:
            reason = f"output of {a.task_type} is not JSON: {exc}"
            failed = reports.failed(a, self.worker_id, reason, True, None, True, ctx.logs.lines())
            self._reporter.send(failed)

    def _report_starts(self) -> None:
        """ADR 44: the start of a task that has run ``started_after_s``. Under the lock that
        ``_finish`` takes the run out with, so it is sent before the outcome or not at all."""
        due = time.monotonic() - self.started_after_s
        with self._lock:
            for run in self._running.values():
                if not run.start_reported and run.started <= due:
                    run.start_reported = True
                    self._reporter.send(reports.started(run.ctx.assignment, self.worker_id))

    def _end_progress(self, ctx: TaskContext) -> None:
        if ctx.progress_sent:  # the compacted topic forgets the finished task's progress
            self._reporter.tombstone(reports.progress_key(self.worker_id, ctx.task_id))
