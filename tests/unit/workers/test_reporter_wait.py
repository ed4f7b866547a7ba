"""workers.reports.Reporter.wait: a sender waits for its own records' deliveries, not for the
whole producer queue (``flush`` did, and the API's concurrent task updates each waited for
everyone's records: bench/api_workers.py, conductor-python SDK 116 -> 138 tasks/s)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError

from es_sched.workers import reports


class Producer:
    """Holds each record's delivery callback until ``deliver`` runs it (on a ``poll``)."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []
        self.ready: list[tuple[Any, KafkaError | None]] = []
        self.flushed = 0

    def produce(self, topic: str, key: bytes, value: bytes | None, on_delivery: Any) -> None:
        self.callbacks.append(on_delivery)

    def deliver(self, n: int, err: KafkaError | None = None) -> None:
        self.ready.append((self.callbacks[n], err))

    def poll(self, timeout: float) -> int:
        served, self.ready = self.ready, []
        for callback, err in served:
            callback(err, _Msg())
        return len(served)

    def flush(self, timeout: float) -> int:
        self.flushed += 1
        return 0


class _Msg:
    def topic(self) -> str:
        return "t.task-results"


def reporter() -> tuple[reports.Reporter, Producer]:
    r = reports.Reporter.__new__(reports.Reporter)
    r.delivery_failures = 0
    r._producer = fake = Producer()  # type: ignore[assignment]
    return r, fake


def test_a_sender_waits_for_its_own_records_only() -> None:
    r, fake = reporter()
    mine = reports.Delivery()
    r._produce("t.task-results", "wf", b"mine", mine)
    r._produce("t.task-results", "wf", b"someone else's")  # never delivered
    fake.deliver(0)
    assert r.wait([mine], timeout_s=5) == 0
    assert mine.done.is_set() and fake.flushed == 0


def test_a_failed_or_missing_delivery_is_counted() -> None:
    r, fake = reporter()
    failed, missing = reports.Delivery(), reports.Delivery()
    r._produce("t.task-results", "wf", b"a", failed)
    r._produce("t.task-results", "wf", b"b", missing)
    fake.deliver(0, KafkaError(KafkaError._MSG_TIMED_OUT))
    assert r.wait([failed, missing], timeout_s=0.05) == 2
    assert r.delivery_failures == 1
