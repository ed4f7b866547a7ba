"""kafka/clients.read_partitions: a broker outage is an ``InfrastructureError`` the callers (the
decider's and timers' restore, the dispatcher's lease journal) wait out, never a bare
``KafkaException`` that stops the role (seen: the dispatcher stopped on ``_UNKNOWN_PARTITION``
from the ends query when its partitions came back after a broker SIGSTOP)."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from es_sched.errors import InfrastructureError
from es_sched.kafka import clients
from es_sched.kafka.connection import KafkaConnection


class Unreachable:
    closed = False

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Unknown partition"))

    def close(self) -> None:
        self.closed = True


def test_the_ends_query_failing_is_an_infrastructure_error_and_closes_the_probe(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    probe = Unreachable()

    def consumer(*_: Any, **__: Any) -> Unreachable:
        return probe

    monkeypatch.setattr(clients, "consumer", consumer)
    with pytest.raises(InfrastructureError, match=r"reading the ends of t.leases: .*Unknown"):
        list(
            clients.read_partitions(
                KafkaConnection.plaintext("b:1"), "t.leases", [0, 1], timeout_s=0.3
            )
        )
    assert probe.closed


class Answers(Unreachable):
    def get_watermark_offsets(self, tp: TopicPartition, timeout: float) -> tuple[int, int]:
        return 0, 0  # empty partitions: read_partitions yields nothing and reads no further


def test_a_client_stuck_on_unknown_partition_is_replaced_by_a_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen after a broker SIGSTOP: the first probe answered "Unknown partition" for its whole
    query while a new client read the ends at once; the ends come from a new client."""
    made: list[Unreachable] = []

    def consumer(*_: Any, **__: Any) -> Unreachable:
        made.append(Unreachable() if len(made) < 2 else Answers())
        return made[-1]

    monkeypatch.setattr(clients, "PROBE_ATTEMPT_S", 0.1)
    monkeypatch.setattr(clients, "consumer", consumer)
    assert (
        list(
            clients.read_partitions(
                KafkaConnection.plaintext("b:1"), "t.changelog", [0, 1], timeout_s=30
            )
        )
        == []
    )
    assert [type(c).__name__ for c in made] == ["Unreachable", "Unreachable", "Answers"]
    assert all(c.closed for c in made)
