"""The dispatcher's ``ready`` offsets: which may be committed, and committing them.

At least once: per partition the commit point is the offset of the first task read but not yet
dispatched, or the next offset after the last record read when none waits. So a crash (or a
partition moving to another dispatcher) re-delivers the tasks not dispatched yet, and with them
the records behind the first waiting task. A re-delivered record of a task attempt whose end
this dispatcher saw (``ended``) is ``stale``: dispatching it again would only be rejected by the
decider after holding a worker slot (after a broker restart that was hundreds of tasks).

A synchronous commit that fails because this member fell out of its group
(``UNKNOWN_MEMBER_ID``, ``ILLEGAL_GENERATION``, ``REBALANCE_IN_PROGRESS``) or cannot reach the
coordinator (``es_sched.kafka.failures.rejoins``) is logged and tried again on the next call:
the consumer rejoins by itself, and what it loses in the rebalance is re-delivered to the new
owner. Any other commit error is an ``InfrastructureError``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable

from confluent_kafka import KafkaException, TopicPartition

from es_sched.errors import InfrastructureError
from es_sched.kafka.failures import consumer_fatal, error_of, rejoins
from es_sched.kafka.static_membership import Fenced

log = logging.getLogger("es_sched.dispatcher")
TP = tuple[str, int]
Commit = Callable[[list[TopicPartition]], list[TopicPartition] | None]
ENDED_KEPT = 100_000  # task attempts remembered as ended


class ReadyOffsets:
    def __init__(self) -> None:
        self.pending: dict[TP, dict[str, int]] = {}  # queued, not yet dispatched: id -> offset
        self.consumed: dict[TP, int] = {}  # next offset after the last ready record read
        self.committed: dict[TP, int] = {}
        self._ended: OrderedDict[str, int] = OrderedDict()  # task id -> last attempt ended

    def read(self, tp: TP, offset: int) -> None:
        self.consumed[tp] = offset + 1

    def queued(self, tp: TP, task_id: str, offset: int) -> None:
        self.pending.setdefault(tp, {})[task_id] = offset

    def done(self, task_id: str) -> None:
        """Dispatched (or dropped): it no longer holds its partition's commit point back."""
        for offsets in self.pending.values():
            if offsets.pop(task_id, None) is not None:
                return

    def ended(self, task_id: str, attempt: int) -> None:
        self._ended[task_id] = attempt
        self._ended.move_to_end(task_id)
        if len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)

    def stale(self, task_id: str, attempt: int) -> bool:
        """True for a re-delivered record of an attempt that already ended."""
        last = self._ended.get(task_id)
        return last is not None and attempt <= last

    def forget(self, partitions: list[TopicPartition]) -> set[str]:
        """No longer ours: the ids of the tasks still queued from them."""
        gone: set[str] = set()
        for tp in partitions:
            key = (tp.topic, tp.partition)
            gone |= set(self.pending.pop(key, {}))
            self.consumed.pop(key, None)
            self.committed.pop(key, None)
        return gone

    def commit(self, commit: Commit) -> None:
        """Commit every partition's commit point that moved since the last commit, with
        ``commit`` (the consumer's synchronous commit)."""
        points = {}
        for tp, end in self.consumed.items():
            waiting = self.pending.get(tp)
            points[tp] = next(iter(waiting.values())) if waiting else end
        todo = [
            TopicPartition(t, p, o)
            for (t, p), o in points.items()
            if self.committed.get((t, p)) != o
        ]
        if not todo:
            return
        try:
            done = commit(todo) or []
        except KafkaException as exc:
            err = error_of(exc)
            if err is not None and consumer_fatal(err):
                # A consumer's only fatal error is a static member's fence (librdkafka's
                # CONFIGURATION.md, group.instance.id); the commit's text no longer says so.
                # ``rejoining`` tells a self-fence after a broker outage from a twin (ADR 79).
                raise Fenced(f"dispatcher: committing ready offsets: fenced: {exc}") from exc
            if err is None or not rejoins(err):
                raise InfrastructureError(f"dispatcher: committing ready offsets: {exc}") from exc
            log.warning("dispatcher: committing ready offsets failed (%s); trying again", err)
            return
        for part in done:
            if part.error is None:
                self.committed[(part.topic, part.partition)] = part.offset
            else:
                log.warning("dispatcher: commit %s[%d]: %s", part.topic, part.partition, part.error)
