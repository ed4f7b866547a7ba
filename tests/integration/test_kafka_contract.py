"""Kafka contract: transactions on the broker es-sched runs against.

The decider's exactly-once processing rests on two broker behaviours checked here: records of an
aborted transaction are never delivered to a ``read_committed`` consumer, and records of a
committed one are, in order. A ``read_uncommitted`` consumer must see the aborted records, which
proves the abort really wrote something that had to be hidden.
"""

from __future__ import annotations

import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from testkit.settings import kafka_connection
from tests.integration.backends import Backend


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient(kafka_connection(bootstrap).config())
    futures = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    futures[topic].result(timeout=30)


def _read_all(bootstrap: str, topic: str, isolation: str, expect_at_least: int) -> list[bytes]:
    consumer = Consumer(
        {
            **kafka_connection(bootstrap).config(),
            "group.id": f"{topic}-{isolation}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": isolation,
        }
    )
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    idle_after_enough = 0
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                if len(values) >= expect_at_least:
                    idle_after_enough += 1
                    if idle_after_enough >= 4:  # 2 s of silence once the expected count arrived
                        break
                continue
            assert msg.error() is None, msg.error()
            value = msg.value()
            assert value is not None
            values.append(value)
    finally:
        consumer.close()
    return values


def test_aborted_transaction_is_invisible_and_committed_one_is_seen(
    backend: Backend, unique: str
) -> None:
    topic = f"contract-{unique}"
    _create_topic(backend.kafka_bootstrap, topic)
    producer = Producer(
        kafka_connection(backend.kafka_bootstrap).config(**{"transactional.id": f"tx-{unique}"})
    )
    producer.init_transactions(30)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, key=b"wf-1", value=f"aborted-{i}".encode())
    producer.flush(30)  # the records reach the log before the abort marker
    producer.abort_transaction(30)

    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, key=b"wf-1", value=f"committed-{i}".encode())
    producer.commit_transaction(30)

    committed = _read_all(backend.kafka_bootstrap, topic, "read_committed", 2)
    assert committed == [b"committed-0", b"committed-1"]

    everything = _read_all(backend.kafka_bootstrap, topic, "read_uncommitted", 5)
    assert sorted(everything) == sorted(
        [b"aborted-0", b"aborted-1", b"aborted-2", b"committed-0", b"committed-1"]
    )
