"""The projector roles: the events topic -> a read-model store, effectively once.

``es-sched run --role projector-pg`` and ``--role projector-search`` run this loop over a
``PgStore`` or a ``SearchStore``, each in its own consumer group (``<prefix>-projector-<name>``,
``read_committed``), so one store being down slows nothing else.

Per batch: records below the store's checkpoint of their partition are duplicates (re-delivered
after a crash between the store's commit and the Kafka commit): skipped and counted. The other
events are folded with ``views.apply`` over cached rows (loaded from the store on a miss), and
the store gets one ``Batch``: whole rows, the archive, the new checkpoints. Kafka offsets are
committed only after the store's write returned. The write runs on a writer thread while the
next batch is read, decoded and folded (ADR 32): one batch in flight at most, batches written in
order, and a batch whose workflows must be loaded from the store waits for an in-flight write of
any of them, so a load never sees rows older than the cache had. When the store is unavailable
the consumer pauses (it keeps its group membership), the write is retried (on the loop's thread)
with exponential backoff up to ``MAX_BACKOFF_S``, the lag metrics keep growing, and it resumes
where it stopped. Undecodable records go to ``dead-letters`` with their origin and are skipped
(their offset is projected).

Metrics (``es_sched_projector_*{projection}``): events projected, duplicates skipped, orphans,
lag in records and in seconds (now minus the newest projected event's time when behind), write
time, and whether the store is up.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from es_sched.domain.events import Event, WorkflowStarted
from es_sched.errors import SchemaError
from es_sched.kafka.clients import KafkaClients, watermarks
from es_sched.kafka.connection import connection
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.failures import Stopped, committed_offsets
from es_sched.kafka.stall import FetchStall
from es_sched.kafka.topics import ensure_topics, topics_for
from es_sched.metrics import LagGauge, Registry
from es_sched.projections import views
from es_sched.projections.store import Archived, Batch, Store, StoreUnavailable
from es_sched.serialization import decode_logged_event
from es_sched.settings import Settings
from es_sched.tuning import tune_gc, tune_switch

log = logging.getLogger("es_sched.projector")
BATCH_RECORDS = 2000
CATCH_UP_RECORDS = 5000  # a rebuild has no latency to keep: fewer, larger transactions
CACHE_WORKFLOWS = 100_000
MAX_BACKOFF_S = 10.0
T = TypeVar("T")


@dataclass
class _InFlight:
    """A batch handed to the writer thread, and what to do once it is in the store."""

    batch: Batch
    events: int
    last_at: datetime | None
    done: Future[float]  # the write's seconds, or what it raised


class Projector:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        registry: Registry | None = None,
        group: str | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self.settings, self.store = settings, store
        tune_gc(settings.runtime.gc_young_threshold)  # a process that projects: es_sched.tuning
        tune_switch(settings.runtime.switch_interval_us)  # its writer thread: es_sched.tuning
        self.clients = clients or KafkaClients(connection(settings.kafka))
        self.topics = topics_for(settings)
        self.topic = self.topics.events
        self.bootstrap = connection(settings.kafka)
        self.group = group or f"{settings.kafka.topic_prefix}-projector-{store.name}"
        self.cache: OrderedDict[str, views.Rows] = OrderedDict()
        self.partition_of: dict[str, int] = {}
        self.next_offset: dict[int, int] = {}  # the store's checkpoints, kept current
        self.started = threading.Event()
        self._stop = threading.Event()  # run() shares the role's
        r = registry or Registry()
        labels = {"projection": store.name}
        self.labels = labels
        self.m_events = r.counter("es_sched_projector_events_total", "Events projected.")
        self.m_dups = r.counter(
            "es_sched_projector_duplicates_skipped_total", "Re-delivered records skipped."
        )
        self.m_orphans = r.counter(
            "es_sched_projector_orphans_total", "Events of a workflow whose start is missing."
        )
        self.m_lag_s = r.gauge("es_sched_projector_lag_seconds", "Age of the projection.")
        self.m_up = r.gauge("es_sched_projector_store_up", "1 when the store accepts writes.")
        self.m_write = r.histogram(
            f"es_sched_projector_{store.name}_write_seconds", "One batch write to the store."
        )
        self.last_event_at: datetime | None = None
        self.lag = LagGauge(r, f"projector-{store.name}")
        self._writer = self._new_writer()
        self._in_flight: _InFlight | None = None
        self.stall = FetchStall()  # a fetcher that stopped after a broker outage (ADR 46)

    # -- lifecycle -------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        self._stop = stop
        self._writer = self._new_writer()
        ensure_topics(self.bootstrap, self.topics)
        self.producer = self.clients.producer()
        self.consumer: Consumer = self.clients.consumer(
            self.group, **{"session.timeout.ms": 10_000, "heartbeat.interval.ms": 2_000}
        )
        self.consumer.subscribe([self.topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        log.info("projector %s started (group %s)", self.store.name, self.group)
        self.started.set()
        try:
            while not stop.is_set():
                msgs = self.consumer.consume(BATCH_RECORDS, 0.2)
                if msgs:
                    self.project(msgs, stop)
                else:
                    self.flush(stop)  # idle: nothing to overlap the write with
                if (offsets := self.stall.check(self.consumer)) is not None:
                    self.consumer.assign(offsets)
                self._export(self.lag.update(self.consumer))
            self.flush(stop)
        except Stopped:  # stopped while a rebalance callback waited for the broker
            log.info("projector %s: stopped while waiting for Kafka", self.store.name)
        finally:
            self._writer.shutdown(wait=True)
            self.consumer.close()
            self.producer.flush(10)
            self.store.close()
            log.info("projector %s stopped: %d events", self.store.name, self.m_events.value())

    def catch_up(
        self, progress: Callable[[int, int], None] | None = None, only: list[int] | None = None
    ) -> int:
        """Project every partition (or those in ``only``), without joining a group, from the
        store's checkpoints (or the start) to the high watermarks read now; returns the records
        read. Rebuilds use it (``projections.catch_up`` splits the partitions over processes).
        """
        self.producer = self.clients.producer()
        self.consumer = self.clients.consumer(self.group)
        self._writer = self._new_writer()
        try:
            meta = self.consumer.list_topics(self.topic, timeout=30)
            parts = sorted(set(meta.topics[self.topic].partitions) & set(only or range(1 << 16)))
            stored = self.retry(lambda: self.store.checkpoints(self.topic, parts), None, poll=False)
            targets = {
                p: watermarks(self.consumer, TopicPartition(self.topic, p))[1] for p in parts
            }
            start = {p: stored.get(p, 0) for p in parts}
            self.next_offset = dict(start)
            self.consumer.assign([TopicPartition(self.topic, p, start[p]) for p in parts])
            total, read = sum(max(0, targets[p] - start[p]) for p in parts), 0
            while True:
                positions = {
                    tp.partition: tp.offset
                    for tp in self.consumer.position([TopicPartition(self.topic, p) for p in parts])
                }
                if all(positions.get(p, -1) >= targets[p] or targets[p] <= start[p] for p in parts):
                    break
                msgs = self.consumer.consume(CATCH_UP_RECORDS, 0.5)
                if msgs:
                    self.project(msgs)
                    read += len(msgs)
                    if progress is not None:
                        progress(read, total)
            self.flush()
            return read
        finally:
            self._writer.shutdown(wait=True)
            self.consumer.close()
            self.producer.flush(10)

    def _new_writer(self) -> ThreadPoolExecutor:
        return ThreadPoolExecutor(1, thread_name_prefix=f"projector-{self.store.name}-write")

    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        """The store's checkpoints are the truth: start there when Kafka's offset is behind
        nothing (a fresh group) or ahead of them (a store rebuilt or restored)."""
        parts = [tp.partition for tp in partitions]
        stored = self.retry(lambda: self.store.checkpoints(self.topic, parts), None, poll=False)
        # Retried through a broker outage (a raise here would escape consume() and stop the
        # role); only the stop flag ends the wait.
        # Every offset explicit: left unset, librdkafka's own fetch of the committed offsets can
        # stall for good (librdkafka#5586, see ``assign_at_committed``).
        committed = {
            tp.partition: tp.offset for tp in committed_offsets(cons, partitions, self._stop)
        }
        for tp in partitions:
            checkpoint = stored.get(tp.partition)
            self.next_offset[tp.partition] = checkpoint or 0
            kafka = committed[tp.partition]  # OFFSET_BEGINNING (< 0) where nothing is committed
            if checkpoint is not None and (kafka < 0 or kafka > checkpoint):
                tp.offset = checkpoint
            else:
                tp.offset = kafka
        cons.assign(partitions)
        self.stall.assigned(partitions)
        log.info("projector %s: assigned %s at %s", self.store.name, parts, stored)

    def _on_revoke(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        self.flush(self._stop)  # the batch in flight is ours: in the store, offsets committed
        gone = {tp.partition for tp in partitions}
        for wf in [wf for wf, p in self.partition_of.items() if p in gone]:
            self.cache.pop(wf, None)
            self.partition_of.pop(wf, None)
        for p in gone:
            self.next_offset.pop(p, None)

    # -- one batch -------------------------------------------------------------------------
    def project(self, msgs: list[Message], stop: threading.Event | None = None) -> None:
        batch, events = Batch(), []
        for msg in msgs:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("reading %s: %s", self.topic, err)
                continue
            part, offset = msg.partition() or 0, msg.offset() or 0
            batch.checkpoints[part] = max(batch.checkpoints.get(part, 0), offset + 1)
            if offset < self.next_offset.get(part, 0):
                batch.duplicates[part] = batch.duplicates.get(part, 0) + 1
                continue
            raw = msg.value()
            data = raw if isinstance(raw, bytes) else (raw or "").encode()
            try:
                event = decode_logged_event(data)
            except SchemaError as exc:
                self._dead(msg, exc)
                continue
            events.append(event)
            batch.archive.append(Archived(event, data, part, offset))
            self.partition_of[event.workflow_id] = part
        self._fold(events, batch)
        if not batch.checkpoints:
            return
        self.flush(stop)  # one batch in flight at most, written in order
        last_at = events[-1].occurred_at if events else None
        self._in_flight = _InFlight(
            batch, len(events), last_at, self._writer.submit(self._timed_write, batch)
        )

    def _timed_write(self, batch: Batch) -> float:
        started = time.monotonic()
        self.store.write(self.topic, batch)
        return time.monotonic() - started

    def flush(self, stop: threading.Event | None = None) -> None:
        """Wait for the batch in flight: in the store (retried here, on this thread, when the
        store was unavailable), then its checkpoints current and its Kafka offsets committed."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return
        batch = flight.batch
        try:
            seconds = flight.done.result()
            self.m_up.set(1, **self.labels)
        except StoreUnavailable:
            started = time.monotonic()
            self.retry(lambda: self.store.write(self.topic, batch), stop)
            seconds = time.monotonic() - started
        self.m_write.observe(seconds)
        for part, nxt in batch.checkpoints.items():
            self.next_offset[part] = max(self.next_offset.get(part, 0), nxt)
        self.m_events.inc(flight.events, **self.labels)
        self.m_dups.inc(sum(batch.duplicates.values()), **self.labels)
        if flight.last_at is not None:
            self.last_event_at = flight.last_at
        offsets = [TopicPartition(self.topic, p, o) for p, o in batch.checkpoints.items()]
        self.consumer.commit(offsets=offsets, asynchronous=True)

    def _fold(self, events: list[Event], batch: Batch) -> None:
        # A workflow first seen here with its start (seq 1) has no rows in the store: every
        # event of it sits at or after this offset of its partition, none below the checkpoint.
        # New workflows, most of a batch's misses, cost no load.
        first: dict[str, Event] = {}
        for ev in events:
            if ev.workflow_id not in self.cache:
                first.setdefault(ev.workflow_id, ev)
        missing = [wf for wf, ev in first.items() if not isinstance(ev.payload, WorkflowStarted)]
        if missing:
            flight = self._in_flight
            if flight is not None and not flight.batch.workflows.keys().isdisjoint(missing):
                self.flush()  # evicted while its rows are being written: load them written
            loaded = self.retry(lambda: self.store.load(missing), None)
            self.cache.update(loaded)
        for event in events:
            rows = self.cache.get(event.workflow_id)
            change = views.apply(rows, event)
            if change.refusal:
                continue  # no row; the store keeps it from the archive (Batch.archive)
            if change.orphan:
                self.m_orphans.inc(1, **self.labels)
                log.warning("event %s of unknown workflow %s", event.type, event.workflow_id)
                continue
            if change.workflow is None:
                continue  # a duplicate by version
            if rows is None:
                rows = self.cache[event.workflow_id] = views.Rows(change.workflow)
            else:
                rows.merge(change)
                self.cache.move_to_end(event.workflow_id)
            batch.workflows[event.workflow_id] = rows.workflow
            for task_id in change.tasks:
                batch.tasks[task_id] = rows.tasks[task_id]
        while len(self.cache) > CACHE_WORKFLOWS:
            wf, _ = self.cache.popitem(last=False)
            self.partition_of.pop(wf, None)

    def _export(self, lag: dict[str, int] | None) -> None:
        """Lag in seconds: how old the newest projected event is while records wait."""
        if lag is None or not lag:
            return
        seconds, last = 0.0, self.last_event_at
        if sum(lag.values()) > 0 and last is not None:
            seconds = (datetime.now(UTC) - last).total_seconds()
        self.m_lag_s.set(max(0.0, seconds), **self.labels)

    def retry(self, call: Callable[[], T], stop: threading.Event | None, poll: bool = True) -> T:
        """Call until the store answers; meanwhile the consumer is paused but polled."""
        delay, paused = 0.2, False
        while True:
            try:
                result = call()
                self.m_up.set(1, **self.labels)
                if paused:
                    self.consumer.resume(self.consumer.assignment())
                    self.stall.reset()  # paused is not stalled
                    log.info("projector %s: store is back", self.store.name)
                return result
            except StoreUnavailable as exc:
                self.m_up.set(0, **self.labels)
                if poll and not paused:
                    self.consumer.pause(self.consumer.assignment())
                    paused = True
                log.warning("projector %s: %s; retrying in %.1fs", self.store.name, exc, delay)
                if stop is not None and stop.wait(delay):
                    raise
                if stop is None:
                    time.sleep(delay)
                if paused:
                    self.consumer.poll(0)  # stays in the group; nothing arrives while paused
                    self._export(self.lag.update(self.consumer, force=True, cached=False))
                delay = min(MAX_BACKOFF_S, delay * 2)

    def _dead(self, msg: Message, exc: Exception) -> None:
        log.error(
            "undecodable event at %s[%s]@%s: %s", msg.topic(), msg.partition(), msg.offset(), exc
        )
        self.producer.produce(
            self.topics.dead_letters,
            key=msg.key(),
            value=msg.value(),
            headers=headers_for(msg, str(exc), type(exc).__name__, f"projector-{self.store.name}"),
        )
        self.producer.poll(0)
