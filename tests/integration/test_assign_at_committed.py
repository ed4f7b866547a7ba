"""``assign_at_committed`` on the real broker: called inside ``on_assign`` (a blocking
``committed()`` in the rebalance callback), it starts each partition where the group
committed, or at its beginning where the group committed nothing.

Why it exists (librdkafka#5586): partitions assigned without an offset are fetched from the
offsets librdkafka asks the coordinator for itself, and a request-level NOT_COORDINATOR answer
leaves them unfetched for good. The unit tests (``tests/unit/kafka/test_assign_at_committed.py``)
feed it that answer; this test checks the offsets it chooses are the ones the broker holds.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from es_sched.kafka.clients import consumer
from es_sched.kafka.failures import assign_at_committed
from testkit.kafka import numbered_topic
from testkit.settings import BOOTSTRAP, kafka_connection, unique_name

pytestmark = pytest.mark.integration
RECORDS = 6


def test_a_new_member_starts_at_the_committed_offsets_or_the_beginning() -> None:
    topic = numbered_topic(f"{unique_name()}.assign", 2, RECORDS)
    group = unique_name()
    first = consumer(
        kafka_connection(BOOTSTRAP), group
    )  # commits offset 4 of partition 0 only, as the group
    first.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    first.close()

    assigned: list[list[TopicPartition]] = []
    stop = threading.Event()

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        assigned.append(assign_at_committed(c, partitions, stop))

    member = consumer(kafka_connection(BOOTSTRAP), group)
    member.subscribe([topic], on_assign=on_assign)
    firsts: dict[int, int] = {}
    deadline = time.monotonic() + 60
    try:
        while len(firsts) < 2:
            assert time.monotonic() < deadline, f"records from both partitions: got {firsts}"
            msg = member.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            firsts.setdefault(msg.partition() or 0, msg.offset() or 0)
    finally:
        member.close()
    got = [[(tp.partition, tp.offset) for tp in a] for a in assigned]
    assert got == [[(0, 4), (1, OFFSET_BEGINNING)]]
    assert firsts == {0: 4, 1: 0}, "partition 0 from the group's offset, 1 from its beginning"
