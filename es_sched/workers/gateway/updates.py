"""An HTTP worker's task update as the reports a Kafka worker sends (ADR 24 b, c, d).

- The caller's lease is the gateway store's row for the task: it is the caller's when the row's
  HTTP worker is the caller (or the caller gives none) and the dispatcher has not ended it.
- Owned: ``IN_PROGRESS`` is a progress report (a ``progress`` record extends the gateway's
  leases at the dispatcher, a ``worker.task_progress`` input resets the response timeout);
  ``COMPLETED``/``FAILED``/``FAILED_WITH_TERMINAL_ERROR`` are the SDK's completed/failed
  reports with the gateway's lease. ``logs`` (ADR 60): an ``IN_PROGRESS`` update's are kept
  in the store (``add_logs``, as ``POST /api/tasks/{taskId}/log``'s) and their last lines are
  its progress message; the outcome carries the kept lines and its own, bounded
  (``tasklogs.bounded``), to the decider.
- Idempotent: every input id is a uuid5 of task, attempt, epoch and what the report says, so
  the SDK's retry of one result is one input to the decider; the first outcome is kept in the
  store, so the retry gets the same answer, and a different second outcome is still sent (the
  decider refuses and records it) and answered 409.
- Not owned (no row, another HTTP worker's, a lease the dispatcher ended): the report goes to
  ``task-results`` with the caller's claim (its worker id, no token) so the decider refuses it
  and records ``task.completion_rejected``; the answer is 404 or 409 naming the reason and the
  input id (header ``X-Es-Sched-Input-Id``) whose refusal the log will hold.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import orjson

from es_sched.domain import commands as c
from es_sched.domain.ids import NAMESPACE
from es_sched.errors import InfrastructureError
from es_sched.serialization import wire
from es_sched.workers import reports, tasklogs
from es_sched.workers.gateway.leases import HeldLease, as_assignment
from es_sched.workers.gateway.worker import Gateway

DELIVERY_S = 10.0
JSON = dict[str, Any]


@dataclass(frozen=True)
class Update:
    workflow_id: str
    task_id: str
    status: str
    output: JSON
    reason: str
    worker_id: str  # the HTTP worker's, "" when it gave none
    logs: list[JSON]  # ``tasklogs.line``s
    callback_after_s: int


@dataclass(frozen=True)
class Answer:
    status: int  # 200, or the 4xx of a refused update
    message: str
    input_id: str  # of the outcome (or claim) sent
    task_type: str | None  # the lease's, for update-v2's next poll


def _id(*parts: object) -> str:
    return str(uuid.uuid5(NAMESPACE, ":".join(str(p) for p in parts)))


def _digest(doc: Any) -> str:
    return hashlib.sha256(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _outcome(
    a: wire.Assignment, worker_id: str, u: Update, logs: list[JSON] | None = None
) -> c.WorkerReport:
    if u.status == "COMPLETED":
        return reports.completed(a, worker_id, u.output, logs=logs)
    terminal = u.status == "FAILED_WITH_TERMINAL_ERROR"
    return reports.failed(a, worker_id, u.reason or u.status, terminal, u.output, logs=logs)


def _progress(gw: Gateway, a: wire.Assignment, u: Update, sent: list[reports.Delivery]) -> None:
    lines = [x["log"] for x in u.logs]
    message = "\n".join(lines)[-reports.MAX_REASON :] if lines else "IN_PROGRESS"
    # The lines' texts, not their times: a line without one is timed on arrival, and a retry
    # of the update must be the same input.
    what = _digest([u.status, lines, u.output, u.callback_after_s])
    report = c.ReportProgress(
        # The token in the id, as in every worker report (``reports._report_fields``, ADR 74).
        input_id=_id(
            "gateway", a.task_id, a.attempt, a.lease_epoch, a.lease_token, "progress", what
        ),
        workflow_id=a.workflow_id,
        task_id=a.task_id,
        attempt=a.attempt,
        worker_id=a.worker_id,
        lease_epoch=a.lease_epoch,
        lease_token=a.lease_token,
        percent=0.0,
        message=message,
    )
    record = wire.Progress(a.worker_id, a.task_id, a.lease_epoch, 0.0, message, reports.now_iso())
    sent += [reports.Delivery(), reports.Delivery()]
    gw.reporter.status(record, reports.progress_key(a.worker_id, a.task_id), sent[-2])
    gw.reporter.send(report, sent[-1])


def _claim(
    gw: Gateway, u: Update, lease: HeldLease | None, attempt: int, sent: list[reports.Delivery]
) -> str:
    """The caller's claim, sent for the decider to refuse and record."""
    # No lease held: epoch 1 and no token. Epochs count from 1 (the schema refuses 0, so such a
    # claim was dead-lettered, not recorded), and no live lease has an empty token, so the
    # decider records it as ``task.completion_rejected`` (found by the hostile input campaign).
    epoch = lease.lease_epoch if lease is not None else 1
    claimer = u.worker_id or "http-worker"
    a = wire.Assignment(claimer, u.workflow_id, u.task_id, "", attempt, epoch, "", "", {})
    report = _outcome(a, claimer, u)
    claim_id = _id("gateway-claim", u.task_id, claimer, attempt, epoch, u.status)
    sent.append(reports.Delivery())
    gw.reporter.send(replace(report, input_id=claim_id), sent[-1])
    return claim_id


