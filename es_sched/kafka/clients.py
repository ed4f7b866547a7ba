"""confluent-kafka clients configured for es-sched's delivery guarantees.

- ``producer()``: idempotent, ``acks=all``, murmur2 partitioning (what Java clients use, so a
  workflow id lands on the same partition whoever writes it). With ``transactional_id`` it is a
  transactional producer for consume-transform-produce. ``producer_config()`` is the same
  configuration as a dict.
- ``consumer()``: ``read_committed``, no auto-commit, no offset store: offsets are committed by
  the transaction (decider, relays) or explicitly after the work is durable.
- ``read_partition()``: read one partition from the beginning to its current end (compacted
  topics); ``read_partitions()`` reads several of one topic together, with one consumer (the
  decider's changelog restore: ADR 21).
- static group membership (KIP-345, ADR 21) and its fencing rule live in
  ``kafka/static_membership.py``.
- every client starts from a ``KafkaConnection`` (``kafka/connection.py``, ADR 72): the servers
  and the security configuration of one principal; none is made from a bare address.
- ``KafkaClients``: the two factories above bound to one connection. The composition root builds
  it and hands it to the roles; it is the seam where a test passes clients that misbehave on
  purpose (a producer that pauses inside an open transaction or raises a chosen
  ``KafkaError``) without a test hook in production code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition

from es_sched.errors import InfrastructureError
from es_sched.kafka.connection import KafkaConnection

log = logging.getLogger("es_sched.kafka")

# What every producer and group consumer shares. librdkafka's reconnect backoff doubles up to
# reconnect.backoff.max.ms (10 s by default) while a broker is down, so a client may first try
# again up to 10 s after the broker is back: after a single broker's kill and restart 20 s
# later, the dispatcher's first dispatch came 5.1-5.8 s after the broker answered
# (bench/recovery.py). One attempt a second per client is cheap, and issue 52 asks for 5 s.
EVERY_CLIENT = {"log_level": 3, "reconnect.backoff.max.ms": 1000}
TXN_RETRY_BACKOFF_MS = 10  # see producer_config
PRODUCE_MAX_BYTES = 8 * 1024 * 1024  # one record, uncompressed (the broker checks compressed)


def producer_config(
    bootstrap: KafkaConnection, transactional_id: str | None = None, **extra: Any
) -> dict[str, Any]:
    config: dict[str, Any] = {
        **bootstrap.config(),
        "enable.idempotence": True,
        "acks": "all",
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "compression.type": "lz4",
        # The broker's limit is on the compressed batch; librdkafka checks each record before
        # compression against this. A large fork's task.scheduled event is over the broker's
        # limit as JSON and far under it compressed (ADR 19).
        "message.max.bytes": PRODUCE_MAX_BYTES,
        **EVERY_CLIENT,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        # Right after a commit the coordinator may still be writing the previous transaction's
        # markers and answers the next one's first AddPartitionsToTxn with
        # CONCURRENT_TRANSACTIONS; librdkafka retries after retry.backoff.ms, whose default
        # caps a back-to-back transactional loop at a few transactions a second (the retries
        # show in a librdkafka debug log of bench/kafka_limit.py). Java lowered this one
        # backoff for the same reason (KAFKA-5477, apache/kafka PR 3377);
        # confluent-kafka-python issue 967 reports the same cure.
        config["retry.backoff.ms"] = TXN_RETRY_BACKOFF_MS
    config.update(extra)
    return config


def producer(
    bootstrap: KafkaConnection, transactional_id: str | None = None, **extra: Any
) -> Producer:
    return Producer(producer_config(bootstrap, transactional_id, **extra))


def consumer(bootstrap: KafkaConnection, group: str | None, **extra: Any) -> Consumer:
    config: dict[str, Any] = {
        **bootstrap.config(),
        "group.id": group or "es-sched-reader",
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        **EVERY_CLIENT,
    }
    config.update(extra)
    return Consumer(config)


@dataclass(frozen=True)
class KafkaClients:
    """Producers and group consumers for one cluster and principal, configured as above."""

    connection: KafkaConnection

    def producer(self, transactional_id: str | None = None, **extra: Any) -> Producer:
        return producer(self.connection, transactional_id, **extra)

    def consumer(self, group: str | None, **extra: Any) -> Consumer:
        return consumer(self.connection, group, **extra)


_FRESH_TOPIC = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    }
)


def watermarks(c: Consumer, tp: TopicPartition, timeout_s: float = 15.0) -> tuple[int, int]:
    """``get_watermark_offsets`` that waits out a topic created a moment ago, whose partition
    leaders are not elected yet (the broker answers NOT_LEADER_FOR_PARTITION meanwhile)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            low, high = c.get_watermark_offsets(tp, timeout=min(10.0, timeout_s))
            return int(low), int(high)
        except KafkaException as exc:
            if exc.args[0].code() not in _FRESH_TOPIC or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


PROBE_ATTEMPT_S = 5.0


