"""The Kafka edge of a worker: which partition it reads, what it writes, and the reports.

- ``partition_for`` (``es_sched.kafka.partitioner``) tells a worker where the dispatcher's
  records keyed by its id land (ADR 5).
- ``AssignmentReader``: *assigns* that one partition of ``<prefix>.assignments[.<pool>]`` (no
  group membership, no rebalances) and commits its position under the group
  ``<prefix>-worker-<worker id>``. Without a committed position it starts at the partition's
  end, so a new worker never replays assignments meant for earlier workers. Offsets are
  committed explicitly, up to the first record not yet handled (``commit``).
- ``Reporter``: one idempotent producer for decider inputs (``<prefix>.task-results``, keyed by
  workflow id), worker status, progress and tombstones (``<prefix>.worker-status``) and dead
  letters. Safe to call from handler threads.
- ``started/progressed/completed/failed/cancelled``: the decider inputs a worker sends, echoing
  task id, attempt, worker id, lease epoch and token; their input ids are uuid5s of those, so a
  resent report is deduplicated by the decider.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import Counter, deque
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from es_sched.domain import commands as c
from es_sched.domain.ids import NAMESPACE
from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import consumer, producer, watermarks
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.partitioner import partition_for
from es_sched.kafka.topics import Topics
from es_sched.serialization import encode_input, wire

log = logging.getLogger(__name__)
HANDED_BACK = "worker shutting down; handed back"
MAX_REASON = 1900  # the decider's schema allows 2000 characters
ENDS_RENEW_S = 3.0  # the least time between two replacements of the "end" client
OFFSET_UNSET = -1001  # librdkafka's OFFSET_INVALID: the group has no committed position
_NO_LEADER = {  # a topic or group coordinator created a moment ago: leaders not elected yet
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def progress_key(worker_id: str, task_id: str) -> str:
    return f"{worker_id}/{task_id}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


# -- reports --------------------------------------------------------------------------------
def _report_fields(a: wire.Assignment, worker_id: str, what: str) -> dict[str, Any]:
    input_id = uuid.uuid5(NAMESPACE, f"worker:{a.task_id}:{a.attempt}:{a.lease_epoch}:{what}")
    return {
        "input_id": str(input_id),
        "workflow_id": a.workflow_id,
        "task_id": a.task_id,
        "attempt": a.attempt,
        "worker_id": worker_id,
        "lease_epoch": a.lease_epoch,
        "lease_token": a.lease_token,
    }


def started(a: wire.Assignment, worker_id: str) -> c.ReportStarted:
    return c.ReportStarted(**_report_fields(a, worker_id, "started"))


def progressed(
    a: wire.Assignment, worker_id: str, seq: int, percent: float, message: str
) -> c.ReportProgress:
    return c.ReportProgress(
        **_report_fields(a, worker_id, f"progress:{seq}"),
        percent=min(100.0, max(0.0, float(percent))),
        message=message[:MAX_REASON],
    )


def completed(a: wire.Assignment, worker_id: str, output: dict[str, Any]) -> c.ReportCompleted:
    return c.ReportCompleted(**_report_fields(a, worker_id, "completed"), output=output)


def failed(
    a: wire.Assignment,
    worker_id: str,
    reason: str,
    terminal: bool,
    output: dict[str, Any] | None = None,
) -> c.ReportFailed:
    return c.ReportFailed(
        **_report_fields(a, worker_id, "failed"),
        reason=reason[:MAX_REASON],
        terminal=terminal,
        output=output or {},
    )


def cancelled(a: wire.Assignment, worker_id: str, reason: str) -> c.ReportCancelled:
    return c.ReportCancelled(
        **_report_fields(a, worker_id, "cancelled"), reason=reason[:MAX_REASON]
    )


def declined(a: wire.Assignment, worker_id: str, reason: str) -> c.ReportDeclined:
    """The live lease given back unused: the task is queued again, its attempt not spent."""
    return c.ReportDeclined(**_report_fields(a, worker_id, "declined"), reason=reason[:MAX_REASON])


# -- producing ------------------------------------------------------------------------------
class Delivery:
    """One record's delivery report, for a sender that waits for its own records only."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: KafkaError | None = None


