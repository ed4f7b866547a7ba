"""Read-your-writes: wait until a command's events are in a projection.

A command's token is ``PARTITION:OFFSET`` on the commands topic (``es-sched submit --json``
prints it; ``CommandClient.token``). The decider commits its input offsets in the same Kafka
transaction as the events they caused, so once the decider group's committed offset of that
partition is past the command, every event the command caused is committed on the events
partition with the same number (both topics are keyed by workflow id with the same partition
count), below that partition's high watermark read afterwards. The projection reflects the
command once its checkpoint of that events partition reaches the end of the last record below
that watermark: the decider writes transactions, so the watermark usually stands one past a
commit marker, which no consumer ever receives and no checkpoint counts (a projector's
checkpoint is the offset after the last record it read, so it would wait for the next event).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from confluent_kafka import Consumer, TopicPartition

from es_sched.errors import EsSchedError
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.connection import connection
from es_sched.kafka.topics import topics_for
from es_sched.projections.store import Store
from es_sched.settings import Settings

# Polls back off from a few milliseconds (a prompt decider answers within a transaction or
# two) to a few tens (a busy one): a longer pause would add itself to every write's answer.
FIRST_PAUSE_S = 0.002
LAST_PAUSE_S = 0.025
# One poll of the window: short, because the last record before a commit marker is followed by
# nothing a consumer receives; the loop then checks the position instead of waiting a fetch out.
POLL_S = 0.01
FETCH_WAIT_MS = 5


class NotFreshYet(EsSchedError):
    """The projection did not reach the command's events in time."""


@dataclass(frozen=True)
class Token:
    partition: int
    offset: int

    @classmethod
    def parse(cls, text: str) -> Token:
        part, sep, offset = text.partition(":")
        if not sep or not part.isdigit() or not offset.isdigit():
            raise EsSchedError(f"a token is PARTITION:OFFSET (from submit --json), not {text!r}")
        return cls(int(part), int(offset))


class DeciderProbe:
    """One Kafka consumer that answers ``events_position`` for many commands: an API process
    keeps one (a consumer costs a broker connection and a group coordinator lookup, more than
    the wait it serves). Thread-safe: the committed-offset and watermark reads share it under
    a lock, which is never held while waiting for the decider."""

    def __init__(self, settings: Settings) -> None:
        self._topics = topics_for(settings)
        group = f"{settings.kafka.topic_prefix}-decider"
        # A short fetch wait: the window read of ``last_record_end`` reads to the end, where
        # the broker would hold the fetch open, and the next committed-offset or watermark
        # request on that connection would wait behind it.
        self._consumer = consumer(
            connection(settings.kafka), group, **{"fetch.wait.max.ms": FETCH_WAIT_MS}
        )
        self._lock = threading.Lock()

    def events_position(self, token: Token, timeout_s: float) -> int:
        """The events-partition offset below which every event of the command lies."""
        deadline = time.monotonic() + timeout_s
        pause = FIRST_PAUSE_S
        commands = TopicPartition(self._topics.commands, token.partition)
        while True:
            with self._lock:
                [tp] = self._consumer.committed([commands], timeout=10)
            if tp.offset > token.offset:
                tp_events = TopicPartition(self._topics.events, token.partition)
                with self._lock:
                    low, high = watermarks(self._consumer, tp_events)
                    return last_record_end(self._consumer, tp_events, low, high, deadline, POLL_S)
            if time.monotonic() > deadline:
                raise NotFreshYet(
                    f"the decider has not consumed command {token.partition}:{token.offset} "
                    f"after {timeout_s:g}s (its position: {tp.offset})"
                )
            time.sleep(pause)
            pause = min(pause * 2, LAST_PAUSE_S)

    def close(self) -> None:
        self._consumer.close()


def events_position(settings: Settings, token: Token, timeout_s: float) -> int:
    """``DeciderProbe.events_position`` with a probe of its own (a CLI's one wait)."""
    probe = DeciderProbe(settings)
    try:
        return probe.events_position(token, timeout_s)
    finally:
        probe.close()


def last_record_end(
    probe: Consumer,
    tp: TopicPartition,
    low: int,
    high: int,
    deadline: float,
    poll_s: float = 0.5,
) -> int:
    """The offset after the last record (not control marker) below ``high``; ``low`` when none.

    Reads backwards in growing windows: markers come one per transaction and partition, so the
    first window almost always holds a record. ``poll_s`` is one wait for the next record: when
    it ends empty, the position says whether the window was read to ``high`` (a marker last)."""
    window = 16
    while True:
        start = max(low, high - window)
        probe.assign([TopicPartition(tp.topic, tp.partition, start)])
        last = None
        while True:
            msg = probe.poll(poll_s)
            if msg is not None and msg.error() is None:
                if (msg.offset() or 0) >= high:
                    break
                last = msg.offset() or 0
                if last + 1 >= high:
                    break
                continue
            position = probe.position([TopicPartition(tp.topic, tp.partition)])[0].offset
            if position >= high or time.monotonic() > deadline:
                break
        probe.unassign()
        if last is not None:
            return last + 1
        if start == low:
            return low
        if time.monotonic() > deadline:
            return high  # the safe side: wait for the watermark itself
        window *= 4


def wait_projected(
    settings: Settings,
    store: Store,
    token: Token,
    timeout_s: float,
    probe: DeciderProbe | None = None,
) -> int:
    """Block until ``store`` reflects the command; returns the events offset it waited for.
    ``probe``: a long-lived one to reuse (else one is made for this wait)."""
    deadline = time.monotonic() + timeout_s
    if probe is None:
        target = events_position(settings, token, timeout_s)
    else:
        target = probe.events_position(token, timeout_s)
    topic = topics_for(settings).events
    pause = FIRST_PAUSE_S
    while True:
        reached = store.checkpoints(topic, [token.partition]).get(token.partition, 0)
        if reached >= target:
            return target
        if time.monotonic() > deadline:
            raise NotFreshYet(
                f"{store.name} projection is at {topic}[{token.partition}]@{reached}, "
                f"the command's events end at {target}"
            )
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE_S)
