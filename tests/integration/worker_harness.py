"""The worker SDK's counterpart in tests: ``Dispatcher`` plays the dispatcher (assignments and
cancels keyed by the worker id) and reads back what the worker wrote; ``Running`` runs a
``Worker`` in a thread; ``make_worker`` builds one with a small, fixed capacity."""

from __future__ import annotations

import threading
import uuid
from typing import Any

from es_sched.domain import commands as c
from es_sched.kafka.clients import producer
from es_sched.kafka.topics import assignment_topic, ensure_topics, topics_for
from es_sched.serialization import decode_input, encode_input, wire
from es_sched.settings import Settings
from es_sched.workers import Capacity, Worker
from testkit.kafka import Reader
from testkit.settings import BOOTSTRAP, kafka_connection, private_settings
from testkit.wait import wait_until

JSON = dict[str, Any]
ENDS = ("worker.task_completed", "worker.task_failed", "worker.task_cancelled")


class Dispatcher:
    """Plays the dispatcher and reads what the worker wrote."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topics = topics_for(settings)
        self.producer = producer(kafka_connection(BOOTSTRAP))
        self.results = Reader(self.topics.task_results)
        self.status = Reader(self.topics.worker_status)

    def assign(
        self, worker_id: str, task_type: str, task_input: JSON, **extra: Any
    ) -> wire.Assignment:
        task_id = extra.pop("task_id", None) or f"task-{uuid.uuid4().hex[:8]}"
        a = wire.Assignment(
            worker_id=worker_id,
            workflow_id=f"wf-{task_id}",
            task_id=task_id,
            task_type=task_type,
            attempt=extra.pop("attempt", 2),
            lease_epoch=extra.pop("lease_epoch", 3),
            lease_token=uuid.uuid4().hex,
            lease_expires_at=extra.pop("lease_expires_at", "2030-01-01T00:00:00+00:00"),
            input=task_input,
            **extra,
        )
        self._send(worker_id, wire.encode(a))
        return a

    def cancel(self, a: wire.Assignment, reason: str = "canceled") -> None:
        self.cancel_task(a.worker_id, a.task_id, a.lease_epoch, reason)

    def cancel_task(self, worker_id: str, task_id: str, epoch: int, reason: str) -> None:
        self._send(worker_id, wire.encode(wire.Cancel(worker_id, task_id, epoch, reason)))

    def _send(self, key: str, value: bytes) -> None:
        topic = assignment_topic(self.settings.kafka.topic_prefix, "default")
        self.producer.produce(topic, key=key.encode(), value=value)
        assert self.producer.flush(10) == 0

    def reports(self, task_id: str) -> list[c.WorkerReport]:
        out = []
        for msg in self.results.read():
            inp = decode_input(msg.value() or b"")
            if isinstance(inp, c.WorkerReport) and inp.task_id == task_id:
                out.append(inp)
        return out

    def types(self, task_id: str) -> list[str]:
        return [r.TYPE for r in self.reports(task_id)]

    def final(self, task_id: str, timeout_s: float = 15) -> c.WorkerReport:
        wait_until(lambda: any(t in ENDS for t in self.types(task_id)), timeout_s, task_id)
        return self.reports(task_id)[-1]

    def sentinel(self, workflow_id: str) -> None:
        """Write a report of a made-up task after all a stopped worker wrote for the workflow
        (the same key, so its partition, and after it) and wait to read it back: every report
        the worker wrote before has then been read too. How a test shows none came after."""
        task_id = f"sentinel-{uuid.uuid4().hex}"
        mark = c.ReportProgress(f"in-{task_id}", workflow_id, task_id=task_id)
        self.producer.produce(
            self.topics.task_results, key=workflow_id.encode(), value=encode_input(mark)
        )
        assert self.producer.flush(10) == 0
        wait_until(lambda: bool(self.reports(task_id)), 15, "the sentinel report")

    def statuses(self, key: str) -> list[wire.Record | None]:
        return [
            wire.decode(m.value()) if m.value() is not None else None
            for m in self.status.read()
            if m.key() == key.encode()
        ]

    def close(self) -> None:
        self.results.close()
        self.status.close()


class Running:
    def __init__(self, worker: Worker) -> None:
        self.worker, self.stop = worker, threading.Event()
        self.thread = threading.Thread(target=worker.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> Worker:
        self.thread.start()
        wait_until(
            lambda: self.worker.ready.is_set() or not self.thread.is_alive(), 30, "worker start"
        )
        assert self.worker.ready.is_set(), "the worker failed to start"
        return self.worker

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(60)
        assert not self.thread.is_alive()


def worker_settings(unique: str, partitions: int = 4) -> Settings:
    """Private topics for one worker test (``unique``: the test's prefix)."""
    s = private_settings(unique, partitions, partitions)
    ensure_topics(kafka_connection(BOOTSTRAP), topics_for(s))
    return s


def make_worker(settings: Settings, **kw: Any) -> Worker:
    kw.setdefault("heartbeat_s", 0.2)
    kw.setdefault("capacity", Capacity(cpu=2.0, memory_mb=4096))
    kw.setdefault("worker_id", f"w-{uuid.uuid4().hex[:8]}")
    # Starts reported before the handler runs, as these tests' report sequences say; the
    # deferred start (ADR 44, the SDK's default) is test_worker_start_report's.
    kw.setdefault("started_after_s", 0.0)
    return Worker(settings=settings, **kw)


def echoes_lease(report: c.WorkerReport, a: wire.Assignment) -> bool:
    return (report.worker_id, report.attempt, report.lease_epoch, report.lease_token) == (
        a.worker_id,
        a.attempt,
        a.lease_epoch,
        a.lease_token,
    ) and report.workflow_id == a.workflow_id
