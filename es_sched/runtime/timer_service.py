"""The timer role: fires the durable timers of the compacted ``timers`` topic when they are due.

Guarantees:

- **No timer is lost across a restart or rebalance.** On assignment the timers of a partition are
  rebuilt from the *whole* partition (``read_committed``, first offset to the end), never from
  the group's committed offsets; the group consumer then continues exactly where the rebuild
  stopped. A later record with the same key replaces the earlier one (it never fires at the old
  time); a tombstone removes it.
- **Fire once, Kafka to Kafka.** Due timers are fired in one transaction of the exactly-once
  loop (``es_sched.kafka.transactional``, ``transactional.id = <prefix>-timers-<instance>``) that
  produces each ``timer.fired`` input to ``commands``, a tombstone for each timer key, and the
  consumer positions with the group metadata (KIP-447). Offsets are committed only there, and
  only for monitoring: state never depends on them. ``input_id = timer:<timer id>:<due_at>``, so
  the decider drops a duplicate fire.
- **Our tombstone never erases a newer timer for good.** Each tombstone names the offset of the
  record it deletes (header ``timer.offset``). If a newer record for the key was written before
  it (the decider pushed a timeout back while we fired), that record is written again.
- **Poison records** (undecodable, or not a valid ``timer.fired``) go to ``dead-letters`` with
  origin headers, plus a tombstone if still current, in the next transaction.
- A transaction that did not commit (aborted, or its producer lost and re-created) leaves the
  timers held: they are fired again on the next tick, and a fire that did commit after all is
  a duplicate the decider drops. A fenced producer (another process with this instance) stops
  the role; a broker outage is waited out, also while restoring a partition.
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
    TopicPartition,
)

from es_sched.domain.commands import FireTimer
from es_sched.domain.timers import Timer, timer_input
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka import clients
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.connection import connection
from es_sched.kafka.dead_letters import header_map, headers_for
from es_sched.kafka.failures import wait
from es_sched.kafka.static_membership import StaticMember, rejoining
from es_sched.kafka.topics import topics_for
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, Out
from es_sched.metrics import LagGauge, Registry
from es_sched.serialization.codec import encode_input, input_from_dict, input_to_dict
from es_sched.serialization.records import decode_timer
from es_sched.settings import Settings

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
TOMBSTONE_OF = "timer.offset"  # header: offset of the record a tombstone of ours deletes
TICK_S = 0.1
MAX_DRAIN = 10_000  # records applied per tick
MAX_FIRES = 1000  # per transaction
RESTORE_RETRY_S = 2.0
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
    # The one schema the decider will apply, to the fields its input will have. Not through
    # JSON text, which was most of the timer service's CPU: decoded by orjson, the timer's
    # strings hold no lone surrogate, and the fields are strings, ints or None.
    input_from_dict(input_to_dict(fire_input(timer)))
    return timer


def fire_input(timer: Timer) -> FireTimer:
    return timer_input(timer)  # the domain owns the deterministic input id


class TimerService:
    def __init__(
        self,
        settings: Settings,
        clock: Clock = lambda: datetime.now(UTC),
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self._bootstrap = connection(settings.kafka)
        self._clients = clients or KafkaClients(self._bootstrap)
        self._topics = topics_for(settings)
        prefix = settings.kafka.topic_prefix
        self._group = f"{prefix}-timers"
        self._txn_id = f"{prefix}-timers-{settings.runtime.instance}"
        self._member = StaticMember(self._group, self._txn_id, settings.runtime.static_membership)
        self._clock = clock
        self.heap = TimerHeap()
        self._poison: dict[str, tuple[Message, SchemaError]] = {}
        self.fired_total = 0
        r = registry or Registry()
        self.m_fired = r.counter("es_sched_timers_fired_total", "Timers fired.")
        self.m_pending = r.gauge("es_sched_timers_pending", "Timers waiting to fire.")
        self.lag = LagGauge(r, "timers")
        self._loop = TransactionalLoop(
            self._clients,
            self._txn_id,
            ROLE,
            settings.runtime.transaction_timeout_ms,
            registry=r,
            brokers_away_at=lambda: self._member.trouble_at,
        )
        self._stop = threading.Event()

    def run(self, stop: threading.Event) -> None:
        """Fire timers until ``stop`` is set; raises ``InfrastructureError`` if fenced or Kafka
        fails for good."""
        self._stop = stop
        rejoining(stop, self._member, lambda: self._session(stop), self._drop_all)

    def _session(self, stop: threading.Event) -> None:
        self._cons = cons = self._clients.consumer(self._group, **self._member.config())
        revoke = self._on_revoke
        cons.subscribe([self._topics.timers], self._on_assign, revoke, on_lost=revoke)
        try:
            self._loop.run(stop, cons, self, MAX_DRAIN, TICK_S)
        finally:
            cons.close()

    def _drop_all(self) -> None:
        every = range(self._topics.partitions)
        self._on_revoke(self._cons, [TopicPartition(self._topics.timers, p) for p in every])

    def tick(self) -> None:
        if self.lag.update(self._cons):
            self.m_pending.set(len(self.heap))

    def rewind(self, producer_lost: bool) -> None:
        """Nothing to undo: the due timers, rewrites and poison records are still held and go
        out in the next transaction (a duplicate fire is dropped by the decider)."""

    # -- state ------------------------------------------------------------------------------
    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        started = time.monotonic()
        while True:
            try:
                self._restore(partitions)
                break
            except InfrastructureError as exc:  # a broker outage: wait it out, from scratch
                log.warning("restoring timers: %s; trying again", exc)
                self.heap.drop_partitions({tp.partition for tp in partitions})
                wait(self._stop, RESTORE_RETRY_S)
        for tp in partitions:
            log.info(
                "timers[%d]: restored %d timers up to offset %d",
                tp.partition,
                self.heap.size(tp.partition),
                tp.offset,
            )
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
                elif err is not None:
                    if err.fatal():
                        raise InfrastructureError(f"restoring {topic}: {err}")
                    log.warning("restoring %s: %s", topic, err)
                else:
                    self._apply(msg)
        except KafkaException as exc:
            raise InfrastructureError(f"restoring {topic}: {exc}") from exc
        finally:
            c.close()

    def _apply(self, msg: Message) -> None:
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

    # -- firing (the loop's step) -----------------------------------------------------------
    def step(self, msgs: list[Message]) -> Batch | None:
        """Apply what arrived; the due timers, rewrites and poison records as one batch."""
        for msg in msgs:
            self._apply(msg)
        due = self.heap.due(self._clock())[:MAX_FIRES]
        firing = {e.timer.timer_id for e in due}
        rewrites = [e for k, e in self.heap.rewrites.items() if k not in firing]
        poison = list(self._poison.items())
        if not (due or rewrites or poison):
            return None
        timers = self._topics.timers
        out: list[Out] = []
        for e in due:
            value = encode_input(fire_input(e.timer))
            out.append(Out(self._topics.commands, e.timer.workflow_id, value))
            out.append(self._tombstone(e.timer.timer_id, e.partition, e.offset))
        for e in rewrites:
            out.append(Out(timers, e.timer.timer_id, e.raw, partition=e.partition))
        for key, (msg, exc) in poison:
            headers = headers_for(msg, str(exc), type(exc).__name__, ROLE)
            out.append(Out(self._topics.dead_letters, msg.key(), _bytes(msg.value()), headers))
            if msg.key() and self.heap.get(key) is None:
                out.append(self._tombstone(msg.key(), msg.partition() or 0, msg.offset() or 0))
        # offsets None: the consumer positions, committed for monitoring only
        return Batch(out, None, lambda: self._fired(due, rewrites, poison))

    def _fired(
        self,
        due: list[Entry],
        rewrites: list[Entry],
        poison: list[tuple[str, tuple[Message, SchemaError]]],
    ) -> None:
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
            len(due),
            self.fired_total,
            len(rewrites),
            len(poison),
            len(self.heap),
        )

    def _tombstone(self, key: str | bytes | None, part: int, of: int) -> Out:
        return Out(self._topics.timers, key, None, [(TOMBSTONE_OF, str(of))], part)


def _bytes(value: str | bytes | None) -> bytes | None:
    return value.encode() if isinstance(value, str) else value
