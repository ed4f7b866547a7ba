"""The dispatcher's Kafka side, faked: its tests run the role's own code without a broker."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import TopicPartition

from es_sched.dispatch import records as dispatch_records
from es_sched.dispatch.core.placement import WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.dispatch.journal import LeaseJournal
from es_sched.dispatch.readers.config import ConfigReader
from es_sched.dispatch.readers.events import EventReader
from es_sched.dispatch.readers.ready import ReadyReader
from es_sched.dispatch.readers.worker_status import StatusReader
from es_sched.serialization import sealed, wire
from es_sched.serialization.records import encode_ready
from testkit.settings import private_vars, settings_with

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
LEASE_KEY = sealed.LeaseKey()  # worker w1's (ADR 74)
PART = 2  # the partition every consumed ``Record`` comes from


def ready(task_id: str, cpu: float = 2, **kw: Any) -> ReadyTask:
    """A task as the dispatcher reads it from a ready record."""
    raw = encode_ready(
        workflow_id=f"wf-{task_id}",
        task_id=task_id,
        ref="step",
        name="encode",
        attempt=kw.pop("attempt", 1),
        input={"n": 1},
        priority=kw.pop("priority", 4),
        resources={"cpu": cpu},
        rate_limit_key=None,
        tenant=None,
        callback=False,
        workflow_started_at=T0,
    )
    return dispatch_records.ready_task(raw, T0, T0)


def ready_raw(task_id: str) -> bytes:
    """A ready record of ``task_id`` (2 cpus of type ``encode``)."""
    return encode_ready(
        workflow_id=f"wf-{task_id}",
        task_id=task_id,
        ref="step",
        name="encode",
        attempt=1,
        input={},
        priority=4,
        resources={"cpu": 2},
        rate_limit_key=None,
        tenant=None,
        callback=False,
        workflow_started_at=T0,
    )


def worker(wid: str, seen: datetime, cpu: float = 4) -> WorkerView:
    return WorkerView(wid, "default", "1.0", frozenset({"encode"}), cpu, 8000, last_seen=seen)


@dataclass
class Record:
    """A consumed record, as the dispatcher's readers read it (from partition ``PART``)."""

    topic_: str
    v: bytes | None
    offset_: int = 0
    k: str = ""

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return PART

    def offset(self) -> int:
        return self.offset_

    def timestamp(self) -> tuple[int, int]:
        return 1, int(T0.timestamp() * 1000)

    def key(self) -> bytes:
        return self.k.encode()

    def value(self) -> bytes | None:
        return self.v


def msg(topic: str, value: bytes | None, offset: int = 0, key: str = "") -> Any:
    """A ``Record`` typed as the ``Message`` the readers take."""
    return Record(topic, value, offset, key)


@dataclass
class Msg:
    """A journal record as ``read_partition`` yields it."""

    k: str
    v: bytes | None

    def key(self) -> bytes:
        return self.k.encode()

    def value(self) -> bytes | None:
        return self.v


@dataclass
class FakeOutput:
    """Records what the dispatcher produces and when it waits for delivery."""

    log: list[tuple[str, ...]] = field(default_factory=list)
    journal: list[Msg] = field(default_factory=list)
    dead_letters: list[Any] = field(default_factory=list)
    stamps: list[tuple[str, datetime]] = field(default_factory=list)  # topic, record time
    values: list[tuple[str, bytes | None]] = field(default_factory=list)  # topic, value

    def produce(
        self, topic: str, key: str, value: bytes | None, now: datetime, partition: int = -1
    ) -> None:
        self.log.append(("produce", topic, key))
        self.stamps.append((topic, now))
        self.values.append((topic, value))
        if topic.endswith(".leases"):
            self.journal.append(Msg(key, value))

    def delivered_all(self) -> bool:
        self.log.append(("delivered",))
        return True

    def dead(self, msg: Any, exc: Exception) -> None:
        self.dead_letters.append((msg, exc))


class FakeTail:
    """A group-less tail (``kafka.tail.Tail``): ``poll`` hands what was put in ``records``."""

    def __init__(self) -> None:
        self.records: list[Any] = []

    def poll(self, *_: Any) -> list[Any]:
        taken, self.records = self.records, []
        return taken

    def close(self) -> None:
        pass


class FakeConsumer:
    """The ready consumer: what the tick asked of it, and what it commits."""

    def __init__(self, out: FakeOutput) -> None:
        self.out = out
        self.records: list[Any] = []
        self.calls: list[tuple[Any, ...]] = []
        self.commits: list[list[TopicPartition]] = []

    def poll(self, timeout: float) -> Any:
        self.calls.append(("poll", timeout))
        return self.records.pop(0) if self.records else None

    def consume(self, n: int, timeout: float) -> list[Any]:
        self.calls.append(("consume", n, timeout))
        taken, self.records = self.records[:n], self.records[n:]
        return taken

    def commit(self, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.out.log.append(("commit",))
        self.commits.append(offsets)

    def assignment(self) -> list[TopicPartition]:  # for the lag gauge
        return []

    def position(self, parts: list[TopicPartition]) -> list[TopicPartition]:
        return parts


@dataclass
class OnFakes:
    """A dispatcher and the fakes it reads from and writes to."""

    d: Dispatcher
    out: FakeOutput
    ready: FakeConsumer
    status: FakeTail
    events: FakeTail


def w1_status(d: Dispatcher, now: datetime, running: list[str] | None = None, **kw: Any) -> Any:
    """A status record of worker ``w1`` (key ``LEASE_KEY`` unless ``lease_key`` says), as read
    from the worker-status topic."""
    s = wire.WorkerStatus(
        "w1",
        "default",
        "1.0",
        ["encode"],
        100.0,
        8000,
        running=running or [],
        concurrency=8,
        sent_at=now.isoformat(),
        **{"lease_key": LEASE_KEY.public, **kw},
    )
    return msg(d.topics.worker_status, wire.encode(s), key="w1")


def on_fakes(
    commit_every_ms: int = 200,
    clock: Callable[[], datetime] = lambda: T0,
    cpu: float = 100,
    env: dict[str, str] | None = None,
) -> OnFakes:
    """A dispatcher with its readers on fakes (no broker), and one worker ``w1`` in its fleet;
    ``env``: more ``ES_SCHED_*`` variables."""
    vars_ = {
        **private_vars("p"),
        "ES_SCHED_DISPATCH_COMMIT_EVERY_MS": str(commit_every_ms),
        **(env or {}),
    }
    d = Dispatcher(settings_with(vars_), clock=clock, token=lambda: "tok")
    out, status, events = FakeOutput(), FakeTail(), FakeTail()
    consumer = FakeConsumer(out)
    d.output = out  # type: ignore[assignment]
    d.journal = LeaseJournal("unused:9092", d.topics.leases, out)  # type: ignore[arg-type]
    d.config = ConfigReader(FakeTail(), out)  # type: ignore[arg-type]
    d.status = StatusReader(status, out)  # type: ignore[arg-type]
    d.events = EventReader(events)  # type: ignore[arg-type]
    d.ready = ReadyReader(consumer, d.topics.ready, out, clock)  # type: ignore[arg-type]
    d.core.fleet.upsert(worker("w1", clock(), cpu=cpu))
    d.lease_keys.hear("w1", LEASE_KEY.public, clock())  # as its status would (ADR 74)
    return OnFakes(d, out, consumer, status, events)
