"""The dispatcher role: ready tasks -> leases on workers (``es-sched run --role dispatcher``).

Inputs:
- ``ready`` in group ``<prefix>-dispatcher`` (several dispatchers share the task types: the
  topic is keyed by task name, or rate-limit key). Each record becomes a queued ``ReadyTask``;
  the partitions owned set this dispatcher's share of every tenant limit (ADR 13).
- ``worker-status`` (whole topic from the beginning, no group): a ``WorkerStatus`` updates the
  fleet and is the worker's heartbeat for all its leases; a leased task missing from its
  ``running`` list for over a heartbeat is released; a tombstone removes the worker; a
  ``Progress`` extends the worker's leases.
- ``config`` (compacted, from the beginning; ``es_sched.dispatch.config``): limits,
  bans, pools and policies, changeable at run time.
- ``events`` (``read_committed``, from the end at start): task.completed / failed / timed_out /
  canceled / completed_with_errors free the task's resources; a canceled or timed-out task
  still leased is stopped on its worker at once (``Cancel``).

Every tick (``ES_SCHED_DISPATCH_TICK_MS``): expired leases -> ``ExpireLease`` to
``task-results`` and a ``Cancel`` to the worker; new assignments -> the wire ``Assignment`` to
the pool's assignments topic (key = worker id) and ``DispatchTask`` to ``task-results`` (key =
workflow id); preemptions -> ``Cancel(preempted)`` and ``ExpireLease`` (the task is back at the
head of its queue, its attempt not counted).

Delivery: at least once. Ready offsets are committed only after the producer flushed the
records of the tasks they carried, and never past a task still waiting in the queue, so a crash
re-delivers every task not yet dispatched; the decider rejects a stale dispatch. Poison records
of ready, worker-status and config go to ``dead-letters``.

Kafka failures: a commit refused because this member fell out of its group or cannot reach the
coordinator is tried again next tick (``es_sched.dispatch.ready_offsets``); the consumer rejoins
by itself. While the broker is down records wait in the producer's queue and nothing is
committed past them; SIGTERM is still honoured within a second. A record the broker refused
for good, or a fatal client error, stops the role.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    KafkaError,
    Message,
    TopicPartition,
)

from es_sched.dispatch import config as dispatch_config
from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.engine import Assignment, DispatchCore
from es_sched.dispatch.core.leases import Lease, LeaseTable
from es_sched.dispatch.core.placement import Fleet, Need
from es_sched.dispatch.core.queues import ReadyQueues
from es_sched.dispatch.ready_offsets import ReadyOffsets
from es_sched.domain.commands import Input
from es_sched.errors import EsSchedError, InfrastructureError, SchemaError
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import assignment_topic, ensure_topic, ensure_topics, topics_for
from es_sched.metrics import LagGauge, Registry
from es_sched.serialization import encode_input, wire
from es_sched.settings import Settings

log = logging.getLogger("es_sched.dispatcher")
ROLE = "dispatcher"
GAUGE_EVERY_S = 0.5
FLUSH_S = 1.0  # one wait for deliveries; repeated until done, the stop flag checked between


def _utcnow() -> datetime:
    return datetime.now(UTC)


def _text(key: str | bytes | None) -> str:
    return key.decode() if isinstance(key, bytes) else (key or "")


def _raw(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value


class Dispatcher:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = _utcnow,
        token: Callable[[], str] = lambda: secrets.token_hex(16),
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self.settings, self.clock, self.token = settings, clock, token
        self.clients = clients or KafkaClients(settings.kafka.bootstrap_servers)
        self._stop = threading.Event()
        d = self.dispatch_settings = settings.dispatch
        self.topics = topics_for(settings)
        self.prefix = settings.kafka.topic_prefix
        self.bootstrap = settings.kafka.bootstrap_servers
        self.group = f"{self.prefix}-dispatcher"
        self.core = DispatchCore(
            queues=ReadyQueues(d.aging_s),
            fleet=Fleet(d.suspect_after_s, d.dead_after_s),
            leases=LeaseTable(d.heartbeat_s, d.lease_k),
            policies={"default": d.policy},
            preempt_after_s=d.preempt_after_s,
        )
        self.workflow_of: dict[str, str] = {}  # task id -> workflow id, queued or in flight
        self.offsets = ReadyOffsets()
        self.ready_at: dict[str, float] = {}  # task id -> ready record time (latency metric)
        self.pool_topics: set[str] = set()
        self.failures: list[str] = []
        self.started = threading.Event()  # set once subscribed (for in-process callers)
        self._gauges_at = 0.0
        r = self.registry = registry or Registry()
        self.lag = LagGauge(r, ROLE)
        self.m_depth = r.gauge("es_sched_queue_depth", "Ready tasks waiting, by type and level.")
        self.m_dispatched = r.counter("es_sched_dispatched_total", "Tasks assigned to workers.")
        self.m_expired = r.counter("es_sched_leases_expired_total", "Leases that expired.")
        self.m_limited = r.counter(
            "es_sched_rate_limited_total", "Dispatch attempts refused by a limit."
        )
        self.m_preempted = r.counter("es_sched_preemptions_total", "Tasks preempted.")
        self.m_latency = r.histogram(
            "es_sched_dispatch_latency_seconds", "Ready record time to assignment produced."
        )
        self._refused_seen: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        # The default pool's topic first, so it gets the assignment partition count (ADR 5).
        self._pool_topic("default")
        ensure_topics(self.bootstrap, self.topics)
        self.producer = self.clients.producer()
        self.config = Tail(self.bootstrap, self.topics.config, OFFSET_BEGINNING)
        self.status = Tail(self.bootstrap, self.topics.worker_status, OFFSET_BEGINNING)
        self.events = Tail(self.bootstrap, self.topics.events, OFFSET_END)
        now = self.clock()
        for msg in self.config.catch_up():
            self._on_config(msg)
        for msg in self.status.catch_up():
            self._on_status(msg, now)
        self.ready: Consumer = self.clients.consumer(
            self.group, **{"session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000}
        )
        self.ready.subscribe(
            [self.topics.ready],
            on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost,
        )  # fmt: skip
        log.info(
            "dispatcher started (group %s, %d workers)", self.group, len(self.core.fleet.workers)
        )
        self.started.set()
        try:
            while not stop.is_set():
                self.step(self.dispatch_settings.tick_ms / 1000)
        finally:
            self._flush_and_commit()
            self.ready.close()
            for tail in (self.config, self.status, self.events):
                tail.consumer.close()
            log.info("dispatcher stopped: %d dispatched", int(self.m_dispatched.value()))

    def step(self, wait_s: float) -> None:
        """One tick: read what arrived, expire, dispatch, deliver, commit."""
        for msg in self.config.poll():
            self._on_config(msg)
        now = self.clock()
        for msg in self.status.poll():
            self._on_status(msg, now)
        for msg in self.events.poll():
            self._on_event(msg)
        for msg in self.ready.consume(500, wait_s):
            self._on_ready(msg)
        now = self.clock()
        for lease in self.core.expire(now):
            self._take_back(lease, "lease expired", now)
            self.m_expired.inc()
        decisions = self.core.dispatch(now, self.token)
        assignments = [d for d in decisions if isinstance(d, Assignment)]
        for decision in decisions:
            if not isinstance(decision, Assignment):
                self._take_back(decision.victim, "preempted", now)
                self.m_preempted.inc()
        # The decider must see each DispatchTask (and so the lease) before the worker can
        # answer: both land on the workflow's task-results partition, but from two producers.
        # Delivering the DispatchTasks first makes the worker's reports always come after.
        for a in assignments:
            self._send(dispatch_records.assignment(a)[1], now)
        if assignments and not self._delivered_all():
            return  # stopping: the tasks stay uncommitted, the next owner dispatches them
        for a in assignments:
            self._assign(a, now)
        self._flush_and_commit()
        self._update_gauges()

    # -- inputs ----------------------------------------------------------------------------
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
                _raw(msg.value()), datetime.fromtimestamp(at, UTC) if at else None, self.clock(),
                tp[1],
            )  # fmt: skip
        except SchemaError as exc:
            self._dead(msg, exc)
            return
        if task.task_id in self.workflow_of or self.offsets.stale(task.task_id, task.attempt):
            return  # re-delivered while we still hold it, or after it ended
        self.workflow_of[task.task_id] = task.workflow_id
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
            self._dead(msg, exc)
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
                    self._finished(lease.task_id)  # the worker no longer runs it

    def _on_config(self, msg: Message) -> None:
        try:
            change = dispatch_config.parse(_text(msg.key()), _raw(msg.value()))
        except SchemaError as exc:
            self._dead(msg, exc)
            return
        dispatch_config.apply(self.core, change, self.dispatch_settings.policy)
        if change.kind == "pool" and change.value is not None:
            self._pool_topic(change.value["pool"])
        log.info("config %s:%s = %s", change.kind, change.subject, change.value)

    def _on_event(self, msg: Message) -> None:
        try:
            ended = dispatch_records.ended_task_and_type(_raw(msg.value()))
        except SchemaError as exc:
            log.warning("events %s@%s: %s", msg.partition(), msg.offset(), exc)
            return
        if ended is None or ended[0] not in self.workflow_of:
            return
        task_id, kind = ended
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

    def _on_assign(self, _cons: Consumer, partitions: list[TopicPartition]) -> None:
        """Tenant limits are shared by ready partition: our share follows what we own (ADR 13)."""
        parts = [tp.partition for tp in partitions]
        self.core.limits.assigned(parts, self.topics.partitions, self.clock())
        log.info("assigned %s", parts)

    def _on_revoke(self, _cons: Consumer, partitions: list[TopicPartition]) -> None:
        """Tasks still queued from these partitions are now another dispatcher's: drop them
        (their offsets are not committed, so the new owner reads them again)."""
        self._flush_and_commit()
        self._forget(partitions, "revoked")

    def _on_lost(self, _cons: Consumer, partitions: list[TopicPartition]) -> None:
        """Lost (the group moved on without us, e.g. across a broker restart): nothing can be
        committed for them any more; drop what was queued from them."""
        self._forget(partitions, "lost")

    def _forget(self, partitions: list[TopicPartition], how: str) -> None:
        parts = [tp.partition for tp in partitions]
        self.core.limits.revoked(parts, self.clock(), lost=how == "lost")
        gone = self.offsets.forget(partitions)
        self._drop_queued(gone)
        log.info("%s %s: dropped %d queued tasks", how, [tp.partition for tp in partitions],
                 len(gone))  # fmt: skip

    # -- decisions -------------------------------------------------------------------------
    def _assign(self, a: Assignment, now: datetime) -> None:
        record, _ = dispatch_records.assignment(a)  # its DispatchTask was delivered already
        pool = self.core.pools.get(a.task.task_type, "default")
        self._produce(assignment_topic(self.prefix, pool), record.worker_id,
                      wire.encode(record), now)  # fmt: skip
        self.offsets.done(a.task.task_id)
        at = self.ready_at.pop(a.task.task_id, None)
        if at is not None:
            self.m_latency.observe(max(0.0, time.time() - at))
        self.m_dispatched.inc()

    def _take_back(self, lease: Lease, reason: str, now: datetime) -> None:
        workflow_id = self.workflow_of.get(lease.task_id, "")
        cancel, expired = dispatch_records.take_back(lease, workflow_id, reason)
        self._to_worker(lease.worker_id, wire.encode(cancel), now)
        self._send(expired, now)
        log.info("took back %s (epoch %d) from %s: %s", lease.task_id, lease.epoch,
                 lease.worker_id, reason)  # fmt: skip

    def _to_worker(self, worker_id: str, value: bytes, now: datetime) -> None:
        worker = self.core.fleet.workers.get(worker_id)
        pool = worker.pool if worker is not None else "default"
        self._produce(assignment_topic(self.prefix, pool), worker_id, value, now)

    def _finished(self, task_id: str) -> None:
        if self.core.finished(task_id) is None:
            self._drop_queued({task_id})  # ended while waiting (e.g. canceled): not dispatched
        self.workflow_of.pop(task_id, None)
        self.ready_at.pop(task_id, None)

    def _drop_queued(self, task_ids: set[str]) -> None:
        if not task_ids:
            return
        old, queues = self.core.queues, ReadyQueues(self.core.queues.aging_s)
        for queue in old.by_type.values():
            for level in queue.levels:
                for rank, _, _, task in sorted(level, key=lambda e: e[:3]):
                    if task.task_id not in task_ids:
                        queues.push(task, front=rank == 0)
        self.core.queues = queues
        for task_id in task_ids:
            self.workflow_of.pop(task_id, None)
            self.ready_at.pop(task_id, None)
            self.offsets.done(task_id)

    # -- output ----------------------------------------------------------------------------
    def _send(self, inp: Input, now: datetime) -> None:
        self._produce(self.topics.task_results, inp.workflow_id, encode_input(inp), now)

    def _produce(self, topic: str, key: str, value: bytes, now: datetime) -> None:
        # The record time is the decision time, so rates are measurable on the topic itself.
        ms = int(now.timestamp() * 1000)
        self.producer.produce(
            topic, key=key.encode(), value=value, timestamp=ms, on_delivery=self._delivered
        )
        self.producer.poll(0)

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failures.append(f"{msg.topic()}: {err}")

    def _dead(self, msg: Message, exc: EsSchedError) -> None:
        log.warning("dead-lettering %s@%s/%s: %s", msg.topic(), msg.partition(), msg.offset(), exc)
        self.producer.produce(
            self.topics.dead_letters, key=msg.key(), value=msg.value(),
            headers=headers_for(msg, str(exc), type(exc).__name__, ROLE),
            on_delivery=self._delivered,
        )  # fmt: skip

    def _delivered_all(self) -> bool:
        """Wait until the producer delivered everything (a broker outage is waited out); False
        if the role was stopped first. A record the broker refused for good raises."""
        while True:
            left = self.producer.flush(FLUSH_S)
            if self.failures:
                raise InfrastructureError(
                    f"dispatcher could not deliver records: {self.failures[:3]}"
                )
            if not left:
                return True
            if self._stop.is_set():
                return False
            log.warning("dispatcher: %d records not delivered yet; waiting for the broker", left)

    def _flush_and_commit(self) -> None:
        """Deliver everything produced, then commit ready offsets up to the first task still
        waiting in each partition: a crash re-delivers exactly what was not dispatched."""
        if self._delivered_all():
            self.offsets.commit(lambda todo: self.ready.commit(offsets=todo, asynchronous=False))

    def _pool_topic(self, pool: str) -> None:
        name = assignment_topic(self.prefix, pool)
        if name not in self.pool_topics:
            ensure_topic(self.bootstrap, name, self.dispatch_settings.assignment_partitions)
            self.pool_topics.add(name)

    def _update_gauges(self) -> None:
        if time.monotonic() - self._gauges_at < GAUGE_EVERY_S:
            return
        self._gauges_at = time.monotonic()
        for task_type, levels in self.core.queues.depth().items():
            for level, n in enumerate(levels):
                self.m_depth.set(n, task_type=task_type, priority=str(level))
        for reason, total in self.core.limits.refused.items():
            new = total - self._refused_seen.get(reason, 0)
            if new > 0:
                self.m_limited.inc(new, limit=reason)
                self._refused_seen[reason] = total
        self.lag.update(self.ready, force=True)