def _bounds(
    bootstrap: KafkaConnection, topic: str, wanted: list[TopicPartition], timeout_s: float
) -> dict[int, tuple[int, int]]:
    """The low and high watermarks of ``wanted``, asked of a new probe client every
    ``PROBE_ATTEMPT_S`` until ``timeout_s``; ``InfrastructureError`` after that (the callers
    wait out an outage).

    The end must be the log's end. A read_committed client's watermark query answers the last
    stable offset instead, which stays behind a transaction whose commit markers are not written
    yet: a decider restoring right after its own commit would then read nothing of that commit
    (found by the rebalance test). So ask as a read_uncommitted client.

    Why a new client per attempt: a client whose first metadata came from a broker resuming
    after SIGSTOP kept answering "Local: Unknown partition" for the whole of a query, while a
    new client read the same ends at once (the decider's log in
    ``tests/integration/test_broker_restart.py``; librdkafka refreshes a known topic's metadata
    only every ``topic.metadata.refresh.interval.ms``, minutes apart). The decider's restore,
    and with it every workflow, would wait out the whole query.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        probe = consumer(bootstrap, None, **{"isolation.level": "read_uncommitted"})
        try:
            attempt = min(PROBE_ATTEMPT_S, max(0.1, deadline - time.monotonic()))
            return {tp.partition: watermarks(probe, tp, attempt) for tp in wanted}
        except KafkaException as exc:
            if exc.args[0].code() not in _FRESH_TOPIC or time.monotonic() >= deadline:
                raise InfrastructureError(f"reading the ends of {topic}: {exc}") from exc
            log.info("reading the ends of %s: %s; asking a new client", topic, exc)
        finally:
            probe.close()


def read_partition(
    bootstrap: KafkaConnection, topic: str, partition: int, timeout_s: float = 60.0
) -> Iterator[Message]:
    """Every committed record of one partition, from its start to its end when reading began."""
    return read_partitions(bootstrap, topic, [partition], timeout_s)


# A reader of whole partitions wants few, large fetches: at librdkafka's default size per
# partition per fetch, a decider's restore spends most of its read in fetch round trips
# (bench/results/current/restore_broker.json compares both; larger still gained little, and the
# events topic's small records read the same either way). The answer's cap and the largest
# message the client accepts grow with it: librdkafka wants receive.message.max.bytes above
# fetch.max.bytes. Module-level so that the bench can restore with the defaults too.
WHOLE_READ: dict[str, Any] = {
    "max.partition.fetch.bytes": 16 << 20,
    "fetch.max.bytes": 64 << 20,
    "receive.message.max.bytes": (64 << 20) + (1 << 20),
}


def read_partitions(
    bootstrap: KafkaConnection, topic: str, partitions: Iterable[int], timeout_s: float = 60.0
) -> Iterator[Message]:
    """Every committed record of these partitions of ``topic``, each from its start to its end
    when reading began; partitions interleave, each one's records stay in offset order.

    One probe and one reader for all the partitions: the cost of a client (bootstrap, metadata,
    the first fetch) is paid once, not per partition, and the broker serves the partitions in
    the same fetches (ADR 21).

    ``read_committed`` stops at the last stable offset, which trails the high watermark until
    the markers of a just-committed transaction are written (asynchronously, after
    ``commit_transaction`` returns). So a partition is done only when the consumer's position
    is at the high watermark taken at the start; an end-of-partition event short of it means
    "wait for the markers", never "done".
    """
    wanted = [TopicPartition(topic, p) for p in sorted(set(partitions))]
    bounds = _bounds(bootstrap, topic, wanted, timeout_s)
    ends = {p: high for p, (low, high) in bounds.items() if high > low}
    if not ends:
        return
    # A read's end is an end-of-partition event, which comes with an empty fetch answer; the
    # broker holds an empty fetch for fetch.wait.max.ms hoping for data, so at librdkafka's
    # default every read would end with that wait. A short wait makes the reader ask again
    # until its ends (with the consume below; bench/results/archive/replay_read_to_end.json).
    c = consumer(
        bootstrap, None, **{"enable.partition.eof": True, "fetch.wait.max.ms": 10, **WHOLE_READ}
    )
    try:
        c.assign([TopicPartition(topic, p, bounds[p][0]) for p in ends])
        deadline = time.monotonic() + timeout_s
        while ends:
            got = False
            # The first record (or end-of-partition event) as soon as it comes, then what
            # else is there: a single consume(n, timeout) waits the whole timeout unless n
            # came, so the last, short batch of every read would wait it out (ADR 31).
            batch = c.consume(1, 0.5)
            for msg in batch + (c.consume(499, 0) if batch else []):
                err, p = msg.error(), msg.partition() or 0
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise InfrastructureError(f"reading {topic}[{p}]: {err}")
                    continue
                offset = msg.offset() or 0
                if p in ends and offset < ends[p]:  # past the end: not this read's
                    got = True
                    yield msg
                    if offset + 1 >= ends[p]:
                        _done(c, topic, ends, p)
            if got:
                deadline = time.monotonic() + timeout_s
                continue
            for tp in c.position([TopicPartition(topic, p) for p in ends]):
                if tp.offset >= ends[tp.partition]:
                    _done(c, topic, ends, tp.partition)
            if ends and time.monotonic() > deadline:
                raise InfrastructureError(f"reading {topic}{sorted(ends)} stalled")
    except KafkaException as exc:
        raise InfrastructureError(f"reading {topic}{sorted(ends)}: {exc}") from exc
    finally:
        c.close()


def _done(c: Consumer, topic: str, ends: dict[int, int], partition: int) -> None:
    """A partition read to its end: no more fetches for it."""
    del ends[partition]
    c.pause([TopicPartition(topic, partition)])


def check_delivery(err: KafkaError | None, msg: Message) -> None:
    """Delivery callback: a record the broker refused is a fatal error for the caller."""
    if err is not None:
        raise InfrastructureError(f"delivery to {msg.topic()} failed: {err}")
