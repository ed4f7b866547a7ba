"""Every group consumer starts a new assignment at offsets it read itself (librdkafka#5586).

Assigned without an offset, librdkafka fetches the committed offsets on its own, and a
request-level ``NOT_COORDINATOR`` answer to that fetch leaves the partitions unfetched for good
(the dispatcher of a CI run after a 30 s SIGSTOP of the broker). ``assign_at_committed`` reads
them through ``committed()``, which hands the same error to us, and asks again. A fake consumer
stands in for the broker's answers; the roles' ``on_assign`` callbacks are checked to assign
every partition at an explicit offset, never at ``OFFSET_INVALID`` (-1001, "the stored one").
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, KafkaError, KafkaException
from confluent_kafka import TopicPartition as TP

from es_sched.bootstrap import script_engine
from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.kafka.failures import Stopped, assign_at_committed
from es_sched.runtime.decider import Decider
from es_sched.runtime.retry_relay import RetryRelay
from testkit.settings import private_vars, settings_with


@dataclass
class Answer:
    """A partition's answer to ``committed`` (``TopicPartition.error`` cannot be set)."""

    topic: str
    partition: int
    offset: int
    error: KafkaError | None = None


class Coordinator:
    """``committed`` fails with each of ``errors`` in turn (a ``KafkaError`` for the request,
    a ``(partition, KafkaError)`` for one partition's answer), then answers ``offsets``."""

    def __init__(self, offsets: dict[int, int], errors: list[Any] | None = None) -> None:
        self.offsets, self.errors = offsets, list(errors or [])
        self.asked, self.assigned = 0, list[list[TP]]()

    def committed(self, partitions: list[TP], timeout: float = -1) -> Any:  # list[Answer]
        self.asked += 1
        error = self.errors.pop(0) if self.errors else None
        if isinstance(error, KafkaError):
            raise KafkaException(error)
        out = [
            Answer(tp.topic, tp.partition, self.offsets.get(tp.partition, OFFSET_INVALID))
            for tp in partitions
        ]
        if error is not None:
            out[error[0]].error = error[1]
        return out

    def assign(self, partitions: list[TP]) -> None:
        self.assigned.append(partitions)


def offsets(assigned: list[TP]) -> list[tuple[int, int]]:
    return [(tp.partition, tp.offset) for tp in assigned]


def test_a_not_coordinator_answer_is_asked_again_and_nothing_is_assigned_unset() -> None:
    """The request-level NOT_COORDINATOR of the issue, then a partition's pending transactional
    commit: both asked again; the partition with nothing committed starts at its beginning."""
    cons = Coordinator(
        {0: 42},
        [
            KafkaError(KafkaError.NOT_COORDINATOR),
            (1, KafkaError(KafkaError.UNSTABLE_OFFSET_COMMIT)),
        ],
    )
    got = assign_at_committed(cons, [TP("t", 0), TP("t", 1)], threading.Event())
    assert cons.asked == 3
    assert [offsets(a) for a in cons.assigned] == [[(0, 42), (1, OFFSET_BEGINNING)]]
    assert offsets(got) == offsets(cons.assigned[0])


def test_an_error_that_is_not_a_passing_one_is_raised() -> None:
    cons = Coordinator({}, [KafkaError(KafkaError.GROUP_AUTHORIZATION_FAILED)])
    with pytest.raises(KafkaException, match="GROUP_AUTHORIZATION_FAILED"):
        assign_at_committed(cons, [TP("t", 0)], threading.Event())
    assert cons.assigned == []


def test_stopping_the_role_ends_the_wait_without_assigning() -> None:
    cons, stop = Coordinator({}, [KafkaError(KafkaError.NOT_COORDINATOR)] * 3), threading.Event()
    stop.set()
    with pytest.raises(Stopped):
        assign_at_committed(cons, [TP("t", 0)], stop)
    assert cons.assigned == []


class Journal:
    """A lease journal with nothing in it (the dispatcher resumes nothing)."""

    def load(self, number: int) -> list[Any]:
        return []


def test_the_dispatcher_assigns_its_ready_partitions_at_the_committed_offsets() -> None:
    d = Dispatcher(settings_with(private_vars("p")))
    d.journal = Journal()  # type: ignore[assignment]
    cons = Coordinator({2: 7}, [KafkaError(KafkaError.NOT_COORDINATOR)])
    d._on_assign(cons, [TP(d.topics.ready, 2), TP(d.topics.ready, 3)])  # type: ignore[arg-type]
    assert [offsets(a) for a in cons.assigned] == [[(2, 7), (3, OFFSET_BEGINNING)]]


def test_the_decider_assigns_its_inputs_at_the_committed_offsets_after_its_restore(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    d = Decider(settings_with(private_vars("p")), script_engine())
    d.successor = None  # no roster here: test_role_faults has a decider end a zombie's txn
    restored: list[set[int]] = []
    monkeypatch.setattr(d, "_restore", restored.append)
    cons = Coordinator({0: 5, 1: 9})
    d._on_assign(cons, [TP("p.commands", 0), TP("p.commands", 1)])  # type: ignore[arg-type]
    assert restored == [{0, 1}]
    assert [offsets(a) for a in cons.assigned] == [[(0, 5), (1, 9)]]


def test_the_retry_relay_assigns_its_tiers_at_the_committed_offsets() -> None:
    relay = RetryRelay(settings_with(private_vars("p")))
    cons = Coordinator({0: 3}, [KafkaError(KafkaError._TIMED_OUT)])
    relay._on_assign(cons, [TP("p.retry-5s", 0), TP("p.retry-5s", 1)])  # type: ignore[arg-type]
    assert [offsets(a) for a in cons.assigned] == [[(0, 3), (1, OFFSET_BEGINNING)]]
