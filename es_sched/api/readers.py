"""Kafka views the API reads on demand: the events topic's ends, the worker-status topic folded
by worker (definitions come from the command client's registry, ``CommandClient.definitions``).

Each reader keeps one group-less consumer for the process (made on first use, kept in
``Services.event_ends`` or ``Services.worker_board`` so ``Services.close`` closes it) and is
caught up on every call, under a lock (a consumer is not thread-safe and routes run in a thread
pool), bounded in time: an answer reflects the topic as it was when the request came, never a
background copy of unknown age, and several API processes need nothing shared.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from confluent_kafka import TopicPartition

from es_sched.api.services import Services
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.tail import Tail
from es_sched.kafka.topics import topics_for
from es_sched.projections.read_your_writes import last_record_end
from es_sched.serialization import wire

CATCH_UP_S = 5.0
EXACT_WITHIN = 16


class EventEnds:
    """The high watermarks of the events topic, for the lag every answer reports."""

    def __init__(self, svc: Services) -> None:
        self.topic = topics_for(svc.settings).events
        self._consumer = consumer(svc.settings.kafka.bootstrap_servers, None)
        self._lock = threading.Lock()
        self._partitions: list[int] = []

    def ends(self) -> dict[int, int]:
        with self._lock:
            if not self._partitions:
                meta = self._consumer.list_topics(self.topic, timeout=CATCH_UP_S)
                found = meta.topics.get(self.topic)
                if found is None or found.error is not None:
                    raise InfrastructureError(f"cannot read topic {self.topic}")
                self._partitions = sorted(found.partitions)
            return {
                p: watermarks(self._consumer, TopicPartition(self.topic, p), CATCH_UP_S)[1]
                for p in self._partitions
            }

    def record_ends(self, ends: dict[int, int], reflects: dict[int, int]) -> dict[int, int]:
        """``ends`` with each partition a projection is just behind moved back to the end of its
        last record: a transaction's commit marker stands at the end of an idle partition, and
        no projection's checkpoint counts it (``freshness.last_record_end``). Only partitions
        within ``EXACT_WITHIN`` offsets are read; beyond that the gap is reported as it is."""
        out = dict(ends)
        with self._lock:
            for p, end in ends.items():
                at = reflects.get(p, 0)
                if 0 < end - at <= EXACT_WITHIN:
                    tp = TopicPartition(self.topic, p)
                    deadline = time.monotonic() + CATCH_UP_S
                    out[p] = max(at, last_record_end(self._consumer, tp, at, end, deadline))
        return out

    def close(self) -> None:
        self._consumer.close()


@dataclass
class WorkerBoard:
    """The latest ``WorkerStatus`` per worker; a tombstone (a worker that left) removes it."""

    tail: Tail
    workers: dict[str, wire.WorkerStatus] = field(default_factory=dict)
    read_up_to: dict[int, int] = field(default_factory=dict)
    unreadable: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def snapshot(self) -> tuple[dict[str, wire.WorkerStatus], dict[int, int]]:
        with self.lock:
            for msg in self.tail.catch_up(CATCH_UP_S):
                raw_key, value = msg.key(), msg.value()
                key = raw_key.decode() if isinstance(raw_key, bytes) else (raw_key or "")
                self.read_up_to[msg.partition() or 0] = (msg.offset() or 0) + 1
                if value is None:
                    self.workers.pop(key, None)
                    continue
                try:
                    record = wire.decode(value if isinstance(value, bytes) else value.encode())
                except SchemaError:
                    self.unreadable += 1  # the dispatcher dead-letters it; we skip it
                    continue
                if isinstance(record, wire.WorkerStatus):
                    self.workers[record.worker_id] = record
            return dict(self.workers), dict(self.read_up_to)

    def close(self) -> None:
        self.tail.close()


def event_ends(svc: Services) -> EventEnds:
    return svc.event_ends.get(lambda: EventEnds(svc))


def worker_board(svc: Services) -> WorkerBoard:
    def make() -> WorkerBoard:
        topic = topics_for(svc.settings).worker_status
        return WorkerBoard(Tail(svc.settings.kafka.bootstrap_servers, topic, 0))

    return svc.worker_board.get(make)
