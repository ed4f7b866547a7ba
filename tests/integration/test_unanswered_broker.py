"""A static member sees a paused broker as trouble (``kafka/static_membership.py``,
``UNANSWERED_S``).

A broker frozen by SIGSTOP fails no connection and, within 30 s, times out none of an idle
member's calls; on SIGCONT the coordinator may fence the member off its own instance id (a
self-fence), which the role rejoins only after trouble. The trouble it has is librdkafka's
statistics: a request in flight and nothing received. Checked on a private broker (its own
ports 19140/19141): quiet while the broker answers, troubled within a few seconds of the stop.
What proves the fault fired: ``/proc/<pid>/stat`` shows the broker stopped (``T``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from es_sched.kafka.clients import consumer
from es_sched.kafka.static_membership import UNANSWERED_S, StaticMember
from es_sched.kafka.topics import ensure_topic
from testkit.private_kafka import PrivateKafka, private_kafka, process_state
from testkit.wait import wait_until

pytestmark = pytest.mark.integration
PORT, CONTROLLER_PORT = 19140, 19141


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[PrivateKafka]:
    yield from private_kafka(tmp_path / "state", PORT, CONTROLLER_PORT)


def test_a_paused_broker_is_trouble_for_a_static_member_and_an_answering_one_is_not(
    kafka: PrivateKafka,
) -> None:
    ensure_topic(kafka.bootstrap, "paused", 1)
    member = StaticMember("paused-group", "paused-decider-0", enabled=True)
    cons = consumer(kafka.bootstrap, member.group, **member.config())
    assigned = threading.Event()

    def on_assign(c: Consumer, partitions: list[TopicPartition]) -> None:
        c.assign(partitions)
        assigned.set()

    cons.subscribe(["paused"], on_assign=on_assign)
    try:
        wait_until(lambda: cons.poll(0.2) is None and assigned.is_set(), 60, "the assignment")
        # Answering: a few stats reports (one a second) pass with no trouble.
        until = time.monotonic() + 3 * UNANSWERED_S / 5 + 1
        wait_until(
            lambda: cons.poll(0.2) is None and time.monotonic() > until,
            30,
            "three statistics reports",
        )
        assert not member.troubled(), "a broker that answers is no trouble"
        pid = kafka.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            wait_until(lambda: process_state(pid) == "T", 10, "the broker to stop")
            wait_until(
                lambda: cons.poll(0.2) is None and member.troubled(),
                30,
                "the member to see trouble",
            )
            took = time.monotonic() - stopped_at
            assert process_state(pid) == "T", "still stopped when the trouble was seen"
        finally:
            os.kill(pid, signal.SIGCONT)
        print(f"\n[unanswered broker] trouble seen {took:.1f}s after SIGSTOP")
        assert took >= UNANSWERED_S - 1, f"trouble after {took:.1f}s: before the threshold"
        wait_until(lambda: process_state(pid) != "T", 10, "the broker to run again")
        cons.commit(offsets=[TopicPartition("paused", 0, 0)], asynchronous=False)  # answers
    finally:
        cons.close()
