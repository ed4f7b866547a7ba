"""The retry relay: releases delayed retries from the retry tier topics when they come due.

Guarantees:

- **Never early.** Records of a tier partition are roughly in due order, so the relay holds the
  head of each partition until its ``due_at`` (the partition is paused meanwhile) and releases
  records in partition order; a record behind a later-due head waits for it.
- **Rate-capped.** Releases are paced by a token bucket of ``ES_SCHED_RUN_RETRY_RELEASE_PER_S``
  (burst = that rate, at least 1): a storm of failures queues in the tiers, not in the main flow.
- **Exactly once, Kafka to Kafka.** Each batch of releases is one transaction of the
  exactly-once loop (``es_sched.kafka.transactional``, ``transactional.id =
  <prefix>-retry-<instance>``) that produces the ``timer.fired(kind=retry)`` inputs to
  ``commands`` and commits the offsets after the released records (KIP-447 group metadata).
  Offsets are committed only there. A transaction that did not commit (aborted, or its producer
  lost and re-created) leaves the records held; they are released again on the next tick, and
  ``input_id = retry:<task id>:<next attempt>`` makes a duplicate harmless for the decider. A
  fenced producer stops the role; a broker outage is waited out.
- **Poison records** go to ``dead-letters`` with origin headers in the transaction that commits
  the offset past them; they take no release token and never block their partition.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, Message, TopicPartition

from es_sched.domain.commands import FireTimer
from es_sched.domain.timers import retry_input
from es_sched.errors import SchemaError
from es_sched.kafka.clients import KafkaClients
from es_sched.kafka.connection import connection
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.failures import assign_at_committed
from es_sched.kafka.static_membership import StaticMember, rejoining
from es_sched.kafka.topics import topics_for
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, Out
from es_sched.metrics import LagGauge, Registry
from es_sched.serialization.codec import decode_input, encode_input
from es_sched.serialization.records import decode_retry
from es_sched.settings import Settings

log = logging.getLogger(__name__)
TICK_S = 0.1
MAX_DRAIN = 10_000  # records held per tick
MAX_BATCH = 1000  # releases per transaction
MAX_HELD = 1000  # records held per partition before it is paused even with a due head
LOG_EVERY_S = 5.0
ROLE = "retry-relay"
TP = tuple[str, int]


class TokenBucket:
    """``rate`` tokens per second, at most ``max(1, rate)`` saved up; starts full."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.capacity = rate, max(1.0, rate)
        self._clock = clock
        self._tokens, self._at = self.capacity, clock()

    def available(self) -> int:
        now = self._clock()
        self._tokens = min(self.capacity, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return int(self._tokens)

    def take(self, n: int) -> int:
        """Take up to ``n`` tokens; return how many were granted."""
        granted = min(n, self.available())
        self._tokens -= granted
        return granted


@dataclass(frozen=True, eq=False)
class Held:
    """A retry record waiting for release: ``fire`` when valid, ``error`` when poison."""

    offset: int
    due_at: datetime | None  # None: poison, to move past at once
    fire: FireTimer | None = None
    error: SchemaError | None = None
    record: object = None  # the Kafka message, for dead letters


class TierHeads:
    """Per tier partition, the fetched records not yet released, in offset order. Pure."""

    def __init__(self) -> None:
        self._held: dict[TP, deque[Held]] = {}
        self._next: dict[TP, int] = {}

    def add(self, tp: TP, held: Held) -> bool:
        """Hold a fetched record; False if it was already held (re-fetched after a resume)."""
        if held.offset < self._next.get(tp, -1):
            return False
        self._held.setdefault(tp, deque()).append(held)
        self._next[tp] = held.offset + 1
        return True

    def should_pause(self, tp: TP, now: datetime) -> bool:
        held = self._held.get(tp)
        if not held:
            return False
        head = held[0].due_at
        return len(held) >= MAX_HELD or (head is not None and head > now)

    def select(self, now: datetime, tokens: int, limit: int = MAX_BATCH) -> list[tuple[TP, Held]]:
        """Due records in release order (earliest head first), without removing them.

        A valid record needs a token (``tokens`` in all); a poison record needs none.
        """
        earliest = datetime.min.replace(tzinfo=UTC)
        cursor = dict.fromkeys(self._held, 0)
        heads = [(h[0].due_at or earliest, tp) for tp, h in self._held.items() if h]
        heapq.heapify(heads)
        out: list[tuple[TP, Held]] = []
        while heads and len(out) < limit:
            due, tp = heapq.heappop(heads)
            if due > now:
                break
            item = self._held[tp][cursor[tp]]
            if item.fire is not None:
                if tokens < 1:
                    continue  # this partition waits for tokens; poison heads elsewhere may go
                tokens -= 1
            out.append((tp, item))
            cursor[tp] += 1
            if cursor[tp] < len(self._held[tp]):
                heapq.heappush(heads, (self._held[tp][cursor[tp]].due_at or earliest, tp))
        return out

    def confirm(self, released: list[tuple[TP, Held]]) -> None:
        """Forget released records (each a prefix of its partition, in order)."""
        for tp, item in released:
            assert self._held[tp][0] is item
            self._held[tp].popleft()

    def drop(self, tps: list[TP]) -> None:
        for tp in tps:
            self._held.pop(tp, None)
            self._next.pop(tp, None)

    def partitions(self) -> set[TP]:
        return set(self._held)

    def backlog(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for (topic, _), held in self._held.items():
            out[topic] = out.get(topic, 0) + len(held)
        return out


def parse_retry(value: bytes | None) -> FireTimer:
    """A retry record as the decider's ``timer.fired(kind=retry)``; ``SchemaError`` if bad."""
    retry = decode_retry(value)  # validated against schemas/records/retry.v1.json
    due = retry.due_at
    fire = retry_input(retry.workflow_id, retry.task_id, retry.next_attempt, due)
    if due.tzinfo is None:
        raise SchemaError("due_at has no timezone")
    decode_input(encode_input(fire))  # the one schema the decider will apply
    return fire


class RetryRelay:
    def __init__(
        self,
        settings: Settings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        monotonic: Callable[[], float] = time.monotonic,
        registry: Registry | None = None,
        clients: KafkaClients | None = None,
    ) -> None:
        self._clients = clients or KafkaClients(connection(settings.kafka))
        self._topics = topics_for(settings)
        self._tiers = [self._topics.retry(t) for t in self._topics.retry_tiers]
        prefix = settings.kafka.topic_prefix
        self._group, self._txn_id = f"{prefix}-retry", f"{prefix}-retry-{settings.runtime.instance}"
        self._member = StaticMember(self._group, self._txn_id, settings.runtime.static_membership)
        self._clock = clock
        self._monotonic = monotonic
        self.bucket = TokenBucket(settings.runtime.retry_release_per_s, monotonic)
        self.heads = TierHeads()
        self._paused: set[TP] = set()
        self.released_total = self.dead_lettered_total = 0
        r = registry or Registry()
        self.m_released = r.counter("es_sched_retry_released_total", "Retries released.")
        self.m_dead = r.counter(
            "es_sched_retry_dead_lettered_total", "Unreadable retry records dead-lettered."
        )
        self.m_backlog = r.gauge("es_sched_retry_backlog", "Retries waiting, by tier topic.")
        self.lag = LagGauge(r, "retry")
        self._logged_at, self._logged_total = monotonic(), 0
        self._stop = threading.Event()  # the role's, once it runs
        self._loop = TransactionalLoop(
            self._clients,
            self._txn_id,
            ROLE,
            settings.runtime.transaction_timeout_ms,
            registry=r,
            brokers_away_at=lambda: self._member.trouble_at,
        )

    def run(self, stop: threading.Event) -> None:
        """Relay retries until ``stop`` is set; raises ``InfrastructureError`` if fenced or
        Kafka fails for good."""
        self._stop = stop
        rejoining(stop, self._member, lambda: self._session(stop), self._drop_all)

    def _session(self, stop: threading.Event) -> None:
        self._cons = cons = self._clients.consumer(self._group, **self._member.config())
        cons.subscribe(
            self._tiers,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        try:
            self._loop.run(stop, cons, self, MAX_DRAIN, TICK_S)
            self._report(cons, final=True)
        finally:
            cons.close()

    def _drop_all(self) -> None:
        every = [TopicPartition(t, p) for t in self._tiers for p in range(self._topics.partitions)]
        self._on_revoke(self._cons, every)

    def _on_assign(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        assign_at_committed(cons, partitions, self._stop)

    def _on_revoke(self, cons: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [(tp.topic, tp.partition) for tp in partitions]
        self.heads.drop(tps)
        self._paused.difference_update(tps)
        log.info("retry relay: %d tier partitions revoked", len(tps))

    # -- the loop's step, rewind and tick ---------------------------------------------------
    def step(self, msgs: list[Message]) -> Batch | None:
        """Hold what arrived; the due heads (within the rate) as one batch."""
        for msg in msgs:
            self.heads.add((msg.topic() or "", msg.partition() or 0), _hold(msg))
        batch = self.heads.select(self._clock(), self.bucket.available())
        if not batch:
            return None
        self.bucket.take(sum(1 for _, h in batch if h.fire is not None))
        out: list[Out] = []
        offsets: dict[TP, int] = {}
        for tp, held in batch:
            if held.fire is not None:
                value = encode_input(held.fire)
                out.append(Out(self._topics.commands, held.fire.workflow_id, value))
            else:
                rec, exc = held.record, held.error
                assert isinstance(rec, Message) and exc is not None
                headers = headers_for(rec, str(exc), type(exc).__name__, ROLE)
                raw = rec.value()
                value_bytes = raw.encode() if isinstance(raw, str) else raw
                out.append(Out(self._topics.dead_letters, rec.key(), value_bytes, headers))
            offsets[tp] = held.offset + 1
        return Batch(out, offsets, lambda: self._released(batch))

    def _released(self, batch: list[tuple[TP, Held]]) -> None:
        self.heads.confirm(batch)
        poison = sum(1 for _, h in batch if h.fire is None)
        self.released_total += len(batch) - poison
        self.dead_lettered_total += poison
        self.m_released.inc(len(batch) - poison)
        self.m_dead.inc(poison)
        if poison:
            log.warning("retry relay: dead-lettered %d undecodable retry records", poison)

    def rewind(self, producer_lost: bool) -> None:
        """Nothing to undo: the records stay held and are released on the next tick."""

    def tick(self) -> None:
        self._flow(self._cons)
        self._report(self._cons)
        self.lag.update(self._cons)

    def _flow(self, cons: Consumer) -> None:
        """Pause partitions whose head is not due (or that hold enough); resume the others."""
        now = self._clock()
        for tp in self.heads.partitions() | self._paused:
            pause = self.heads.should_pause(tp, now)
            if pause != (tp in self._paused):
                (cons.pause if pause else cons.resume)([TopicPartition(*tp)])
                (self._paused.add if pause else self._paused.discard)(tp)

    def _report(self, cons: Consumer, final: bool = False) -> None:
        now = self._monotonic()
        if now - self._logged_at < (0.001 if final else LOG_EVERY_S):
            return
        backlog = self.heads.backlog()
        for tp in cons.position(cons.assignment()):
            marks = cons.get_watermark_offsets(tp, cached=True)
            if marks is not None and tp.offset >= 0 and marks[1] > tp.offset:
                backlog[tp.topic] = backlog.get(tp.topic, 0) + marks[1] - tp.offset
        for topic in self._tiers:
            self.m_backlog.set(backlog.get(topic, 0), tier=topic)
        released = self.released_total - self._logged_total
        if released or any(backlog.values()):
            log.info(
                "retry relay: released %d in %.0f s (%.1f/s, %d in total); backlog per tier %s",
                released,
                now - self._logged_at,
                released / (now - self._logged_at),
                self.released_total,
                dict(sorted(backlog.items())),
            )
        self._logged_at, self._logged_total = now, self.released_total


def _hold(msg: Message) -> Held:
    offset = int(msg.offset() or 0)
    try:
        fire = parse_retry(msg.value())
    except SchemaError as exc:
        return Held(offset, None, error=exc, record=msg)
    return Held(offset, fire.due_at, fire=fire)
