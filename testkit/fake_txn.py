"""A scripted transactional producer, group consumer and role for ``TransactionalLoop``'s
unit tests (tests/unit/kafka/test_transactional_loop.py): each fake call pops the next scripted
outcome (success, a ``KafkaError``, a hang, or a ``KafkaError`` after a pause: ``Late``)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from es_sched.kafka.dead_letters import Headers
from es_sched.kafka.transactional import TransactionalLoop
from es_sched.kafka.txn_role import Batch, Out

HANG = "hang"


@dataclass(frozen=True)
class Late:
    """The call fails with ``error`` after ``seconds``: the process was paused inside it (a
    SIGSTOP, a stalled VM), the fault itself, not a wait for one."""

    seconds: float
    error: KafkaError


Outcome = KafkaError | str | Late | None


def retriable(code: int = KafkaError._TIMED_OUT) -> KafkaError:
    return KafkaError(code, "scripted", retriable=True)


def abortable(code: int = KafkaError.INVALID_TXN_STATE) -> KafkaError:
    return KafkaError(code, "scripted", txn_requires_abort=True)


def fatal(code: int = KafkaError._INCONSISTENT) -> KafkaError:
    return KafkaError(code, "scripted", fatal=True)


class FakeProducer:
    """Records every call; ``script[name]`` holds the outcomes of that call's next tries."""

    def __init__(self, script: dict[str, list[Outcome]] | None = None) -> None:
        self.script = {k: list(v) for k, v in (script or {}).items()}
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.produced: list[tuple[str, bytes | str | None, bytes | str | None, int]] = []
        self.full = 0  # produce() raises BufferError this many times first
        self.release = threading.Event()  # ends a scripted hang
        self.closed = threading.Event()

    def _do(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        todo = self.script.get(name)
        outcome = todo.pop(0) if todo else None
        if isinstance(outcome, str):  # HANG (KafkaError.__eq__ must not meet a str)
            self.release.wait(30)
        elif isinstance(outcome, Late):
            time.sleep(outcome.seconds)
            raise KafkaException(outcome.error)
        elif isinstance(outcome, KafkaError):
            raise KafkaException(outcome)

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def init_transactions(self, timeout: float = -1) -> None:
        self._do("init_transactions", timeout)

    def begin_transaction(self) -> None:
        self._do("begin_transaction")

    def produce(
        self,
        topic: str,
        value: str | bytes | None = None,
        key: str | bytes | None = None,
        partition: int = -1,
        *,
        headers: Headers | None = None,
    ) -> None:
        if self.full:
            self.full -= 1
            raise BufferError("queue full")
        self.produced.append((topic, key, value, partition))

    def poll(self, timeout: float = -1) -> int:
        self.calls.append(("poll", (timeout,)))
        return 0

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float = -1
    ) -> None:
        offsets = [(tp.topic, tp.partition, tp.offset) for tp in positions]
        self._do("send_offsets_to_transaction", offsets, group_metadata)

    def commit_transaction(self, timeout: float = -1) -> None:
        self._do("commit_transaction", timeout)

    def abort_transaction(self, timeout: float = -1) -> None:
        self._do("abort_transaction", timeout)

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        return None

    def close(self) -> bool:
        self.closed.set()
        return True


class FakeClients:
    """Hands out the scripted producers in order (a fresh, well-behaved one when they run out)."""

    def __init__(self, *producers: FakeProducer) -> None:
        self.queue = list(producers)
        self.made: list[FakeProducer] = []
        self.configs: list[tuple[str | None, dict[str, Any]]] = []

    def producer(self, transactional_id: str | None = None, **extra: Any) -> FakeProducer:
        self.configs.append((transactional_id, extra))
        p = self.queue.pop(0) if self.queue else FakeProducer()
        self.made.append(p)
        return p


class FakeConsumer:
    def __init__(self, batches: list[list[Message]] | None = None) -> None:
        self.batches = list(batches or [])
        self.assigned = [TopicPartition("in", 0), TopicPartition("in", 1)]
        self.committed_offsets = {("in", 0): 40}
        self.committed_errors: list[KafkaError] = []
        self.seeks: list[tuple[str, int, int]] = []
        self.calls: list[tuple[int, float]] = []  # (num_messages, timeout) of each consume
        self.rest: list[Message] = []

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        """A scripted batch is what has arrived by the time a waiting call returns: a call
        with ``timeout=0`` takes only what is left of it, a waiting one starts the next."""
        self.calls.append((num_messages, timeout))
        if timeout != 0 and not self.rest and self.batches:
            self.rest = self.batches.pop(0)
        got, self.rest = self.rest[:num_messages], self.rest[num_messages:]
        return got

    def assignment(self) -> list[TopicPartition]:
        return list(self.assigned)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 7 + tp.partition) for tp in partitions]

    def committed(
        self, partitions: list[TopicPartition], timeout: float = -1
    ) -> list[TopicPartition]:
        if self.committed_errors:
            raise KafkaException(self.committed_errors.pop(0))
        known = self.committed_offsets
        return [
            TopicPartition(tp.topic, tp.partition, known.get((tp.topic, tp.partition), -1001))
            for tp in partitions
        ]

    def seek(self, partition: TopicPartition) -> None:
        self.seeks.append((partition.topic, partition.partition, partition.offset))

    def consumer_group_metadata(self) -> Any:
        return "group-metadata"


class FakeRole:
    """Returns its batches one per step, then stops the loop."""

    def __init__(self, stop: threading.Event, *batches: Batch) -> None:
        self.stop, self.batches = stop, list(batches)
        self.seen: list[list[Message]] = []
        self.rewinds: list[bool] = []
        self.ticks = 0

    def step(self, records: list[Message]) -> Batch | None:
        self.seen.append(records)
        if self.batches:
            return self.batches.pop(0)
        self.stop.set()
        return None

    def rewind(self, producer_lost: bool) -> None:
        self.rewinds.append(producer_lost)

    def tick(self) -> None:
        self.ticks += 1


def batch(committed: list[str], name: str = "b1") -> Batch:
    records = [Out("events", "wf-1", b"e1"), Out("timers", b"t-1", None, [("h", "v")], 2)]
    return Batch(records, {("in", 1): 11, ("in", 0): 5}, lambda: committed.append(name))


def run_loop(
    clients: FakeClients,
    *batches: Batch,
    consumer: FakeConsumer | None = None,
    txn_ms: int = 30_000,
    call_timeout_s: float = 10.0,
    prompt: bool = False,
) -> tuple[FakeRole, FakeConsumer]:
    stop = threading.Event()
    role, cons = FakeRole(stop, *batches), consumer or FakeConsumer()
    loop = TransactionalLoop(
        clients, "p-decider-0", "decider", txn_ms, call_timeout_s, 0.3, prompt=prompt
    )
    loop.run(stop, cons, role, 100, 0.05)
    return role, cons
