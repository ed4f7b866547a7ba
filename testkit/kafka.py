"""Reading topics back, and cleaning up the topics a test created.

``read_to_end`` reads every partition of a topic from its beginning to its end now (writers
should have stopped, or the caller polls it): ``read_committed`` by default, so aborted records
stay hidden; ``read_uncommitted`` shows what an open transaction wrote. ``Reader`` accumulates a
topic from its beginning across ``read()`` calls, for tests that watch records arrive. Neither
joins a consumer group or commits anything.

``numbered_topic`` creates a topic with records ``"<partition>-<i>"`` at known offsets.

``delete_new_topics`` is an autouse fixture (the integration and e2e conftests import it): it
snapshots the topic list before each test and, after it, deletes the new topics whose names
hold a name ``unique_name`` gave this process. Every test works under its own prefix; left
behind, a run creates thousands of partitions and a 512 MB single-node controller falls over.
Topics another test run creates meanwhile on the same broker are not this run's to delete.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from es_sched.kafka.clients import check_delivery, consumer, producer
from es_sched.kafka.topics import ensure_topic
from es_sched.stack import probes
from testkit.settings import BOOTSTRAP, HANDED_OUT, kafka_connection


def partitions_of(reader: Consumer, topic: str, timeout_s: float = 30) -> list[int]:
    """The topic's partitions, once its metadata lists them (a topic created a moment ago may
    not be in the metadata yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        meta = reader.list_topics(topic, timeout=10).topics.get(topic)
        if meta is not None and meta.error is None and meta.partitions:
            return sorted(meta.partitions)
        assert time.monotonic() < deadline, f"topic {topic} has no partitions after {timeout_s}s"
        time.sleep(0.1)


def read_to_end(
    topic: str, isolation: str = "read_committed", timeout_s: float = 60, bootstrap: str = BOOTSTRAP
) -> list[Message]:
    """Every record of every partition of ``topic``, from its beginning to its end.

    A partition is done once the reader reaches its end; while writers go on, that end is
    the one each partition had then (a polling check asks again). Waiting for every partition
    to be at its end at one instant instead may never happen under a steady load.
    """
    reader = consumer(
        kafka_connection(bootstrap),
        None,
        **{"isolation.level": isolation, "enable.partition.eof": True},
    )
    try:
        parts = partitions_of(reader, topic)
        reader.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: list[Message] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + timeout_s
        while len(at_end) < len(parts):
            assert time.monotonic() < deadline, _stalled(reader, topic, set(parts) - at_end)
            for msg in reader.consume(1000, 0.5):
                err = msg.error()
                if err is None:
                    out.append(msg)
                elif err.code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition() or 0)
                else:
                    raise AssertionError(f"reading {topic}: {err}")
        return out
    finally:
        reader.close()


def _stalled(reader: Consumer, topic: str, parts: set[int]) -> str:
    where = []
    for tp in reader.position([TopicPartition(topic, p) for p in sorted(parts)]):
        low, high = reader.get_watermark_offsets(tp, timeout=5)
        where.append(f"[{tp.partition}] at {tp.offset} of {low}..{high}")
    return f"reading {topic} did not reach the end of {', '.join(where)}"


class Reader:
    """Every record of a topic from its beginning, accumulated across ``read()`` calls."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.consumer = consumer(kafka_connection(BOOTSTRAP), None)
        parts = partitions_of(self.consumer, topic)
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        self.messages: list[Message] = []

    def read(self) -> list[Message]:
        """What arrived so far (this call waits at most 0.1 s for more)."""
        for msg in self.consumer.consume(1000, 0.1):
            if msg.error() is None:
                self.messages.append(msg)
        return self.messages

    def close(self) -> None:
        self.consumer.close()


def _topics(admin: AdminClient) -> set[str]:
    return {t for t in admin.list_topics(timeout=30).topics if not t.startswith("__")}


@pytest.fixture(autouse=True)
def delete_new_topics() -> Iterator[None]:
    admin = AdminClient(kafka_connection(BOOTSTRAP).config(log_level=0))
    try:
        before = _topics(admin)
    except KafkaException:
        before = None  # no broker: the test will say so itself
    yield
    if before is None:
        return
    created = sorted(t for t in _topics(admin) - before if any(n in t for n in HANDED_OUT))
    if created:
        for future in admin.delete_topics(created, operation_timeout=30).values():
            with contextlib.suppress(KafkaException):  # already gone, or still being deleted
                future.result(60)


def require_kafka(bootstrap: str = BOOTSTRAP) -> None:
    """Fail (not skip) the test, saying how to fix it, when the broker does not answer."""
    probe = probes.kafka(kafka_connection(bootstrap))
    if not probe.healthy:
        pytest.fail(f"Kafka not healthy at {bootstrap} ({probe.detail}): run `es-sched stack up`")


def numbered_topic(name: str, partitions: int, records: int, bootstrap: str = BOOTSTRAP) -> str:
    """A new topic whose partition ``p`` holds ``records`` records ``"p-0"``, ``"p-1"``...
    (offsets 0.. in order), all acknowledged."""
    ensure_topic(kafka_connection(bootstrap), name, partitions)
    p = producer(kafka_connection(bootstrap), None)
    for partition in range(partitions):
        for i in range(records):
            p.produce(
                name, f"{partition}-{i}".encode(), partition=partition, on_delivery=check_delivery
            )
    assert p.flush(30) == 0, f"records of {name} not acknowledged"
    return name
