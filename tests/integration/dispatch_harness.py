"""Real-Kafka harness for the dispatcher: a private prefix, the Dispatcher in a thread, scripted
fake workers (status heartbeats + an assignment reader) and read-backs of task-results."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from es_sched.dispatch.dispatcher import Dispatcher
from es_sched.domain.commands import Input
from es_sched.domain.events import Event, TaskCompleted
from es_sched.kafka.clients import producer
from es_sched.kafka.config_client import publish
from es_sched.kafka.topics import assignment_topic, topics_for
from es_sched.metrics import serve
from es_sched.serialization import decode_input, encode_event, sealed, wire
from es_sched.serialization.records import encode_ready
from testkit.kafka import Reader
from testkit.settings import BOOTSTRAP, kafka_connection, private_vars, settings_with, unique_name
from testkit.wait import wait_until

DISPATCH = {"heartbeat_s": 0.5, "lease_k": 3, "suspect_after_s": 2.0, "dead_after_s": 10.0}


class Bench:
    """One test's world: topics under a fresh prefix and a dispatcher over them."""

    def __init__(self, metrics_port: int = 0, **dispatch: Any) -> None:
        self.prefix = unique_name()
        tuned = {
            f"ES_SCHED_DISPATCH_{k.upper()}": str(v) for k, v in {**DISPATCH, **dispatch}.items()
        }
        self.settings = settings_with({**private_vars(self.prefix, 2, 2), **tuned})
        self.topics = topics_for(self.settings)
        self.producer = producer(kafka_connection(BOOTSTRAP))
        self.dispatcher = Dispatcher(self.settings)
        self.metrics = serve(self.dispatcher.registry, metrics_port)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.dispatcher.run(self.stop)
        except BaseException as exc:  # noqa: BLE001  (re-raised by start/close in the test)
            self.error = exc

    def start(self) -> None:
        self.thread.start()
        wait_until(
            lambda: self.dispatcher.started.is_set() or self.error is not None,
            60,
            "the dispatcher to start",
        )
        assert self.error is None, self.error

    def close(self) -> None:
        self.stop.set()
        self.thread.join(30)
        if self.metrics is not None:
            self.metrics.shutdown()
        assert self.error is None, self.error

    # -- inputs ----------------------------------------------------------------------------
    def ready(
        self,
        task_id: str,
        name: str = "enc",
        priority: int = 4,
        cpu: float = 1.0,
        workflow_id: str = "wf",
        started: datetime | None = None,
        **res: Any,
    ) -> None:
        value = encode_ready(
            workflow_id=workflow_id,
            task_id=task_id,
            ref=task_id,
            name=name,
            attempt=1,
            input={},
            priority=priority,
            resources={"cpu": cpu, **res},
            rate_limit_key=None,
            tenant=None,
            callback=False,
            workflow_started_at=started,
        )
        self.producer.produce(self.topics.ready, key=name.encode(), value=value)
        self.producer.poll(0)

    def flush(self) -> None:
        assert self.producer.flush(30) == 0

    def config(self, key: str, value: dict[str, Any] | None) -> None:
        publish(self.settings, key, value)

    def completed(self, task_id: str, workflow_id: str = "wf") -> None:
        event = Event(
            uuid.uuid4().hex,
            workflow_id,
            1,
            datetime.now(UTC),
            "test",
            workflow_id,
            TaskCompleted(task_id, {}),
        )
        self.producer.produce(
            self.topics.events, key=workflow_id.encode(), value=encode_event(event)
        )
        self.flush()

    # -- outputs ---------------------------------------------------------------------------
    def queued(self) -> int:
        return sum(sum(levels) for levels in self.dispatcher.core.queues.depth().values())


@dataclass
class FakeWorker:
    """A worker as the dispatcher sees it: status heartbeats listing what it runs, and a reader
    of its assignments (every partition, records addressed to it)."""

    bench: Bench
    worker_id: str
    cpu: float = 1.0
    version: str = "v1"
    types: list[str] = field(default_factory=lambda: ["enc"])
    gpus: list[wire.GpuStatus] = field(default_factory=list)
    every_s: float = 0.2
    assignments: list[wire.Assignment] = field(default_factory=list)
    cancels: list[wire.Cancel] = field(default_factory=list)
    running: set[str] = field(default_factory=set)
    lease_key: sealed.LeaseKey = field(default_factory=sealed.LeaseKey)  # ADR 74

    def __post_init__(self) -> None:
        self.stop, self.silent = threading.Event(), threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeWorker:
        self.reader = Reader(assignment_topic(self.bench.prefix, "default"))
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        self.reader.close()

    def finish(self, task_id: str) -> None:
        """Stop running it without a report: the next heartbeats no longer list it."""
        with self.lock:
            self.running.discard(task_id)

    def ids(self) -> list[str]:
        return [a.task_id for a in self.assignments]

    def _run(self) -> None:
        p, seen, last = producer(kafka_connection(BOOTSTRAP)), 0, 0.0
        while not self.stop.is_set():
            messages = self.reader.read()
            for msg in messages[seen:]:
                if (msg.key() or b"").decode() != self.worker_id:
                    continue
                record = wire.decode(msg.value() or b"")
                with self.lock:
                    if isinstance(record, wire.Assignment):
                        self.assignments.append(sealed.opened(record, self.lease_key))
                        self.running.add(record.task_id)
                    elif isinstance(record, wire.Cancel):
                        self.cancels.append(record)
                        self.running.discard(record.task_id)
            seen = len(messages)
            if not self.silent.is_set() and time.monotonic() - last >= self.every_s:
                last = time.monotonic()
                with self.lock:
                    status = wire.WorkerStatus(
                        self.worker_id,
                        "default",
                        self.version,
                        self.types,
                        self.cpu,
                        64_000,
                        gpus=self.gpus,
                        running=sorted(self.running),
                        concurrency=64,
                        sent_at=datetime.now(UTC).isoformat(),
                        lease_key=self.lease_key.public,
                    )
                p.produce(
                    self.bench.topics.worker_status,
                    key=self.worker_id.encode(),
                    value=wire.encode(status),
                )
                p.flush(10)


def task_results(reader: Reader) -> list[tuple[int, Input]]:
    """(record time in ms, decider input) of every record read so far."""
    return [(m.timestamp()[1], decode_input(m.value() or b"")) for m in reader.read()]


@contextmanager
def bench(config: dict[str, dict[str, Any]] | None = None, **dispatch: Any) -> Iterator[Bench]:
    """A started dispatcher; ``config`` records are on the config topic before it starts."""
    b = Bench(**dispatch)
    for key, value in (config or {}).items():
        b.config(key, value)
    b.start()
    try:
        yield b
    finally:
        b.close()
