"""The projector rides out a broker outage in its rebalance callback and in its lag metric.

Fakes stand in for the consumer, the store and the broker's errors: a ``committed`` that times
out (the coordinator is away) must be retried, not raised out of ``consume()`` (which stopped
the whole ``es-sched run`` process), and an uncached watermark query that fails while the store
is down must leave the metric as it was.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition

from es_sched.kafka.failures import Stopped
from es_sched.metrics import LagGauge, Registry
from es_sched.projections.projector import Projector
from testkit.settings import private_settings


class FakeStore:
    name = "pg"

    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return {p: 7 for p in partitions}


class FlakyConsumer:
    """``committed`` times out ``failures`` times, then answers; watermarks never answer."""

    def __init__(self, failures: int) -> None:
        self.failures, self.assigned = failures, list[TopicPartition]()

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> Any:
        if self.failures:
            self.failures -= 1
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        return [TopicPartition(tp.topic, tp.partition, -1001) for tp in partitions]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = partitions

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("t", 0)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 3) for tp in partitions]

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT))


def projector() -> Projector:
    return Projector(private_settings(), FakeStore())  # type: ignore[arg-type]


def test_committed_offsets_are_read_again_through_a_broker_outage() -> None:
    p, cons = projector(), FlakyConsumer(failures=2)
    topic = p.topic
    p._on_assign(cons, [TopicPartition(topic, 0), TopicPartition(topic, 1)])  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in cons.assigned] == [(0, 7), (1, 7)]
    assert cons.failures == 0
    # The stalled-fetcher watch (ADR 46) knows where each partition starts before its first
    # record, so it can assign a partition stuck from the start again there.
    assert p.stall.assigned_at == {(topic, 0): 7, (topic, 1): 7}


def test_a_stopped_role_ends_the_wait() -> None:
    p, cons = projector(), FlakyConsumer(failures=10**6)
    p._stop = stopped = threading.Event()
    stopped.set()
    with pytest.raises(Stopped):
        p._on_assign(cons, [TopicPartition(p.topic, 0)])  # type: ignore[arg-type]


def test_the_lag_metric_skips_a_watermark_query_that_fails() -> None:
    gauge = LagGauge(Registry(), "projector-pg")
    assert gauge.update(FlakyConsumer(0), force=True, cached=False) == {"t": 0}  # type: ignore[arg-type]


class EmptyStore(FakeStore):
    def checkpoints(self, topic: str, partitions: list[int]) -> dict[int, int]:
        return {}


def test_every_partition_is_assigned_at_an_explicit_offset() -> None:
    """No checkpoint and nothing committed: the beginning, never "the stored offset" (-1001),
    whose fetch by librdkafka itself can stall for good (``failures.assign_at_committed``)."""
    p, cons = Projector(private_settings(), EmptyStore()), FlakyConsumer(failures=0)  # type: ignore[arg-type]
    p._on_assign(cons, [TopicPartition(p.topic, 0)])  # type: ignore[arg-type]
    assert [(tp.partition, tp.offset) for tp in cons.assigned] == [(0, OFFSET_BEGINNING)]
