"""The stalled-fetcher watch (ADR 46) on the real broker: over a subscribed member that has
read part of its partitions and then stood still, it finds records readable (the broker's
last stable offset past the positions) and returns the positions; assigning them outside a
rebalance callback, as the projector does, goes on from exactly there: nothing read twice,
nothing skipped.

What it cannot do here is make librdkafka's fetcher stall for real (seen after a broker
SIGSTOP, ``es_sched/kafka/stall.py``): ``test_broker_restart.py`` is the fault test whose runs
met it, and reports in its row whether the watch fired.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from es_sched.kafka.clients import consumer
from es_sched.kafka.stall import FetchStall
from testkit.kafka import numbered_topic
from testkit.settings import BOOTSTRAP, kafka_connection, unique_name

pytestmark = [pytest.mark.integration, pytest.mark.fault]
RECORDS = 6


def test_a_member_that_stood_still_with_records_readable_goes_on_from_its_positions() -> None:
    topic = numbered_topic(f"{unique_name()}.stall", 2, RECORDS)
    group = unique_name()

    now = [0.0]
    watch = FetchStall(30, lambda: now[0])

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:  # as the projector: explicit offsets (ADR 40), told to the watch
            tp.offset = OFFSET_BEGINNING
        c.assign(partitions)
        watch.assigned(partitions)

    member = consumer(kafka_connection(BOOTSTRAP), group)
    member.subscribe([topic], on_assign=on_assign)
    read: list[tuple[int, int]] = []
    deadline = time.monotonic() + 60
    try:
        while len(read) < 3:  # part of the 12 records, then the member stands still
            assert time.monotonic() < deadline, f"3 records: got {read}"
            msg = member.poll(0.5)
            if msg is not None and msg.error() is None:
                read.append((msg.partition() or 0, msg.offset() or 0))
        looks = []
        for _ in range(2):  # a baseline, then a look at positions that did not move
            now[0] += 30
            looks.append(watch.check(member))
        offsets = looks[1]
        assert looks[0] is None and offsets is not None, looks
        # A partition not read yet is assigned again where it was: at its beginning.
        expected = {
            p: max((o + 1 for q, o in read if q == p), default=OFFSET_BEGINNING) for p in (0, 1)
        }
        assert {tp.partition: tp.offset for tp in offsets} == expected
        member.assign(offsets)  # outside a rebalance callback, as the projector does
        while len(read) < 2 * RECORDS:
            assert time.monotonic() < deadline, f"every record once: got {sorted(read)}"
            msg = member.poll(0.5)
            if msg is not None and msg.error() is None:
                read.append((msg.partition() or 0, msg.offset() or 0))
    finally:
        member.close()
    assert sorted(read) == [(p, o) for p in (0, 1) for o in range(RECORDS)]
