"""The Kafka edge of a worker, its reading side: which partition it reads and what it holds.

- ``partition_for`` (``es_sched.kafka.partitioner``) tells a worker where the dispatcher's
  records keyed by its id land (ADR 5).
- ``AssignmentReader``: *assigns* that one partition of ``<prefix>.assignments[.<pool>]`` (no
  group membership, no rebalances) and commits its position under the group
  ``<prefix>-worker-<worker id>``. Without a committed position it starts at the partition's
  end, so a new worker never replays assignments meant for earlier workers. Offsets are
  committed explicitly, up to the first record not yet handled (``commit``).
- ``Backlog``: assignments read but not started, in arrival order.
- ``unseal``: an assignment's lease token opened with this process's ``LeaseKey`` (ADR 74);
  one sealed to another key is dead-lettered, never run.

What a worker writes (the reports and their producer) is ``es_sched.workers.reports``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import consumer, watermarks
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.partition_ends import Ends
from es_sched.kafka.partitioner import partition_for
from es_sched.serialization import sealed, wire

log = logging.getLogger(__name__)
# How old the newest record read may be for the end its fetch brought to stand for "the end
# now" (``AssignmentReader.fetched_end``): about the staleness the round trip it saves has on
# a loaded broker, far below a heartbeat.
FETCHED_END_FRESH_S = 0.02
OFFSET_UNSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed position
_NO_LEADER = {  # a topic or group coordinator created a moment ago: leaders not elected yet
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


# -- consuming ------------------------------------------------------------------------------
class DeadLetters(Protocol):
    def dead_letter(self, msg: Message, reason: str, error_class: str) -> None: ...


def unseal(
    a: wire.Assignment,
    key: sealed.LeaseKey,
    msg: Message,
    dead_letters: DeadLetters,
) -> wire.Assignment | None:
    """``a`` with its token opened by ``key``, or None (dead-lettered with the reason) when it
    was sealed to another key: granted to this worker's previous process, which the dispatcher
    takes back once it reads the new key (``DispatchCore.rekeyed``), or a record addressed to
    this id that its dispatcher did not seal for this key."""
    try:
        return sealed.opened(a, key)
    except sealed.SealError as exc:
        reason = f"assignment of {a.task_id} (epoch {a.lease_epoch}) to {a.worker_id}: {exc}"
        log.error("%s: not run", reason)
        dead_letters.dead_letter(msg, reason, type(exc).__name__)
        return None


class AssignmentReader:
    def __init__(self, bootstrap: KafkaConnection, topic: str, worker_id: str, group: str) -> None:
        self.topic, self.worker_id, self.group = topic, worker_id, group
        self.partition = -1
        self.paused = False
        self._consumer = consumer(bootstrap, group)
        # Not the reading client, which holds fetches (kafka.partition_ends).
        self._ends = Ends(bootstrap)
        self._committed = OFFSET_UNSET
        self._next = OFFSET_UNSET  # the offset after the last record read
        self._newest_at = 0.0  # CreateTime (s) of the newest record read: see fetched_end

    def open(self, stop: threading.Event, timeout_s: float = 10.0) -> bool:
        """Assign our partition once the topic exists and has leaders (the dispatcher may
        create it after the worker starts). Returns False when ``stop`` was set first."""
        warned = False
        while not stop.is_set():
            try:
                if self._try_assign(timeout_s):
                    return True
                problem = "does not exist yet"
            except KafkaException as exc:
                err = exc.args[0]
                if not (
                    isinstance(err, KafkaError) and (err.retriable() or err.code() in _NO_LEADER)
                ):
                    raise InfrastructureError(f"cannot assign {self.topic}: {exc}") from exc
                problem = str(err)
            if not warned:
                log.warning("waiting for topic %s: %s", self.topic, problem)
                warned = True
            stop.wait(0.5)
        return False

    def _try_assign(self, timeout_s: float) -> bool:
        found = self._consumer.list_topics(self.topic, timeout=timeout_s).topics.get(self.topic)
        if found is None or found.error is not None or not found.partitions:
            return False
        self.partition = partition_for(self.worker_id.encode(), len(found.partitions))
        tp = TopicPartition(self.topic, self.partition)
        offset = self._consumer.committed([tp], timeout=timeout_s)[0].offset
        if offset < 0:
            offset = watermarks(self._consumer, tp, timeout_s)[1]
        self._consumer.assign([TopicPartition(self.topic, self.partition, offset)])
        self._committed = self._next = offset
        return True

    def poll(self, timeout_s: float) -> Message | None:
        msg = self._consumer.poll(timeout_s)
        if msg is None:
            return None
        err = msg.error()
        if err is None:
            self._next = (msg.offset() or 0) + 1
            kind, ms = msg.timestamp()
            if kind != TIMESTAMP_NOT_AVAILABLE and ms / 1000 > self._newest_at:
                self._newest_at = ms / 1000
            return msg
        if err.fatal():
            raise InfrastructureError(f"reading {self.topic}[{self.partition}]: {err}")
        log.warning("reading %s[%d]: %s", self.topic, self.partition, err)
        return None

    def pause(self, paused: bool) -> None:
        if paused == self.paused:
            return
        tp = [TopicPartition(self.topic, self.partition)]
        (self._consumer.pause if paused else self._consumer.resume)(tp)
        self.paused = paused

    def end(self, timeout_s: float) -> int | None:
        """The partition's end as the broker has it now (one round trip, a fraction of a
        millisecond locally; ``read_committed``: the last stable offset); None when it cannot
        be asked."""
        try:
            return self._ends.high(TopicPartition(self.topic, self.partition), timeout_s)
        except KafkaException as exc:
            log.warning("end of %s[%d] unknown: %s", self.topic, self.partition, exc)
            return None

    def fetched_end(self) -> int | None:
        """The partition's end as the fetch answers gave it (librdkafka keeps the last one's
        high watermark: no round trip), when it can stand for the end now; else None.

        Each fetch answer is newer than every record it carried, so the end it gave is at most
        as old as the newest record read (its CreateTime, on the producer's clock: a
        dispatcher's clock ahead of this one makes it look younger by the difference). While
        that record is younger than ``FETCHED_END_FRESH_S``, a record appended since (a cancel
        behind the assignment) is missed only if it came within that window, as it can come
        while the round trip's answer travels. Older (the worker paused, frozen, or nothing
        new came), or before any answer: None, and ``end`` asks the broker. Why: asking the
        broker before every start was most of the workers' requests to it and a round trip on
        each task's way to its first report (``bench/results/archive/``
        ``client_requests_fetched_end_*.json`` and ``timeline_fetched_end_ab.json``)."""
        if time.time() - self._newest_at > FETCHED_END_FRESH_S:
            return None
        tp = TopicPartition(self.topic, self.partition)
        _, high = self._consumer.get_watermark_offsets(tp, cached=True)
        return int(high) if high >= 0 else None

    def catch_up(self, budget_s: float, on_record: Callable[[Message], None]) -> bool:
        """Read the partition up to its end as the broker has it now (``fetched_end`` when that
        is fresh, else ``end``), handing each record to ``on_record``, within ``budget_s``;
        False when it did not get there."""
        deadline = time.monotonic() + budget_s
        end = self.fetched_end()
        if end is None:
            end = self.end(budget_s)
        if end is None:
            return False
        self.pause(False)  # records beyond the backlog's bound: only up to this end
        while self.position() < end:
            if time.monotonic() >= deadline:
                return False
            msg = self.poll(0.05)
            if msg is not None:
                on_record(msg)
        return True

    def position(self) -> int:
        """The next offset to read (past any transaction markers the client skipped)."""
        tp = TopicPartition(self.topic, self.partition)
        return max(self._next, self._consumer.position([tp])[0].offset)

    def commit(self, offset: int) -> None:
        """Commit ``offset`` (the next record to read) when it moved; failures are retried at
        the next call, a lost commit only means re-reading assignments the decider fences."""
        if offset <= self._committed:
            return
        try:
            self._consumer.commit(
                offsets=[TopicPartition(self.topic, self.partition, offset)], asynchronous=False
            )
            self._committed = offset
        except KafkaException as exc:
            log.warning("commit of %s[%d]@%d failed: %s", self.topic, self.partition, offset, exc)

    def close(self) -> None:
        self._consumer.close()
        self._ends.close()


class Backlog:
    """Assignments read but not started yet, in arrival order, and the position to commit:
    the first of them, or past the last record read when none waits.

    ``has`` is asked for every assignment read: a count per (task, epoch) answers it at once
    (a scan of the deque made a burst of n assignments cost n^2/2 comparisons: a third of the
    no-op worker's CPU with 5,000 waiting)."""

    def __init__(self) -> None:
        self._items: deque[tuple[wire.Assignment, int]] = deque()
        self._next_offset = -1
        self._keys: Counter[tuple[str, int]] = Counter()

    def __len__(self) -> int:
        return len(self._items)

    def seen(self, offset: int) -> None:
        self._next_offset = offset + 1

    def add(self, a: wire.Assignment, offset: int) -> None:
        self._items.append((a, offset))
        self._keys[(a.task_id, a.lease_epoch)] += 1

    def pop(self) -> wire.Assignment:
        a = self._items.popleft()[0]
        self._unkey(a)
        return a

    def _unkey(self, a: wire.Assignment) -> None:
        key = (a.task_id, a.lease_epoch)
        self._keys[key] -= 1
        if self._keys[key] <= 0:
            del self._keys[key]

    def peek(self) -> wire.Assignment:
        return self._items[0][0]

    def assignments(self) -> list[wire.Assignment]:
        return [a for a, _ in self._items]

    def drain(self) -> list[wire.Assignment]:
        items = [a for a, _ in self._items]
        self._items.clear()
        self._keys.clear()
        return items

    def task_ids(self) -> list[str]:
        return [a.task_id for a, _ in self._items]

    def has(self, task_id: str, lease_epoch: int) -> bool:
        return (task_id, lease_epoch) in self._keys

    def drop(self, task_id: str, up_to_epoch: int) -> list[wire.Assignment]:
        """Forget a cancelled task that never started; the assignments that were waiting."""
        gone = [a for a, _ in self._items if a.task_id == task_id and a.lease_epoch <= up_to_epoch]
        if gone:
            self._items = deque((a, o) for a, o in self._items if a not in gone)
            for a in gone:
                self._unkey(a)
        return gone

    def commit_point(self) -> int:
        return self._items[0][1] if self._items else self._next_offset
