"""Where a partition ends is asked on a client that does nothing else
(``kafka.partition_ends``): a reader that lets the broker hold its fetches would queue the
question behind them. Fake clients count who was asked; a failed question replaces the asking
client, at most every ``RENEW_S``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from es_sched.kafka import partition_ends
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.partition_ends import RENEW_S, Ends
from es_sched.kafka.tail import Tail


class Asking:
    """A client that answers ends (``fail``: with a transport error) and counts the questions."""

    def __init__(self, high: int = 3, fail: bool = False) -> None:
        self.high, self.fail, self.asked, self.closed = high, fail, 0, False

    def get_watermark_offsets(self, tp: TopicPartition, **_: Any) -> tuple[int, int]:
        self.asked += 1
        if self.fail:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down"))
        return 0, self.high

    def close(self) -> None:
        self.closed = True


class Reading:
    """The tail's reading client: its records, its position; never asked where a partition ends."""

    def __init__(self, offsets: list[int]) -> None:
        self.records, self.at = [Record(o) for o in offsets], 0

    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        raise AssertionError("the ends were asked on the client that holds the fetches")

    def consume(self, limit: int, timeout: float) -> list[Record]:
        out, self.records = self.records[:limit], self.records[limit:]
        if out:
            self.at = out[-1].offset() + 1
        return out

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, self.at) for tp in tps]

    def close(self) -> None:
        pass


class Record:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None


def clients(monkeypatch: pytest.MonkeyPatch, *made: Asking) -> list[Asking]:
    """``Ends`` gets ``made`` in order, one per client it creates."""
    left = list(made)
    monkeypatch.setattr(partition_ends, "consumer", lambda *_a, **_k: left.pop(0))
    return list(made)


def test_a_failed_question_replaces_the_client_at_most_every_renew_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second, third = clients(monkeypatch, Asking(fail=True), Asking(fail=True), Asking(7))
    now = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    ends, tp = Ends(KafkaConnection.plaintext("bootstrap")), TopicPartition("t", 0)
    with pytest.raises(KafkaException):
        ends.high(tp, 0.1)
    assert first.closed and second.asked == 0  # replaced, not asked yet
    with pytest.raises(KafkaException):
        ends.high(tp, 0.1)  # the new client fails within RENEW_S: kept
    assert (second.asked, second.closed) == (1, False)
    now[0] += RENEW_S
    with pytest.raises(KafkaException):
        ends.high(tp, 0.1)
    assert second.closed
    assert ends.high(tp, 0.1) == 7 and third.asked == 1


def test_a_tail_reads_to_the_ends_its_own_client_gave(monkeypatch: pytest.MonkeyPatch) -> None:
    [asking] = clients(monkeypatch, Asking(high=3))
    tail = Tail.__new__(Tail)
    tail.topic, tail.partitions, tail._bootstrap, tail._ends = (
        "t.status",
        [0],
        KafkaConnection.plaintext("unused"),
        None,
    )
    tail.consumer = Reading([0, 1, 2])  # type: ignore[assignment]
    assert [m.offset() for m in tail.catch_up(1.0)] == [0, 1, 2]
    assert asking.asked == 1
    assert tail.catch_up(1.0) == []  # at its end: the same client asked again, nothing read
    assert asking.asked == 2
