"""The stalled-fetcher watch (ADR 46): a partition whose position did not move for a whole
period while the broker says records are readable gets the assignment again at the positions;
slow, idle, paused or broker-less members never do."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, KafkaException, TopicPartition

from es_sched.kafka.stall import FetchStall


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Member:
    """Positions and ends per partition of topic ``e``; counts the broker queries."""

    def __init__(self, positions: dict[int, int], ends: dict[int, int]) -> None:
        self.positions, self.ends, self.asked = positions, ends, list[int]()
        self.broker_away = False

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition("e", p) for p in self.positions]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition("e", t.partition, self.positions[t.partition]) for t in partitions]

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = -1, cached: bool = False
    ) -> tuple[int, int]:
        self.asked.append(partition.partition)
        if self.broker_away:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT))
        return 0, self.ends[partition.partition]


def looks(watch: FetchStall, clock: Clock, member: Member, n: int) -> list[Any]:
    """``n`` checks one period apart (the first is the baseline)."""
    out = []
    for _ in range(n):
        clock.now += watch.after_s
        out.append(watch.check(member))
    return out


def test_a_partition_that_did_not_move_with_records_readable_is_assigned_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: 100, 1: 40}, {0: 500, 1: 40})
    assert watch.check(member) is None  # within the first period: not even a look
    first, second = looks(watch, clock, member, 2)
    assert first is None  # the first look is the baseline
    assert second is not None
    assert [(tp.partition, tp.offset) for tp in second] == [(0, 100), (1, 40)]
    assert member.asked == [0, 1]  # both still; partition 1 has nothing readable
    assert "e[0] at 100 of 500" in caplog.text
    assert looks(watch, clock, member, 1) == [None]  # a fresh baseline after assigning


def test_a_slow_partition_that_moves_is_left_alone() -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: 100}, {0: 10_000})
    for _ in range(5):
        assert looks(watch, clock, member, 1) == [None]
        member.positions[0] += 1
    assert member.asked == []  # a partition that moved is never asked about


def test_an_idle_member_with_nothing_readable_is_left_alone() -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: 100, 1: 7}, {0: 100, 1: 7})
    assert looks(watch, clock, member, 4) == [None] * 4


def test_before_any_record_the_offset_assigned_at_stands_for_the_position() -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: OFFSET_INVALID}, {0: 50})
    watch.assigned([TopicPartition("e", 0, 12)])
    stalled = looks(watch, clock, member, 2)[-1]
    assert stalled is not None and [(tp.partition, tp.offset) for tp in stalled] == [(0, 12)]


def test_no_offset_known_means_no_assignment() -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: OFFSET_INVALID}, {0: 50})
    assert looks(watch, clock, member, 3) == [None] * 3


def test_a_broker_that_does_not_answer_is_not_a_stall_of_ours() -> None:
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: 100}, {0: 500})
    member.broker_away = True
    assert looks(watch, clock, member, 3) == [None] * 3
    member.broker_away = False
    assert looks(watch, clock, member, 1)[0] is not None


def test_a_pause_resets_the_watch() -> None:
    """A paused member's positions stand still: after ``reset`` the next look is a baseline."""
    clock = Clock()
    watch, member = FetchStall(30, clock), Member({0: 100}, {0: 500})
    assert looks(watch, clock, member, 1) == [None]
    watch.reset()
    assert looks(watch, clock, member, 1) == [None]
    assert member.asked == []
