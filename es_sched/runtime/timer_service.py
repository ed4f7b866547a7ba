"""The timer role: fires the durable timers of the compacted ``timers`` topic when they are due.

Guarantees:

- **No timer is lost across a restart or rebalance.** On assignment the timers of a partition are
  rebuilt from the *whole* partition (``read_committed``, first offset to the end), never from
  the group's committed offsets; the group consumer then continues exactly where the rebuild
  stopped. A later record with the same key replaces the earlier one (it never fires at the old
  time); a tombstone removes it.
- **Fire once, Kafka to Kafka.** Due timers are fired in one transaction
  (``transactional.id = <prefix>-timers-<instance>``) that produces each ``timer.fired`` input to
  ``commands``, a tombstone for each timer key, and the consumer positions with the group metadata
  (KIP-447). Offsets are committed only there, and only for monitoring: state never depends on
  them. ``input_id = timer:<timer id>:<due_at>``, so the decider drops a duplicate fire.
- **Our tombstone never erases a newer timer for good.** Each tombstone names the offset of the
  record it deletes (header ``timer.offset``). If a newer record for the key was written before
  it (the decider pushed a timeout back while we fired), that record is written again.
- **Poison records** (undecodable, or not a valid ``timer.fired``) go to ``dead-letters`` with
  origin headers, plus a tombstone if still current, in the next transaction.
- An abortable transaction error aborts and retries on the next tick; any other one re-creates
  the producer (fencing its predecessor).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from es_sched.domain.commands import FireTimer
from es_sched.domain.timers import Timer, timer_input
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka import clients
from es_sched.kafka.dead_letters import header_map, headers_for
from es_sched.kafka.topics import topics_for
from es_sched.metrics import LagGauge, Registry
from es_sched.serialization.codec import decode_input, encode_input
from es_sched.serialization.records import decode_timer
from es_sched.settings import Settings

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
TOMBSTONE_OF = "timer.offset"  # header: offset of the record a tombstone of ours deletes
TICK_S = 0.1
MAX_FIRES = 1000  # per transaction
ROLE = "timer-service"


@dataclass(frozen=True, eq=False)
class Entry:
    """One live timer record: the decoded timer and where its record sits."""

    timer: Timer
    partition: int
    offset: int
    raw: bytes


class TimerHeap:
    """The live timers of the assigned partitions: the latest record per key, ordered by due time.

    Pure: no Kafka, no clock. ``rewrites`` holds records a tombstone of ours erased in Kafka
    although they are newer than the record it was meant for; the service writes them again.
    """

    def __init__(self) -> None:
        self._live: dict[str, Entry] = {}
        self._heap: list[tuple[datetime, int, Entry]] = []
        self._seq = itertools.count()
        self.rewrites: dict[str, Entry] = {}

    def __len__(self) -> int:
        return len(self._live)

    def get(self, key: str) -> Entry | None:
        return self._live.get(key)

    def put(self, entry: Entry) -> None:
        key = entry.timer.timer_id
        self._live[key] = entry
        self.rewrites.pop(key, None)
        heapq.heappush(self._heap, (entry.timer.due_at, next(self._seq), entry))
        if len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def tombstone(self, key: str, of_offset: int | None = None) -> None:
        """Delete ``key``; ``of_offset`` is the record one of our own tombstones meant to delete."""
        live = self._live.get(key)
        if live is not None and of_offset is not None and live.offset != of_offset:
            self.rewrites[key] = live  # a newer record came first: Kafka lost it, we did not
            return
        self._live.pop(key, None)
        self.rewrites.pop(key, None)

    def fired(self, entry: Entry) -> None:
        """Forget a fired timer, unless a newer record for its key arrived meanwhile."""
        key = entry.timer.timer_id
        if self._live.get(key) is entry:
            del self._live[key]
        if self.rewrites.get(key) is entry:
            del self.rewrites[key]

    def due(self, now: datetime) -> list[Entry]:
        """Live timers due at ``now``, earliest first (they stay until ``fired``)."""
        taken = []
        while self._heap and self._heap[0][0] <= now:
            item = heapq.heappop(self._heap)
            if self._live.get(item[2].timer.timer_id) is item[2]:
                taken.append(item)  # stale items (replaced or deleted) are dropped here
        for item in taken:
            heapq.heappush(self._heap, item)
        return [item[2] for item in taken]

    def size(self, partition: int) -> int:
        return sum(1 for e in self._live.values() if e.partition == partition)

    def drop_partitions(self, partitions: set[int]) -> int:
        gone = [k for k, e in self._live.items() if e.partition in partitions]
        for key in gone:
            del self._live[key]
            self.rewrites.pop(key, None)
        self._compact()
        return len(gone)

    def _compact(self) -> None:
        live = {id(e) for e in self._live.values()}
        self._heap = [item for item in self._heap if id(item[2]) in live]
        heapq.heapify(self._heap)


def parse_timer(key: str, value: bytes) -> Timer:
    """A timer record's value; ``SchemaError`` if it would not make a valid ``timer.fired``."""
    timer = decode_timer(value)  # validated against schemas/records/timer.v1.json
    if timer.timer_id != key:
        raise SchemaError(f"timer_id {timer.timer_id!r} differs from the record key {key!r}")
    if timer.due_at.tzinfo is None:
        raise SchemaError("due_at has no timezone")
    decode_input(encode_input(fire_input(timer)))  # the one schema the decider will apply
    return timer