def apply(gw: Gateway, u: Update, attempt_of: Callable[[str], int | None]) -> Answer:
    """Send what ``u`` means to the decider and say how the HTTP call is answered; raises
    ``InfrastructureError`` when the reports could not be delivered (the caller retries)."""
    sent: list[reports.Delivery] = []  # this update's records, delivered before it answers
    if u.status == "IN_PROGRESS":
        lease, first = gw.store.lease(u.task_id), None
    else:  # the first outcome is recorded in the same round trip, if the lease is the caller's
        lease, first = gw.store.end(u.task_id, u.workflow_id, u.worker_id, u.status)
    refused: tuple[int, str] | None = None
    if lease is None or lease.workflow_id != u.workflow_id:
        refused = (
            404,
            f"task {u.task_id} of workflow {u.workflow_id} is not leased to an "
            "HTTP worker (not polled through a gateway, or forgotten)",
        )
    elif u.worker_id and u.worker_id != lease.http_worker_id:
        refused = (
            409,
            f"task {u.task_id} is leased to worker {lease.http_worker_id!r}, not {u.worker_id!r}",
        )
    elif lease.lease_over is not None:
        refused = (409, f"the lease of task {u.task_id} ended: {lease.lease_over}")
    if refused is not None:
        attempt = lease.attempt if lease is not None else (attempt_of(u.task_id) or 1)
        claim_id = _claim(gw, u, lease, attempt, sent)
        _delivered(gw, sent)
        return Answer(refused[0], refused[1], claim_id, None)
    assert lease is not None
    gw.heard(lease.task_type)
    a = as_assignment(lease)
    if u.status == "IN_PROGRESS":
        gw.store.add_logs(u.task_id, u.logs)
        _progress(gw, a, u, sent)
        _delivered(gw, sent)
        return Answer(200, u.task_id, "", lease.task_type)
    # A retried outcome reads the same kept lines (they go only with the lease row), so its
    # report is the first one again: one input to the decider.
    logs = tasklogs.bounded(gw.store.logs(u.task_id) + u.logs, gw.settings.worker.log_max_chars)
    report = _outcome(a, lease.gateway_id, u, logs)
    sent.append(reports.Delivery())  # again on a retry: the same input id, one input to the decider
    gw.reporter.send(report, sent[-1])
    _delivered(gw, sent)
    if lease.gateway_id == gw.worker_id:
        gw.forget(u.task_id)
    if first != u.status:
        return Answer(409, f"task {u.task_id} was already reported {first}", report.input_id, None)
    return Answer(200, u.task_id, report.input_id, lease.task_type)


def _delivered(gw: Gateway, sent: list[reports.Delivery]) -> None:
    """Waits for this update's own records (not the whole producer queue: ``Reporter.wait``)."""
    if gw.reporter.wait(sent, DELIVERY_S) > 0:
        raise InfrastructureError("the task-results topic did not take the report")
