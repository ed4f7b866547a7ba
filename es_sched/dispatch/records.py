"""Kafka records <-> the dispatcher core's objects; pure functions, no I/O.

- a ready record (``es_sched.serialization.records.decode_ready``) -> ``ReadyTask``
- a ``WorkerStatus`` report -> ``WorkerView`` (GPU free memory as reported)
- a core ``Assignment`` -> the wire ``Assignment`` for the worker and the ``DispatchTask``
  decider input; an expired or preempted lease -> ``Cancel`` + ``ExpireLease``
- a task and its lease <-> a lease journal record (``<prefix>.leases``, ADR 14)
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from es_sched.dispatch.core.engine import Assignment as CoreAssignment
from es_sched.dispatch.core.engine import Journaled
from es_sched.dispatch.core.leases import Lease
from es_sched.dispatch.core.placement import Gpu, WorkerView
from es_sched.dispatch.core.queues import ReadyTask
from es_sched.domain.commands import DispatchTask, ExpireLease
from es_sched.serialization import wire
from es_sched.serialization.records import (
    HeldLease,
    LeaseRecord,
    ReadyRecord,
    decode_ready,
    ready_limits,
    ready_sla,
)


def ready_task(
    raw: bytes | None, record_time: datetime | None, now: datetime, partition: int | None = None
) -> ReadyTask:
    """A ready record as a queue entry. Aging counts from the record's time (else now); the
    workflow's start time orders tasks inside a level (the record's time when it lacks one)."""
    enqueued = min(record_time, now) if record_time is not None else now
    return _task_of(decode_ready(raw), enqueued, partition)


def _task_of(doc: ReadyRecord, enqueued: datetime, partition: int | None) -> ReadyTask:
    tier, deadline, after = ready_sla(doc)
    return ReadyTask(
        task_id=doc["task_id"],
        workflow_id=doc["workflow_id"],
        task_type=doc["name"],
        priority=doc.get("priority", 4),
        enqueued_at=enqueued,
        workflow_started_at=doc.get("workflow_started_at") or enqueued,
        attempt=doc.get("attempt", 1),
        tenant=doc.get("tenant"),
        rate_limit_key=doc.get("rate_limit_key"),
        resources=doc.get("resources") or {},
        limits=ready_limits(doc),
        partition=partition,
        payload=cast(dict[str, Any], doc),
        steps_to_end=doc.get("steps_to_end", 0),
        sla_tier=tier,
        deadline=deadline,
        after=after,
    )


def worker_view(status: wire.WorkerStatus, seen: datetime) -> WorkerView:
    """The fleet's view of one report, heard from at ``seen`` (``liveness.heard_at``: when read,
    unless the report is older than a dead worker's silence)."""
    return WorkerView(
        worker_id=status.worker_id,
        pool=status.pool or "default",
        version=status.version,
        types=frozenset(status.types),
        cpu=status.cpu,
        memory_mb=status.memory_mb,
        gpus=[Gpu(g.index, g.total_mb, g.free_mb) for g in status.gpus],
        custom=dict(status.custom),
        labels=dict(status.labels),
        slots=max(1, status.concurrency),
        last_seen=seen,
    )


def assignment(a: CoreAssignment, deployment: str = "") -> tuple[wire.Assignment, DispatchTask]:
    """The wire assignment (stamped with the dispatcher's ``deployment``, ADR 63) and the
    decider's input of one grant."""
    task, lease = a.task, a.lease
    record = wire.Assignment(
        worker_id=lease.worker_id,
        workflow_id=task.workflow_id,
        task_id=task.task_id,
        task_type=task.task_type,
        attempt=task.attempt,
        lease_epoch=lease.epoch,
        lease_token=lease.token,
        lease_expires_at=lease.expires_at.isoformat(),
        input=dict(task.payload.get("input") or {}),
        gpu=a.placement.gpu,
        priority=task.priority,
        resources=dict(a.placed_by),  # corrected by the learned cost, if it was (ADR 66)
        ref=str(task.payload.get("ref") or ""),
        deployment=deployment,
    )
    dispatched = DispatchTask(
        # The token too: an epoch granted again after its grant was lost is a new input (ADR 50).
        f"dispatch:{task.task_id}:{lease.epoch}:{lease.token}",
        task.workflow_id,
        task_id=task.task_id,
        attempt=task.attempt,
        worker_id=lease.worker_id,
        lease_epoch=lease.epoch,
        lease_token=lease.token,
    )
    return record, dispatched


def take_back(lease: Lease, workflow_id: str, reason: str) -> tuple[wire.Cancel, ExpireLease]:
    """The worker stops the task; the decider hears its lease ended (attempt not counted)."""
    cancel = wire.Cancel(lease.worker_id, lease.task_id, lease.epoch, reason)
    expired = ExpireLease(
        f"expire:{lease.task_id}:{lease.epoch}",
        workflow_id,
        task_id=lease.task_id,
        lease_epoch=lease.epoch,
    )
    return cancel, expired


# Ends a worker did not report: the task was canceled (cancel, terminate, workflow timeout,
# parent ended) or timed out. Its worker may still be running it and must be told to stop.
ENDED_ELSEWHERE = {"task.canceled": "canceled", "task.timed_out": "timed out"}


def stop_on_worker(lease: Lease, event_type: str) -> wire.Cancel | None:
    """The ``Cancel`` for the worker holding ``lease`` when ``event_type`` ended its task
    without the worker's report; None when the worker itself reported the end."""
    reason = ENDED_ELSEWHERE.get(event_type)
    return (
        None if reason is None else wire.Cancel(lease.worker_id, lease.task_id, lease.epoch, reason)
    )


def journal_record(
    task: ReadyTask, last_epoch: int, lease: Lease | None = None, gpu: int | None = None
) -> LeaseRecord:
    """The journal's record of a task: waiting at the head of its queue (no lease) or leased."""
    held = (
        None
        if lease is None
        else HeldLease(lease.worker_id, lease.epoch, lease.token, lease.started_at, gpu)
    )
    ready = cast(ReadyRecord, task.payload)  # the ready record the task was read from
    return LeaseRecord(task.task_id, ready, task.enqueued_at, last_epoch, held)


def journaled(record: LeaseRecord, partition: int) -> Journaled:
    """A journal record of ready ``partition``'s task, as the core resumes it
    (``DispatchCore.resume`` sets the expiry)."""
    task = _task_of(record.ready, record.enqueued_at, partition)
    held = record.lease
    lease = (
        None
        if held is None
        else Lease(
            task.task_id,
            task.attempt,
            held.worker_id,
            held.epoch,
            held.token,
            held.granted_at,
            held.granted_at,
            task.priority,
            task.sla_tier,
        )
    )
    return Journaled(task, record.last_epoch, lease, None if held is None else held.gpu)