def fire_input(timer: Timer) -> FireTimer:
    return timer_input(timer)  # the domain owns the deterministic input id


class TimerService:
    def __init__(
        self,
        settings: Settings,
        clock: Clock = lambda: datetime.now(UTC),
        registry: Registry | None = None,
    ) -> None:
        self._bootstrap = settings.kafka.bootstrap_servers
        self._topics = topics_for(settings)
        prefix = settings.kafka.topic_prefix
        self._group = f"{prefix}-timers"
        self._txn_id = f"{prefix}-timers-{settings.runtime.instance}"
        self._txn_ms, self._clock = settings.runtime.transaction_timeout_ms, clock
        self.heap = TimerHeap()
        self._poison: dict[str, tuple[Message, SchemaError]] = {}
        self.fired_total = 0
        r = registry or Registry()
        self.m_fired = r.counter("es_sched_timers_fired_total", "Timers fired.")
        self.m_pending = r.gauge("es_sched_timers_pending", "Timers waiting to fire.")
        self.lag = LagGauge(r, "timers")

    def run(self, stop: threading.Event) -> None:
        """Fire timers until ``stop`` is set; raises ``InfrastructureError`` if Kafka fails."""
        cons = clients.consumer(self._bootstrap, self._group)
        producer = self._new_producer()
        revoke = self._on_revoke
        cons.subscribe([self._topics.timers], self._on_assign, revoke, on_lost=revoke)
        try:
            while not stop.is_set():
                self._drain(cons)
                producer = self._fire(cons, producer)
                if self.lag.update(cons):
                    self.m_pending.set(len(self.heap))
        finally:
            cons.close()

    def _new_producer(self) -> Producer:
        extra = {"transaction.timeout.ms": self._txn_ms}
        p = clients.producer(self._bootstrap, self._txn_id, **extra)
        try:
            p.init_transactions(self._txn_ms / 1000)
        except KafkaException as exc:
            raise InfrastructureError(f"timer producer {self._txn_id}: {exc}") from exc
        return p

    # -- state ------------------------------------------------------------------------------
    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        started = time.monotonic()
        self._restore(partitions)
        for tp in partitions:
            log.info(
                "timers[%d]: restored %d timers up to offset %d",
                tp.partition, self.heap.size(tp.partition), tp.offset,
            )  # fmt: skip
        log.info("restored %d partitions in %.2f s", len(partitions), time.monotonic() - started)
        cons.assign(partitions)

    def _on_revoke(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        parts = {tp.partition for tp in partitions}
        dropped = self.heap.drop_partitions(parts)
        self._poison = {k: v for k, v in self._poison.items() if v[0].partition() not in parts}
        log.info("timers%s revoked: dropped %d timers", sorted(parts), dropped)

    def _restore(self, partitions: list[TopicPartition]) -> None:
        """Apply whole partitions (to their committed end); point each ``tp`` just after it."""
        topic, pending = self._topics.timers, {tp.partition: tp for tp in partitions}
        extra = {"enable.partition.eof": True, "fetch.wait.max.ms": 50}
        c = clients.consumer(self._bootstrap, None, **extra)
        try:
            c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
            while pending:
                msg = c.poll(30.0)
                if msg is None:
                    raise InfrastructureError(f"restoring {topic}{sorted(pending)} stalled")
                err, part = msg.error(), msg.partition()
                if part not in pending:
                    continue  # already at its end: the group consumer takes it from there
                if err is not None and err.code() == KafkaError._PARTITION_EOF:
                    end = c.position([TopicPartition(topic, part)])[0].offset
                    pending.pop(part).offset = end
                else:
                    self._apply(msg)
        except KafkaException as exc:
            raise InfrastructureError(f"restoring {topic}: {exc}") from exc
        finally:
            c.close()

    def _drain(self, cons: Consumer) -> None:
        msg = cons.poll(TICK_S)
        for _ in range(10_000):
            if msg is None:
                return
            self._apply(msg)
            msg = cons.poll(0)

    def _apply(self, msg: Message) -> None:
        err = msg.error()
        if err is not None:
            if err.fatal():
                raise InfrastructureError(f"timers consumer: {err}")
            log.warning("timers consumer: %s", err)
            return
        raw_key, value = msg.key(), msg.value()
        key = raw_key.decode(errors="replace") if raw_key else f"@{msg.partition()}:{msg.offset()}"
        self._poison.pop(key, None)  # superseded: only the current record of a key matters
        if value is None:
            of = header_map(msg).get(TOMBSTONE_OF, "")
            self.heap.tombstone(key, int(of) if of.isdigit() else None)
            return
        try:
            timer = parse_timer(key, value)
        except SchemaError as exc:
            self._poison[key] = (msg, exc)
            return
        self.heap.put(Entry(timer, int(msg.partition() or 0), int(msg.offset() or 0), value))

    # -- firing -----------------------------------------------------------------------------
    def _fire(self, cons: Consumer, producer: Producer) -> Producer:
        due = self.heap.due(self._clock())[:MAX_FIRES]
        firing = {e.timer.timer_id for e in due}
        rewrites = [e for k, e in self.heap.rewrites.items() if k not in firing]
        poison = list(self._poison.items())
        if not (due or rewrites or poison):
            return producer
        timers = self._topics.timers
        try:
            producer.begin_transaction()
            for e in due:
                value = encode_input(fire_input(e.timer))
                producer.produce(self._topics.commands, key=e.timer.workflow_id, value=value)
                self._tombstone(producer, e.timer.timer_id, e.partition, e.offset)
            for e in rewrites:
                producer.produce(timers, key=e.timer.timer_id, value=e.raw, partition=e.partition)
            for key, (msg, exc) in poison:
                producer.produce(
                    self._topics.dead_letters, key=msg.key(), value=msg.value(),
                    headers=headers_for(msg, str(exc), type(exc).__name__, ROLE),
                )  # fmt: skip
                if msg.key() and self.heap.get(key) is None:
                    self._tombstone(producer, msg.key(), msg.partition() or 0, msg.offset() or 0)
            positions = [tp for tp in cons.position(cons.assignment()) if tp.offset >= 0]
            if positions:
                producer.send_offsets_to_transaction(
                    positions, cons.consumer_group_metadata(), self._txn_ms / 1000
                )
            producer.commit_transaction(self._txn_ms / 1000)
        except (KafkaException, BufferError) as exc:
            return self._recover(producer, exc)
        for e in due:
            self.heap.fired(e)
        for e in rewrites:
            if self.heap.rewrites.get(e.timer.timer_id) is e:
                del self.heap.rewrites[e.timer.timer_id]
        for key, item in poison:
            if self._poison.get(key) is item:
                del self._poison[key]
        self.fired_total += len(due)
        self.m_fired.inc(len(due))
        log.info(
            "fired %d timers (%d in total), rewrote %d, dead-lettered %d; %d pending",
            len(due), self.fired_total, len(rewrites), len(poison), len(self.heap),
        )  # fmt: skip
        return producer

    def _tombstone(self, producer: Producer, key: str | bytes | None, part: int, of: int) -> None:
        headers: dict[str, str | bytes | None] = {TOMBSTONE_OF: str(of)}
        producer.produce(self._topics.timers, key=key, value=None, partition=part, headers=headers)

    def _recover(self, producer: Producer, exc: Exception) -> Producer:
        err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
        if err is None or not err.fatal():
            try:
                producer.abort_transaction(self._txn_ms / 1000)
                log.warning("timer transaction aborted, retrying next tick: %s", err or exc)
                return producer
            except KafkaException as abort_exc:
                log.warning("abort failed (%s)", abort_exc)
        log.error("timer producer unusable (%s): re-creating it", err or exc)
        return self._new_producer()
