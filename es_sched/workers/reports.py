"""What a worker writes: the decider inputs it reports and the producer that sends them.

- ``started/progressed/completed/failed/cancelled/declined``: the decider inputs a worker
  sends, echoing task id, attempt, worker id, lease epoch and token; their input ids are
  uuid5s of those (the token included: only the lease's holder can know them, ADR 74), so a
  resent report is deduplicated by the decider.
- ``Reporter``: one idempotent producer for decider inputs (``<prefix>.task-results``, keyed by
  workflow id), worker status, progress and tombstones (``<prefix>.worker-status``) and dead
  letters. Safe to call from handler threads; ``wait`` waits for one caller's own records.

Split from ``es_sched.workers.runner`` (the reading side) to keep each under ~400 lines.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message

from es_sched.domain import commands as c
from es_sched.domain.ids import NAMESPACE
from es_sched.errors import InfrastructureError
from es_sched.kafka.clients import producer
from es_sched.kafka.connection import KafkaConnection
from es_sched.kafka.dead_letters import headers_for
from es_sched.kafka.topics import Topics
from es_sched.serialization import encode_input, wire
from es_sched.workers.stale import Stale

log = logging.getLogger(__name__)
HANDED_BACK = "worker shutting down; handed back"
MAX_REASON = 1900  # the decider's schema allows 2000 characters
# A completion waits out the producer's linger before the decider can see it, on each step of
# a workflow, so it lingers as briefly as the dispatcher's records (ADR 31).
REPORT_LINGER_MS = 1


def progress_key(worker_id: str, task_id: str) -> str:
    return f"{worker_id}/{task_id}"


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


# -- reports --------------------------------------------------------------------------------
def _report_fields(a: wire.Assignment, worker_id: str, what: str) -> dict[str, Any]:
    # The token is part of the id (ADR 74): a report's id is known only to the lease's holder,
    # so no forged report can take it first and have the decider drop the real one as a
    # duplicate of an input it already refused.
    key = f"worker:{a.task_id}:{a.attempt}:{a.lease_epoch}:{a.lease_token}:{what}"
    input_id = uuid.uuid5(NAMESPACE, key)
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


def completed(
    a: wire.Assignment,
    worker_id: str,
    output: dict[str, Any],
    started: bool = False,
    logs: list[dict[str, Any]] | None = None,
) -> c.ReportCompleted:
    """``started``: the start was not reported on its own; the decider records it (ADR 44).
    ``logs``: the attempt's lines, bounded by the caller (``tasklogs``, ADR 60)."""
    fields = _report_fields(a, worker_id, "completed")
    return c.ReportCompleted(**fields, output=output, started=started, logs=logs or [])


def failed(
    a: wire.Assignment,
    worker_id: str,
    reason: str,
    terminal: bool,
    output: dict[str, Any] | None = None,
    started: bool = False,
    logs: list[dict[str, Any]] | None = None,
    traceback: str = "",
    host_fault: bool = False,
) -> c.ReportFailed:
    """``logs`` and ``traceback`` bounded by the caller (``tasklogs``, ADR 60). ``host_fault``:
    the handler raised ``HostFault``; the failure counts against this worker (ADR 58)."""
    return c.ReportFailed(
        **_report_fields(a, worker_id, "failed"),
        reason=reason[:MAX_REASON],
        terminal=terminal,
        output=output or {},
        started=started,
        logs=logs or [],
        traceback=traceback,
        host_fault=host_fault,
    )


def cancelled(a: wire.Assignment, worker_id: str, reason: str) -> c.ReportCancelled:
    return c.ReportCancelled(
        **_report_fields(a, worker_id, "cancelled"), reason=reason[:MAX_REASON]
    )


def declined(a: wire.Assignment, worker_id: str, reason: str) -> c.ReportDeclined:
    """The live lease given back unused: the task is queued again, its attempt not spent."""
    return c.ReportDeclined(**_report_fields(a, worker_id, "declined"), reason=reason[:MAX_REASON])


def not_started(a: wire.Assignment, worker_id: str, stale: Stale) -> c.WorkerReport:
    """What a worker sends for an assignment it must not start (``StaleLeases.why_not``): an
    audit record when a cancel ended the lease, else the lease given back, fenced by its epoch
    (the decider refuses it as stale if the dispatcher had ended the lease already)."""
    if stale.cancelled:
        return cancelled(a, worker_id, stale.reason)
    return declined(a, worker_id, stale.reason)


# -- producing ------------------------------------------------------------------------------
class Delivery:
    """One record's delivery report, for a sender that waits for its own records only."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: KafkaError | None = None


class Reporter:
    def __init__(self, bootstrap: KafkaConnection, topics: Topics, **extra: Any) -> None:
        self.topics = topics
        self.delivery_failures = 0
        self._producer = producer(bootstrap, **{"linger.ms": REPORT_LINGER_MS, **extra})

    def _produce(
        self,
        topic: str,
        key: str,
        value: bytes | None,
        delivery: Delivery | None = None,
        **extra: Any,
    ) -> None:
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