class Reporter:
    def __init__(self, bootstrap: str, topics: Topics, **extra: Any) -> None:
        self.topics = topics
        self.delivery_failures = 0
        self._producer = producer(bootstrap, **extra)

    def _produce(
        self, topic: str, key: str, value: bytes | None, delivery: Delivery | None = None,
        **extra: Any,
    ) -> None:  # fmt: skip
        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._delivered(err, msg)
            if delivery is not None:
                delivery.error = err
                delivery.done.set()

        for _ in range(50):  # a full local queue drains as deliveries complete
            try:
                self._producer.produce(
                    topic, key=key.encode(), value=value, on_delivery=delivered, **extra
                )
                self._producer.poll(0)
                return
            except BufferError:
                self._producer.poll(0.1)
            except KafkaException as exc:
                raise InfrastructureError(f"cannot produce to {topic}: {exc}") from exc
        raise InfrastructureError(f"producer queue for {topic} stayed full")

    def _delivered(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.delivery_failures += 1
            log.error("delivery to %s failed: %s", msg.topic(), err)

    def send(self, inp: c.Input, delivery: Delivery | None = None) -> None:
        """A decider input; raises SchemaError/TypeError when it cannot be encoded."""
        self._produce(self.topics.task_results, inp.workflow_id, encode_input(inp), delivery)

    def status(
        self, record: wire.WorkerStatus | wire.Progress, key: str, delivery: Delivery | None = None
    ) -> None:
        self._produce(self.topics.worker_status, key, wire.encode(record), delivery)

    def progress(
        self, a: wire.Assignment, worker_id: str, seq: int, percent: float, message: str
    ) -> None:
        """A ``progress`` record for the dispatcher and a ``worker.task_progress`` input."""
        report = progressed(a, worker_id, seq, percent, message)
        record = wire.Progress(
            worker_id, a.task_id, a.lease_epoch, report.percent, report.message, now_iso()
        )
        self.status(record, progress_key(worker_id, a.task_id))
        self.send(report)

    def hand_back(self, a: wire.Assignment, worker_id: str) -> None:
        self.send(failed(a, worker_id, HANDED_BACK, terminal=False))

    def tombstone(self, key: str) -> None:
        self._produce(self.topics.worker_status, key, None)

    def dead_letter(self, msg: Message, reason: str, error_class: str) -> None:
        key = msg.key()
        self._produce(
            self.topics.dead_letters,
            key.decode(errors="replace") if isinstance(key, bytes) else "",
            msg.value(),
            headers=headers_for(msg, reason, error_class, "worker"),
        )

    def poll(self) -> None:
        self._producer.poll(0)

    def wait(self, deliveries: list[Delivery], timeout_s: float) -> int:
        """Waits for these records' deliveries only; returns how many failed or are still out.

        Not ``flush``: it waits until the whole queue is empty, and with several threads
        sending (the API's concurrent task updates) records keep arriving behind each caller's
        own, so every caller waited for everyone's."""
        deadline = time.monotonic() + timeout_s
        while not all(d.done.is_set() for d in deliveries) and time.monotonic() < deadline:
            self._producer.poll(0.005)  # serves delivery reports, on whichever thread polls
        return sum(not d.done.is_set() or d.error is not None for d in deliveries)

    def flush(self, timeout_s: float) -> int:
        """Waits for every record; returns how many are still undelivered."""
        left: int = self._producer.flush(timeout_s)
        return left


# -- consuming ------------------------------------------------------------------------------
class AssignmentReader:
    def __init__(self, bootstrap: str, topic: str, worker_id: str, group: str) -> None:
        self.topic, self.worker_id, self.group = topic, worker_id, group
        self.partition = -1
        self.paused = False
        self._bootstrap = bootstrap
        self._consumer = consumer(bootstrap, group)
        # Asks where the partition ends. Not the reading client: the broker answers requests
        # of one connection in order, so its query would wait out the fetch long-poll.
        self._ends = consumer(bootstrap, None)
        self._ends_renew_at = 0.0
        self._committed = OFFSET_UNSET
        self._next = OFFSET_UNSET  # the offset after the last record read

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
        tp = TopicPartition(self.topic, self.partition)
        try:
            _, high = self._ends.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
        except KafkaException as exc:
            log.warning("end of %s[%d] unknown: %s", self.topic, self.partition, exc)
            if time.monotonic() >= self._ends_renew_at:
                self._new_ends()
            return None
        return int(high)

    def _new_ends(self) -> None:
        """Replace the client that asks where the partition ends, after a failed query.

        It only ever sends ListOffsets to the leader its metadata names, and nothing else it
        does refreshes that metadata (no fetch, no produce; the periodic refresh is 5 min):
        once a broker that led the partition is gone (kill -9 of one node of three) it would
        ask the dead node forever, and the worker, which starts no task before it has read up
        to that end, would stall for good. That was the three-node test's 1-in-6 failure. A
        new client bootstraps and looks the leader up afresh; at most every ENDS_RENEW_S, so a
        whole-cluster outage does not churn clients.
        """
        old, self._ends = self._ends, consumer(self._bootstrap, None)
        self._ends_renew_at = time.monotonic() + ENDS_RENEW_S
        old.close()

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
