"""A group member whose fetcher stopped: partitions held, records readable, none delivered.

Seen in the broker SIGSTOP fault test (``tests/integration/test_broker_restart.py``): after
the broker came back, both projectors of one process held their partitions (one had just been
assigned them again, at explicit offsets, ADR 40) and ``consume()`` returned nothing for as
long as the test waited, while the decider, dispatcher and workers completed every workflow
and a new client read every event at once. No error, no log line, and with librdkafka's debug
logs on the fault did not recur. librdkafka#4492 reports the same symptom after request
timeouts (partitions left in ``validate-epoch-wait`` for good; the broker's SIGSTOP bumps every
leader epoch when it comes back), cured by restarting the consumer; its reporters added the
same kind of watch.

The rule (ADR 46): every ``after_s`` the member looks at its partitions' positions; one whose
position did not move since the last look is asked of the broker (only then); if its end (the
last stable offset, for a ``read_committed`` member) is past the position, records were
readable for a whole period and none came, and the whole assignment is assigned again at
explicit offsets (the positions: nothing consumed is read twice, nothing skipped), which
restarts every fetcher. A member that is merely slow still moves and never trips it; an idle
one has nothing readable. The caller resets the watch whenever it pauses, resumes or is
assigned partitions (a paused partition does not move, and is not stalled).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import OFFSET_INVALID, KafkaException, TopicPartition

log = logging.getLogger("es_sched.kafka")

STALL_AFTER_S = 30.0


class Fetching(Protocol):
    """What the watch needs of a consumer (a ``confluent_kafka.Consumer``)."""

    def assignment(self) -> list[TopicPartition]: ...
    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...
    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float = ..., cached: bool = ...
    ) -> tuple[int, int] | None: ...


class FetchStall:
    """``check`` returns the offsets to assign again at when a partition stalled, else None."""

    def __init__(
        self, after_s: float = STALL_AFTER_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.after_s, self.clock = after_s, clock
        self.checked = clock()
        self.seen: dict[tuple[str, int], int] = {}  # position at the last check
        self.assigned_at: dict[tuple[str, int], int] = {}

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """The offsets a rebalance assigned at (the position until a record is consumed)."""
        self.assigned_at = {(tp.topic, tp.partition): tp.offset for tp in partitions}
        self.reset()

    def reset(self) -> None:
        """The member paused, resumed or was assigned partitions: a new first look."""
        self.checked, self.seen = self.clock(), {}

    def check(self, consumer: Fetching) -> list[TopicPartition] | None:
        """Once per ``after_s``: a partition whose position has not moved since the last look
        and whose end is past it stalled; then every assigned partition's offset, else None."""
        if self.clock() - self.checked < self.after_s:
            return None
        self.checked = self.clock()
        seen, self.seen = self.seen, {}
        offsets, still = [], []
        for tp in consumer.position(consumer.assignment()):
            key = (tp.topic, tp.partition)
            # Before its first record a partition is where it was assigned (OFFSET_BEGINNING
            # included: nothing was read since); an offset not known at all is not guessed.
            at = tp.offset if tp.offset >= 0 else self.assigned_at.get(key, OFFSET_INVALID)
            if at == OFFSET_INVALID:
                return None
            self.seen[key] = at
            offsets.append(TopicPartition(tp.topic, tp.partition, at))
            if seen.get(key) == at:
                still.append(offsets[-1])
        behind = []
        for tp in still:  # the broker is asked only about partitions that did not move
            try:
                marks = consumer.get_watermark_offsets(tp, timeout=1.0)
            except KafkaException:
                return None  # the broker is away: nothing of ours is stuck
            if marks is not None and marks[1] > max(tp.offset, marks[0]):
                behind.append(f"{tp.topic}[{tp.partition}] at {tp.offset} of {marks[1]}")
        if not behind:
            return None
        log.warning(
            "nothing fetched for %.0fs with records readable (%s): assigning %d partition(s) "
            "again at their positions (see es_sched.kafka.stall)",
            self.after_s,
            ", ".join(behind),
            len(offsets),
        )
        self.reset()
        return offsets
