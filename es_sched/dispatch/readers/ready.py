"""The ready reader: ``<prefix>.ready`` in group ``<prefix>-dispatcher``, one task per record.

Several dispatchers share the topic (it is keyed by task name, or rate-limit key, ADR 13); the
group gives each its partitions, and the dispatcher's rebalance callbacks, given to
``subscribe``, resume or forget the tasks of partitions assigned or taken away.

Reads: ``poll(wait_s)`` waits up to ``wait_s`` for the first record, then takes what else has
arrived without waiting (ADR 31). Decodes: each record into an ``Arrival``, a ``ReadyTask``
(``dispatch.records.ready_task``; aging counts from the record's time) with the partition and
offset it was read at and that time; a record that does not decode goes to the dead-letter
topic. A consumer error is logged, or raised when it leaves the consumer unusable: ``Fenced``
when another consumer took this one's ``group.instance.id`` (ADR 79: ``rejoining`` tells a
self-fence after a broker outage from a twin), else ``InfrastructureError``.

Position: ``offsets`` (``ReadyOffsets``) learns every offset read here, and from the dispatcher
which tasks wait (``queued``) and which no longer hold the partition back (``done``); ``commit``
commits each partition up to its first task still waiting. The dispatcher calls it only once
the records of the tasks dispatched are delivered, so a crash re-delivers every task not
dispatched yet (at least once).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.dispatch.output import Output
from es_sched.dispatch.readers.message import value_bytes
from es_sched.dispatch.ready_offsets import TP, ReadyOffsets
from es_sched.errors import InfrastructureError, SchemaError
from es_sched.kafka.failures import consumer_fatal, instance_fenced
from es_sched.kafka.static_membership import Fenced

log = logging.getLogger("es_sched.dispatcher")
READY_BATCH = 500  # ready records read in one tick at most
Rebalance = Callable[[Consumer, list[TopicPartition]], None]


@dataclass(frozen=True)
class Arrival:
    """A ready record read: its task, where it was read, and its time (None: it has none)."""

    task: ReadyTask
    tp: TP
    offset: int
    at: float | None  # seconds since the epoch


class ReadyReader:
    """The ready topic's consumer and its offsets: ``Arrival``s in, commits out."""

    def __init__(
        self, consumer: Consumer, topic: str, output: Output, clock: Callable[[], datetime]
    ) -> None:
        self.consumer, self.topic, self.output, self.clock = consumer, topic, output, clock
        self.offsets = ReadyOffsets()

    def subscribe(self, on_assign: Rebalance, on_revoke: Rebalance, on_lost: Rebalance) -> None:
        self.consumer.subscribe(
            [self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )

    def poll(self, wait_s: float) -> Iterator[Arrival]:
        """What arrived: up to ``wait_s`` for the first record, then without waiting.

        ``consume(500, wait_s)`` would wait the whole ``wait_s`` unless 500 records came: at
        half load every ready record waited for the end of its tick (ADR 31). ``poll``
        returns as soon as one arrives, and under load the records that arrived meanwhile
        make the batch: prompt when idle, batched when busy."""
        first = self.consumer.poll(wait_s)
        if first is None:
            return
        arrival = self._read(first)
        if arrival is not None:
            yield arrival
        for msg in self.consumer.consume(READY_BATCH - 1, 0):
            arrival = self._read(msg)
            if arrival is not None:
                yield arrival

    def _read(self, msg: Message) -> Arrival | None:
        err = msg.error()
        if err is not None:
            if instance_fenced(err):
                raise Fenced(f"reading {self.topic}: fenced off its group.instance.id: {err}")
            if consumer_fatal(err):
                raise InfrastructureError(f"reading {self.topic}: {err}")
            if err.code() != KafkaError._PARTITION_EOF:
                log.warning("reading %s: %s", self.topic, err)
            return None
        tp, offset = (msg.topic() or "", msg.partition() or 0), msg.offset() or 0
        self.offsets.read(tp, offset)
        kind, ms = msg.timestamp()
        at = ms / 1000 if kind and ms > 0 else None
        try:
            task = dispatch_records.ready_task(
                value_bytes(msg.value()),
                datetime.fromtimestamp(at, UTC) if at else None,
                self.clock(),
                tp[1],
            )
        except SchemaError as exc:
            self.output.dead(msg, exc)
            return None
        return Arrival(task, tp, offset, at)

    def commit(self) -> None:
        """Commit every partition up to its first task still waiting (``ReadyOffsets``)."""
        self.offsets.commit(lambda todo: self.consumer.commit(offsets=todo, asynchronous=False))

    def close(self) -> None:
        self.consumer.close()
