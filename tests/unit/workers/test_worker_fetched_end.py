"""Before a worker starts an assignment it reads its partition up to the end (a cancel may be
behind it). The end comes from the last fetch answer when the newest record read is younger
than ``FETCHED_END_FRESH_S`` (no round trip), else from the broker (``AssignmentReader.end``).

Fake consumers stand in for the reading client (its records, its cached watermark) and the
client that asks the broker (it counts the questions), so each case shows which end was used:
the records handed over stop at that end.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, TopicPartition

from es_sched.kafka import partition_ends
from es_sched.kafka.connection import KafkaConnection
from es_sched.workers import runner
from es_sched.workers.runner import FETCHED_END_FRESH_S, AssignmentReader


class Msg:
    def __init__(self, offset: int, created_s: float | None) -> None:
        self._offset, self._created = offset, created_s

    def offset(self) -> int:
        return self._offset

    def error(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        if self._created is None:
            return TIMESTAMP_NOT_AVAILABLE, 0
        return TIMESTAMP_CREATE_TIME, int(self._created * 1000)


class Client:
    """The reading client (``records``, ``cached_end``) or the end-asking one (``end``)."""

    def __init__(self, records: list[Msg], cached_end: int, end: int) -> None:
        self.records, self.cached_end, self.end = list(records), cached_end, end
        self.asked = 0

    def poll(self, timeout: float) -> Msg | None:
        return self.records.pop(0) if self.records else None

    def get_watermark_offsets(
        self, tp: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        if cached:
            return 0, self.cached_end
        self.asked += 1
        return 0, self.end

    def position(self, tps: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tps[0].topic, tps[0].partition, -1001)]

    def resume(self, tps: list[TopicPartition]) -> None:
        pass

    pause = resume


def reader(
    monkeypatch: pytest.MonkeyPatch, created_s: float | None, cached_end: int
) -> tuple[AssignmentReader, Client, Client]:
    """A reader that has read offset 0 (created at ``created_s``), with offsets 1-3 fetched:
    the fetch answer said the end was ``cached_end``, the broker says 4 (a cancel at 3)."""
    reading = Client(
        [Msg(0, created_s), Msg(1, created_s), Msg(2, created_s), Msg(3, created_s)],
        cached_end,
        end=4,
    )
    ends = Client([], cached_end, end=4)
    monkeypatch.setattr(runner, "consumer", lambda *_a, **_k: reading)
    monkeypatch.setattr(partition_ends, "consumer", lambda *_a, **_k: ends)
    r = AssignmentReader(KafkaConnection.plaintext("bootstrap"), "assignments", "w1", "group")
    r.partition = 0
    assert r.poll(0.05) is not None  # the head, offset 0
    return r, reading, ends


def caught_up(r: AssignmentReader) -> list[int]:
    seen: list[int] = []
    assert r.catch_up(1.0, lambda m: seen.append(m.offset() or 0))
    return seen


def test_a_fresh_record_uses_the_end_its_fetch_brought(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _, ends = reader(monkeypatch, time.time(), cached_end=3)
    assert caught_up(r) == [1, 2]  # up to the fetched end: the round trip was not made
    assert ends.asked == 0


def test_an_old_record_asks_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker was frozen or paused: the fetched end may be older than a cancel behind it.
    r, _, ends = reader(monkeypatch, time.time() - 50 * FETCHED_END_FRESH_S, cached_end=3)
    assert caught_up(r) == [1, 2, 3]
    assert ends.asked == 1


def test_no_fetched_end_yet_asks_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _, ends = reader(monkeypatch, time.time(), cached_end=-1001)  # OFFSET_INVALID
    assert caught_up(r) == [1, 2, 3]
    assert ends.asked == 1


def test_a_record_without_a_time_asks_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    r, _, ends = reader(monkeypatch, None, cached_end=3)
    assert caught_up(r) == [1, 2, 3]
    assert ends.asked == 1
