"""The dispatcher's inputs: each topic's records read into the core (the module docstring of
``es_sched.dispatch.dispatcher`` lists the topics and what each record means).

``Inputs`` is the reading half of ``Dispatcher``: it decodes (a poison record goes to the
dead-letter topic), then updates the queues, the fleet and the leases. What it needs of the
role, and the three role operations it calls, are declared below.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, Message

from es_sched.dispatch import config as dispatch_config
from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import DispatchCore
from es_sched.dispatch.core.placement import Need
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.dispatch.journal import LeaseJournal
from es_sched.dispatch.output import Output
from es_sched.dispatch.ready_offsets import ReadyOffsets
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import Topics
from es_sched.serialization import decode_task_end, wire
from es_sched.serialization.partial import LEASE_ENDED
from es_sched.settings import DispatchSettings

log = logging.getLogger("es_sched.dispatcher")
READY_BATCH = 500  # ready records read in one tick at most
RELEASED_KEPT = 10_000  # tasks let go on a worker's word, kept for a late task.lease_expired


def _text(key: str | bytes | None) -> str:
    return key.decode() if isinstance(key, bytes) else (key or "")


def _raw(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


class Inputs:
    # The role's parts this half reads into (set by ``Dispatcher``).
    core: DispatchCore
    offsets: ReadyOffsets
    journal: LeaseJournal
    output: Output
    topics: Topics
    dispatch_settings: DispatchSettings
    clock: Callable[[], datetime]
    ready_at: dict[str, float]
    # task id -> (ready partition, task, lease epoch) of tasks let go on a worker's status
    released: OrderedDict[str, tuple[int, ReadyTask, int]]
    ready: Consumer
    config: Tail
    status: Tail
    events: Tail

    def _finished(self, task_id: str) -> None:
        raise NotImplementedError

    def _to_worker(self, worker_id: str, value: bytes, now: datetime) -> None:
        raise NotImplementedError

    def _pool_topic(self, pool: str) -> None:
        raise NotImplementedError

    def read_inputs(self, wait_s: float) -> None:
        """What arrived on each topic since the last tick; ready waits up to ``wait_s`` for
        its first record, then takes what else is there without waiting (ADR 31).

        ``consume(500, wait_s)`` would wait the whole ``wait_s`` unless 500 records came: at
        half load every ready record waited for the end of its tick, up to 20 ms. ``poll``
        returns as soon as one arrives, and under load the records that arrived meanwhile
        make the batch: prompt when idle, batched when busy."""
        for msg in self.config.poll():
            self._on_config(msg)
        now = self.clock()
        for msg in self.status.poll():
            self._on_status(msg, now)
        for msg in self.events.poll():
            self._on_event(msg)
        first = self.ready.poll(wait_s)
        if first is None:
            return
        self._on_ready(first)
        for msg in self.ready.consume(READY_BATCH - 1, 0):
            self._on_ready(msg)

    def _on_ready(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise InfrastructureError(f"reading {self.topics.ready}: {err}")
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("reading %s: %s", self.topics.ready, err)
            return
        tp, offset = (msg.topic() or "", msg.partition() or 0), msg.offset() or 0
        self.offsets.read(tp, offset)
        kind, ms = msg.timestamp()
        at = ms / 1000 if kind and ms > 0 else None
        try:
            task = dispatch_records.ready_task(
                _raw(msg.value()),
                datetime.fromtimestamp(at, UTC) if at else None,
                self.clock(),
                tp[1],
            )
        except SchemaError as exc:
            self.output.dead(msg, exc)
            return
        if task.task_id in self.journal or self.offsets.stale(task.task_id, task.attempt):
            return  # re-delivered while we hold it (or its journal does), or after it ended
        self.released.pop(task.task_id, None)
        self.journal.track(task, tp[1])
        self.offsets.queued(tp, task.task_id, offset)
        self.ready_at[task.task_id] = at or time.time()
        self.core.enqueue(task)

    def _on_status(self, msg: Message, now: datetime) -> None:
        key, value = _text(msg.key()), _raw(msg.value())
        if value is None:
            if "/" not in key:  # a worker left; its leases expire unless it comes back
                self.core.fleet.remove(key)
            return
        try:
            record = wire.decode(value)
            view = (
                dispatch_records.worker_view(record, now, self.dispatch_settings.dead_after_s)
                if isinstance(record, wire.WorkerStatus)
                else None
            )
        except SchemaError as exc:
            self.output.dead(msg, exc)
            return
        if isinstance(record, wire.Progress):
            self.core.leases.heartbeat(record.worker_id, now)
        elif isinstance(record, wire.WorkerStatus) and view is not None:
            self._pool_topic(view.pool)
            self.core.fleet.upsert(view)
            self.core.observe(record.worker_id, set(record.running), Need.of(record.used))
            if view.last_seen != now:
                return  # a stale report read at start-up is no heartbeat
            self.core.leases.heartbeat(record.worker_id, now)
            running, grace = set(record.running), self.dispatch_settings.heartbeat_s
            for lease in self.core.leases.held_by(record.worker_id):
                if lease.task_id not in running and (
                    (now - lease.started_at).total_seconds() >= grace
                ):
                    self._let_go(lease.task_id, lease.epoch)  # the worker no longer runs it

    def _let_go(self, task_id: str, epoch: int) -> None:
        """Free a task its worker no longer lists, with no outcome read yet, and keep it a
        while: if the decider ended that lease (a declined task, ADR 24 a), the task's
        re-queued ready record may have come while we still held it (skipped as a duplicate)
        and its ``task.lease_expired`` only now; that event then queues it again."""
        held = self.journal.tasks.get(task_id)
        if held is not None:
            self.released[task_id] = (held[0], held[1], epoch)
            self.released.move_to_end(task_id)
            while len(self.released) > RELEASED_KEPT:
                self.released.popitem(last=False)
        self._finished(task_id)

    def _requeue_released(self, task_id: str, epoch: int) -> None:
        """The decider ended a lease we had let go already (``_let_go``): queue the task
        again, unless its ready record came back meanwhile or it ended."""
        found = self.released.pop(task_id, None)
        if found is None or found[2] != epoch:
            return
        partition, task, _ = found
        if self.offsets.stale(task_id, task.attempt):
            return
        self.journal.track(task, partition)
        self.journal.queued(task_id, epoch, self.clock())
        self.ready_at[task_id] = time.time()
        self.core.enqueue(task, front=True)
        log.info("task %s: lease %d ended after its worker let it go; queued again", task_id, epoch)

    def _given_back(self, task_id: str, epoch: int) -> None:
        """The decider ended the lease we still hold (its worker declined it, ADR 24 a): queue
        the task again now. Its re-queued ready record may come first and is skipped while we
        hold the task, so waiting for the worker's status to free it would strand it until
        the reconciler's requeue timer (ADR 15). A lease we took back ourselves is gone already."""
        lease = self.core.given_back(task_id, epoch)
        if lease is not None:
            self.journal.queued(task_id, epoch, self.clock())
            log.info("task %s: lease %d given back by %s", task_id, epoch, lease.worker_id)

    def _on_config(self, msg: Message) -> None:
        try:
            change = dispatch_config.parse(_text(msg.key()), _raw(msg.value()))
        except SchemaError as exc:
            self.output.dead(msg, exc)
            return
        dispatch_config.apply(self.core, change, self.dispatch_settings.policy)
        if change.kind == "pool" and change.value is not None:
            self._pool_topic(change.value["pool"])
        log.info("config %s:%s = %s", change.kind, change.subject, change.value)

    def _on_event(self, msg: Message) -> None:
        try:
            found = decode_task_end(_raw(msg.value()))
        except SchemaError as exc:
            log.warning("events %s@%s: %s", msg.partition(), msg.offset(), exc)
            return
        if found is None:
            return
        task_id, kind, epoch = found
        if task_id not in self.journal:
            if kind == LEASE_ENDED:
                self._requeue_released(task_id, epoch)
            else:
                self.released.pop(task_id, None)
            return
        if kind == LEASE_ENDED:
            self._given_back(task_id, epoch)
            return
        lease = self.core.leases.leases.get(task_id)
        cancel = dispatch_records.stop_on_worker(lease, kind) if lease is not None else None
        if lease is not None and cancel is not None:  # within this tick, not at lease expiry
            self._to_worker(lease.worker_id, wire.encode(cancel), self.clock())
            log.info("task %s %s: cancel sent to %s", task_id, cancel.reason, lease.worker_id)
        flight = self.core.in_flight.get(task_id)
        if flight is not None:
            self.offsets.ended(task_id, flight.task.attempt)
        if flight is not None and kind in ("task.failed", "task.completed"):
            # A worker failing most of its recent tasks is blacklisted for a cool-down.
            worker = flight.placement.worker_id
            if self.core.fleet.record_outcome(worker, kind == "task.failed", self.clock()):
                log.warning("worker %s blacklisted: recent failure rate over the threshold", worker)
        self._finished(task_id)
